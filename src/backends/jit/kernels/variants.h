// The user's variants as the kernel templates call them: rendered into each template at
// $VARIANT_FUNCTIONS, with $SCORE_MOD / $MASK_MOD the expressions in the kernel's variables
// ("score" and "true" when off, which the compiler folds away), and fast_tanh, the built-in
// soft-cap's tanh (a score_mod's expression language has tanhf alone: src/core/variant_expr.h).
#pragma once

namespace attnkit::jit {

inline constexpr const char* kVariantFunctions = R"CUDA(
// tanh in one MUFU.TANH (sm_75+; PTX ISA: maximum relative error 2^-10.987) where tanhf costs an
// MUFU.EX2, an MUFU.RCP and about ten FMAs a score: the soft-cap's cost, on every score of a tile.
// Its error is far below a bf16 score's rounding (2^-8 relative).
__device__ __forceinline__ float fast_tanh(float x) {
#if __CUDA_ARCH__ >= 750
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return tanhf(x);
#endif
}

__device__ __forceinline__ float score_mod(float score, int q_pos, int kv_pos, int head, int kv_head, int request,
                                           int q_len, int kv_len) {
  return $SCORE_MOD;
}

__device__ __forceinline__ bool mask_mod(int q_pos, int kv_pos, int head, int kv_head, int request, int q_len,
                                         int kv_len) {
  return $MASK_MOD;
})CUDA";

}  // namespace attnkit::jit
