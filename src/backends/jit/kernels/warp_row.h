// The `jit` backend's first kernel template, rendered by source.cc and compiled by NVRTC: one warp
// a query row (token x head), a CTA a (token, KV head) with the group's heads on its warps. Each
// lane scores one key of a 32-key tile (q is in shared memory), the warp keeps the online softmax
// and every lane accumulates head_dim_vo / 32 output columns from the coalesced V rows. Paged K/V,
// causal, window, soft-cap, sinks and the user's score_mod / mask_mod; any head dims up to 256,
// qk and vo apart, and q and cache of different dtypes (which tensor cores cannot mix: mma_tile.h
// serves the rest). Plain CUDA cores: correct and readable, not fast.
// The source needs no header (NVRTC compiles it alone): dtype conversions are inline PTX.
#pragma once

namespace attnkit::jit {

// $NAME placeholders: HEAD_DIM_QK, HEAD_DIM_VO, GROUP, PAGE_SIZE, WARPS, Q_BF16 / KV_BF16 (1: bf16, 0: f16),
// ELEM (the dtypes in words), VARIANT_FUNCTIONS (kernels/variants.h). `#if LATENT` blocks are
// resolved by source.cc (a latent key: V is the front of the K pool's rows).
inline constexpr const char* kWarpRowTemplate = R"CUDA(
// attnkit jit: warp_row, rendered for head_dim $HEAD_DIM_QK/$HEAD_DIM_VO, group $GROUP, page $PAGE_SIZE, $ELEM
#define HEAD_DIM_QK $HEAD_DIM_QK
#define HEAD_DIM_VO $HEAD_DIM_VO
#define GROUP $GROUP
#define PAGE_SIZE $PAGE_SIZE
#define WARPS $WARPS
#define NEG_INF __int_as_float(0xff800000)
#define QK_PER_LANE ((HEAD_DIM_QK + 31) / 32)
#define VO_PER_LANE ((HEAD_DIM_VO + 31) / 32)

__device__ __forceinline__ float bf16_to_float(unsigned short x) { return __uint_as_float(((unsigned int)x) << 16); }

__device__ __forceinline__ float f16_to_float(unsigned short x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
  return f;
}

#if $Q_BF16
#define Q_TO_FLOAT bf16_to_float
#else
#define Q_TO_FLOAT f16_to_float
#endif
#if $KV_BF16
#define KV_TO_FLOAT bf16_to_float
#else
#define KV_TO_FLOAT f16_to_float
#endif

__device__ __forceinline__ unsigned short from_float(float f) {
  unsigned short x;
#if $Q_BF16
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(x) : "f"(f));
#else
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(x) : "f"(f));
#endif
  return x;
}

$VARIANT_FUNCTIONS

// requests: [batch][4] = first new token, prefix length, KV length, first page-table entry.
extern "C" __global__ void __launch_bounds__(WARPS * 32)
attend(const unsigned short* __restrict__ q, unsigned short* __restrict__ out, const unsigned short* __restrict__ k_pool,
       const unsigned short* __restrict__ v_pool, const int* __restrict__ token_request, const int* __restrict__ requests,
       const int* __restrict__ page_indices, const float* __restrict__ sinks, float sm_scale, float soft_cap,
       int window_left, int causal) {
  __shared__ float s_q[WARPS][QK_PER_LANE * 32];
  const int token = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int num_kv_heads = gridDim.y;
  const int num_qo_heads = num_kv_heads * GROUP;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int request = token_request[token];
  const int qo_start = requests[4 * request + 0];
  const int prefix = requests[4 * request + 1];
  const int kv_len = requests[4 * request + 2];
  const int* pages = page_indices + requests[4 * request + 3];
  const int q_len = kv_len - prefix;
  const int q_pos = prefix + (token - qo_start);
  const int lo = window_left >= 0 ? max(0, q_pos - window_left) : 0;
  const int hi = causal ? min(kv_len, q_pos + 1) : kv_len;

  for (int g = warp; g < GROUP; g += WARPS) {
    const int head = kv_head * GROUP + g;
    const unsigned short* q_row = q + ((long long)token * num_qo_heads + head) * HEAD_DIM_QK;
    for (int e = lane; e < QK_PER_LANE * 32; e += 32) s_q[warp][e] = e < HEAD_DIM_QK ? Q_TO_FLOAT(q_row[e]) * sm_scale : 0.0f;
    __syncwarp();
    float o[VO_PER_LANE];
    for (int i = 0; i < VO_PER_LANE; ++i) o[i] = 0.0f;
    float m = NEG_INF, l = 0.0f;
    for (int base = lo; base < hi; base += 32) {
      const int t = base + lane;
      float s = NEG_INF;
      long long slot = 0;
      if (t < hi) {
        slot = (long long)pages[t / PAGE_SIZE] * PAGE_SIZE + t % PAGE_SIZE;
        if (mask_mod(q_pos, t, head, kv_head, request, q_len, kv_len)) {
          const unsigned short* k_row = k_pool + (slot * num_kv_heads + kv_head) * HEAD_DIM_QK;
          float acc = 0.0f;
#pragma unroll 8
          for (int e = 0; e < HEAD_DIM_QK; ++e) acc += s_q[warp][e] * KV_TO_FLOAT(k_row[e]);
          if (soft_cap > 0.0f) acc = soft_cap * fast_tanh(acc / soft_cap);
          s = score_mod(acc, q_pos, t, head, kv_head, request, q_len, kv_len);
        }
      }
      float tile_max = s;
      for (int d = 16; d > 0; d >>= 1) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, d));
      const float m_new = fmaxf(m, tile_max);
      if (m_new == NEG_INF) continue;  // nothing visible yet
      const float alpha = expf(m - m_new);
      const float p = s == NEG_INF ? 0.0f : expf(s - m_new);
      float p_sum = p;
      for (int d = 16; d > 0; d >>= 1) p_sum += __shfl_xor_sync(0xffffffffu, p_sum, d);
      l = l * alpha + p_sum;
      for (int i = 0; i < VO_PER_LANE; ++i) o[i] *= alpha;
      m = m_new;
      const int n = min(32, hi - base);
      for (int j = 0; j < n; ++j) {
        const float pj = __shfl_sync(0xffffffffu, p, j);
        const long long sj = __shfl_sync(0xffffffffu, slot, j);
        if (pj == 0.0f) continue;
#if LATENT
        const unsigned short* v_row = v_pool + sj * HEAD_DIM_QK;  // the latent's front (one KV head)
#else
        const unsigned short* v_row = v_pool + (sj * num_kv_heads + kv_head) * HEAD_DIM_VO;
#endif
        for (int i = 0; i < VO_PER_LANE; ++i) {
          const int e = lane + 32 * i;
          if (e < HEAD_DIM_VO) o[i] += pj * KV_TO_FLOAT(v_row[e]);
        }
      }
    }
    if (sinks != nullptr && m != NEG_INF) l += expf(sinks[head] - m);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;  // a row that sees nothing is zero
    unsigned short* o_row = out + ((long long)token * num_qo_heads + head) * HEAD_DIM_VO;
    for (int i = 0; i < VO_PER_LANE; ++i) {
      const int e = lane + 32 * i;
      if (e < HEAD_DIM_VO) o_row[e] = from_float(o[i] * inv);
    }
    __syncwarp();
  }
}
)CUDA";

}  // namespace attnkit::jit
