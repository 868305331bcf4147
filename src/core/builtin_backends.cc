// Registers every backend built into the library, one line each; the order here is the order of
// `attnkit list`. `auto`'s preference order is written in registry.cc.
#include "core/builtin_backends.h"

namespace attnkit {

void register_reference_backend(Registry& registry);
void register_cpu_backend(Registry& registry);
#ifdef ATTNKIT_WITH_CUDA
void register_cuda_naive_backend(Registry& registry);
void register_planned_backend(Registry& registry);
void register_hopper_backend(Registry& registry);
void register_mla_backend(Registry& registry);
void register_jit_backend(Registry& registry);
#endif

void register_builtin_backends(Registry& registry) {
  register_reference_backend(registry);
  register_cpu_backend(registry);
#ifdef ATTNKIT_WITH_CUDA
  register_cuda_naive_backend(registry);
  register_planned_backend(registry);
  register_hopper_backend(registry);
  register_mla_backend(registry);
  register_jit_backend(registry);
#endif
}

}  // namespace attnkit
