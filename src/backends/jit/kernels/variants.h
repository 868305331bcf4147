// The user's variants as the kernel templates call them: rendered into each template at
// $VARIANT_FUNCTIONS, with $SCORE_MOD / $MASK_MOD the expressions in the kernel's variables
// ("score" and "true" when off, which the compiler folds away).
#pragma once

namespace attnkit::jit {

inline constexpr const char* kVariantFunctions = R"CUDA(
__device__ __forceinline__ float score_mod(float score, int q_pos, int kv_pos, int head, int kv_head, int request,
                                           int q_len, int kv_len) {
  return $SCORE_MOD;
}

__device__ __forceinline__ bool mask_mod(int q_pos, int kv_pos, int head, int kv_head, int request, int q_len,
                                         int kv_len) {
  return $MASK_MOD;
})CUDA";

}  // namespace attnkit::jit
