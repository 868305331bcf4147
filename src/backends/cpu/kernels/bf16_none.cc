// The bf16-pair products (bf16_dot.h, decode_bf16.h) where the build is not for x86-64 (Arm): no
// AVX512-BF16, so bf16_dot_available() is false and the kernels take their Highway paths; the rest
// is never called, and throws if it is.
#include "attnkit/error.h"
#include "backends/cpu/kernels/bf16_dot.h"
#include "backends/cpu/kernels/decode_bf16.h"

namespace attnkit::cpu {

namespace {
[[noreturn]] void unavailable() { throw Error("cpu: the bf16-pair products need AVX512-BF16 (x86-64)"); }
}  // namespace

bool bf16_dot_available() { return false; }

void bf16_qk_tile(const Bf16Pair*, int, int, const uint16_t* const*, int, float, float*) { unavailable(); }
void bf16_pack_p(const float*, int, int, Bf16Pair*) { unavailable(); }
void bf16_pack_v(const uint16_t* const*, int, int, Bf16Pair*) { unavailable(); }
void bf16_pv_tile(const Bf16Pair*, int, int, const Bf16Pair*, int, int, const float*, float*, int) { unavailable(); }

void bf16_tokens_qk(const uint16_t*, int, int, int, const uint16_t* const*, int, float, float*, int,
                    const Bf16Prefetch&, const Bf16Prefetch&) {
  unavailable();
}
void bf16_heads_pv(const Bf16Prefetch&, const float*, int, int, const uint16_t* const*, int, int, const float*, float*,
                   uint32_t*) {
  unavailable();
}
float bf16_softmax_tile(float*, int, float*, float*) { unavailable(); }
void bf16_pairs_to_natural(float*, int) { unavailable(); }

}  // namespace attnkit::cpu
