// The decode kernel's host side: a checked KernelKey to one template instance (select.cuh),
// shared-memory opt-in, occupancy for the planner, and the checked launch.
#include "backends/planned/kernels/decode_kernel.cuh"
#include "backends/planned/kernels/select.cuh"

#include <atomic>

#include "cuda/check.h"
#include "cuda/memory.h"
#include "cuda/smem_opt_in.h"

namespace attnkit::planned {

namespace {

template <typename C>
void set_smem_limit() {
  static cuda::SmemOptIn smem_opt_in;  // above 48 KB, once a device
  smem_opt_in.ensure(reinterpret_cast<const void*>(decode_kernel<C>), C::kSmemBytes);
}

template <typename C>
int ctas_per_sm() {
  set_smem_limit<C>();
  int n = 0;
  ATTNKIT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, decode_kernel<C>, C::kThreads, C::kSmemBytes));
  return n;
}

template <typename C>
void launch(const DecodeParams& p, cudaStream_t stream) {
  set_smem_limit<C>();
  // Programmatic serialisation where the cache store kernel runs just before: the kernel may
  // launch while the store runs, and waits for it (griddepcontrol.wait) before its first cache
  // read; the launch latency is hidden. Only the plan is read before that wait, so any kernel
  // could come before; after other kernels it measured no faster on the H200 (0.995-1.000).
  cudaLaunchAttribute attrs[2]{};
  attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[0].val.programmaticStreamSerializationAllowed = p.new_k == nullptr ? 1 : 0;
  // Cooperative (every CTA resident at once, or the launch fails) where asked for and this
  // instance's residency holds the grid: then all_wait merges may wait on other CTAs.
  static const int resident = [] {
    int device = 0, supported = 0;
    ATTNKIT_CUDA_CHECK(cudaGetDevice(&device));
    ATTNKIT_CUDA_CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrCooperativeLaunch, device));
    return supported != 0 ? ctas_per_sm<C>() * cuda::device_info().num_sms : 0;
  }();
  // Where the driver refuses the grid as too large for a cooperative launch (fewer SMs than the
  // device reports, as under MPS), this instance launches plainly from then on.
  static std::atomic<bool> refused{false};
  DecodeParams run = p;
  run.cooperative = p.cooperative != 0 && p.num_ctas <= resident && !refused.load() ? 1 : 0;
  attrs[1].id = cudaLaunchAttributeCooperative;
  attrs[1].val.cooperative = run.cooperative;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(p.num_ctas));
  config.blockDim = dim3(C::kThreads);
  config.dynamicSmemBytes = C::kSmemBytes;
  config.stream = stream;
  config.attrs = attrs;
  config.numAttrs = 2;
  cudaError_t err = cudaLaunchKernelEx(&config, decode_kernel<C>, run);
  if (err == cudaErrorCooperativeLaunchTooLarge) {
    (void)cudaGetLastError();  // the refusal is not sticky: clear it and launch plainly
    refused.store(true);
    run.cooperative = 0;
    attrs[1].val.cooperative = 0;
    err = cudaLaunchKernelEx(&config, decode_kernel<C>, run);
  }
  if (err != cudaSuccess) {
    throw Error(detail::concat("CUDA error in cudaLaunchKernelEx (planned decode_kernel, ", p.num_ctas, " CTAs",
                               run.cooperative != 0 ? ", cooperative" : "", "): ", cudaGetErrorString(err)));
  }
  ATTNKIT_CUDA_CHECK_LAUNCH("planned decode_kernel [", p.num_ctas, " CTAs, ", p.num_qo_heads, " q / ",
                            p.num_kv_heads, " kv heads, head_dim ", p.head_dim_qk, ", page_size ", p.page_size, ", q ",
                            dtype_name(p.q_dtype), ", kv ", dtype_name(p.kv_dtype), "]");
}

// The config of one checked key: `Fn` is called with it.
template <typename Fn>
void with_config(const KernelKey& key, Fn&& fn) {
  dispatch(key, [&](auto q, auto kv, auto dim) {
    fn(DecodeConfig<typename decltype(q)::type, typename decltype(kv)::type, dim.value>{});
  });
}

}  // namespace

int decode_ctas_per_sm(const KernelKey& key) {
  int n = 0;
  with_config(select(key, Support::min_page_size, "decode"), [&](auto cfg) { n = ctas_per_sm<decltype(cfg)>(); });
  return n;
}

void launch_decode(const DecodeParams& p, cudaStream_t stream) {
  const KernelKey key = select({p.head_dim_qk, p.q_dtype, p.kv_dtype}, p.page_size, "decode");
  ATTNKIT_CHECK(p.num_kv_heads > 0 && p.num_qo_heads % p.num_kv_heads == 0, "planned decode: num_qo_heads (",
                p.num_qo_heads, ") must be a multiple of num_kv_heads (", p.num_kv_heads, ")");
  ATTNKIT_CHECK(p.head_reps >= 1 && p.num_ctas % p.head_reps == 0 && p.num_kv_heads % p.head_reps == 0,
                "planned decode: head_reps (", p.head_reps, ") must divide num_ctas (", p.num_ctas,
                ") and num_kv_heads (", p.num_kv_heads, ")");
  if (p.num_ctas == 0) return;
  with_config(key, [&](auto cfg) { launch<decltype(cfg)>(p, stream); });
}

}  // namespace attnkit::planned
