// The `jit` backend's Hopper template (sm_90a), rendered by source.cc and compiled by NVRTC: the
// same work items, arguments and results as mma_tile (one CTA a block of BLOCK_M GQA-packed query
// rows of one request and one KV head over one KV range, a normalised partial and its log-sum-exp
// where the range is a split), with both products on `wgmma`: each warpgroup owns 64 of the
// block's rows, S = Q K^T with Q and K from shared memory (m64nBLOCK_Nk16), O += P V with P from
// registers (m64nDVOk16). K/V tiles are gathered from the paged pool with cp.async into a ring of
// STAGES stages laid out as wgmma reads them: rows of 128 bytes (64 elements), their 16-byte
// chunks XOR-swizzled by row % 8, 64-column blocks one after another. Head dims are multiples of
// 8 up to 256 (qk and vo apart). The instructions of the shapes in use are rendered at $WGMMA_FUNCTIONS
// (source.cc); the merge and mask kernels are mma_tile's (tile_common.h).
#pragma once

namespace attnkit::jit {

// $NAME placeholders: HEAD_DIM_QK, HEAD_DIM_VO, GROUP, PAGE_SIZE, BF16, BLOCK_N, WGS (warpgroups a
// CTA), STAGES, SMEM_BYTES, ELEM, CONFIG, PTX_FUNCTIONS (kernels/mma_ptx.h), WGMMA_FUNCTIONS,
// VARIANT_FUNCTIONS, HAS_MASK_MOD, MIN_CTAS, TILE_COMMON (kernels/tile_common.h). `#if PDL` blocks
// (sm_90+) are resolved by source.cc, not by the compiler.
inline constexpr const char* kWgmmaTileTemplate = R"CUDA(
// attnkit jit: wgmma_tile, rendered for head_dim $HEAD_DIM_QK/$HEAD_DIM_VO, group $GROUP, page $PAGE_SIZE, $ELEM, $CONFIG
#define HEAD_DIM_QK $HEAD_DIM_QK
#define HEAD_DIM_VO $HEAD_DIM_VO
#define GROUP $GROUP
#define PAGE_SIZE $PAGE_SIZE
#define BLOCK_N $BLOCK_N
#define WGS $WGS
#define STAGES $STAGES
#define HAS_MASK_MOD $HAS_MASK_MOD
#define MIN_CTAS $MIN_CTAS
#define NEG_INF __int_as_float(0xff800000)
#define LOG2E 1.4426950408889634f
// A row's max (log2 units) moves only where a tile's exceeds it by more than this: P stays at most
// 2^8 (16 bits hold it), and O is rescaled only on the tiles where some row of a warp moved.
#define MAX_SLACK 8.0f

#define BLOCK_M (64 * WGS)
#define THREADS (128 * WGS)
// Head dims are multiples of 8: S's k steps run over DQK (zero-filled past HEAD_DIM_QK), a row of
// each operand takes whole 64-column blocks (the last one's tail unread), P V's N is HEAD_DIM_VO.
#define DQK ((HEAD_DIM_QK + 15) / 16 * 16)
#define QK_BLOCKS ((DQK + 63) / 64)
#define VO_BLOCKS ((HEAD_DIM_VO + 63) / 64)
#define Q_BYTES (BLOCK_M * QK_BLOCKS * 128)
#define K_BYTES (BLOCK_N * QK_BLOCKS * 128)
#define STAGE_BYTES (K_BYTES + BLOCK_N * VO_BLOCKS * 128)
#define MAIN_BYTES (Q_BYTES + STAGES * STAGE_BYTES)
static_assert(MAIN_BYTES + 1024 <= $SMEM_BYTES, "the host's shared-memory size is short");  // 1024: alignment
static_assert(HEAD_DIM_QK % 8 == 0 && HEAD_DIM_VO % 8 == 0 && HEAD_DIM_VO <= 256, "wgmma's N: multiples of 8 up to 256");
static_assert(BLOCK_N % 64 == 0 && STAGES >= 2, "whole k steps of P V, and a ring");

$PTX_FUNCTIONS

// A shared-memory matrix descriptor of a 128-byte-swizzled tile: start address, the distance
// between 64-column blocks (MN-major operands), 8-row groups 1024 bytes apart.
__device__ __forceinline__ unsigned long long make_desc(unsigned addr, unsigned leading_bytes) {
  return (unsigned long long)((addr & 0x3ffff) >> 4) | ((unsigned long long)((leading_bytes >> 4) & 0x3fff) << 16) |
         ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
__device__ __forceinline__ void proxy_fence() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// After a wait: later reads of the registers depend on it (the products write them asynchronously),
// and registers a product reads stay untouched until then.
__device__ __forceinline__ void hold(float& x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void hold(unsigned& x) { asm volatile("" : "+r"(x)::"memory"); }
// Byte offset of 16-byte chunk `chunk` (0-7) of `row` in a 64-column block.
__device__ __forceinline__ unsigned swz(unsigned row, unsigned chunk) { return row * 128 + ((chunk ^ (row & 7)) << 4); }

$WGMMA_FUNCTIONS

$VARIANT_FUNCTIONS

// The arguments and the work item: tile_common.h.
extern "C" __global__ void __launch_bounds__(THREADS, MIN_CTAS)
attend($ATTEND_PARAMS) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);  // the swizzle's atoms
$WORK_ITEM
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, wg = warp / 4;
  const unsigned s_base = smem_addr(smem);

  // Q: row r's 16-byte chunk cc into column block cc / 8, swizzled; rows past the request are zeros.
  for (int c = tid; c < BLOCK_M * (DQK / 8); c += THREADS) {
    const int r = c / (DQK / 8), cc = c % (DQK / 8), p = row0 + r;
    const bool ok = p < rows && cc * 8 < HEAD_DIM_QK;
    const elem* src = ok ? q + ((long long)(qo_start + p / GROUP) * num_qo_heads + kv_head * GROUP + p % GROUP) * HEAD_DIM_QK + cc * 8 : q;
    copy16(s_base + (cc / 8) * BLOCK_M * 128 + swz(r, cc % 8), src, ok);
  }
  const int num_tiles = (kv_hi - kv_lo + BLOCK_N - 1) / BLOCK_N;
#define CHUNKS (DQK / 8)
#define VCHUNKS (HEAD_DIM_VO / 8)
  const unsigned k_pitch = num_kv_heads * HEAD_DIM_QK * 2, v_pitch = num_kv_heads * HEAD_DIM_VO * 2;  // bytes a slot
#if VCHUNKS <= CHUNKS
  // A tile's K and V: thread `tid` copies chunk column tid % CHUNKS of rows tid / CHUNKS + i * LROWS,
  // one page-table read a row for K and V both. Where CHUNKS does not divide the threads (d96: 12
  // chunks, 21 rows a pass over 252 of 256 threads) the last THREADS % CHUNKS threads copy nothing
  // and the last pass is partial; at d64/d128/d256 both checks fold away.
#define LROWS (THREADS / CHUNKS)
#define LPASSES ((BLOCK_N + LROWS - 1) / LROWS)
  const int l_cc = tid % CHUNKS, l_r0 = tid / CHUNKS;
  const bool l_active = LROWS * CHUNKS == THREADS || tid < LROWS * CHUNKS;
  const char* k_base = reinterpret_cast<const char*>(k_pool) + (kv_head * HEAD_DIM_QK + l_cc * 8) * 2;
  const char* v_base = reinterpret_cast<const char*>(v_pool) + (kv_head * HEAD_DIM_VO + l_cc * 8) * 2;
  auto load_tile = [&](int j) {
    const unsigned s_k = s_base + Q_BYTES + (j % STAGES) * STAGE_BYTES + (l_cc / 8) * BLOCK_N * 128;
    const unsigned s_v = s_base + Q_BYTES + (j % STAGES) * STAGE_BYTES + K_BYTES + (l_cc / 8) * BLOCK_N * 128;
    if (!l_active) return;
    const unsigned t0 = kv_lo + j * BLOCK_N + l_r0;
    unsigned slot[LPASSES];
#pragma unroll
    for (int i = 0; i < LPASSES; ++i) {
      const unsigned t = t0 + i * LROWS;
      slot[i] = t < (unsigned)kv_hi ? (unsigned)__ldg(pages + t / PAGE_SIZE) * PAGE_SIZE + t % PAGE_SIZE : 0u;
    }
#pragma unroll
    for (int i = 0; i < LPASSES; ++i) {
      const unsigned r = l_r0 + i * LROWS;
      if (BLOCK_N % LROWS != 0 && r >= BLOCK_N) break;
      const bool ok = t0 + i * LROWS < (unsigned)kv_hi;
      copy16(s_k + swz(r, l_cc % 8), k_base + (unsigned long long)slot[i] * k_pitch, ok && l_cc * 8 < HEAD_DIM_QK);
      if (l_cc < VCHUNKS) copy16(s_v + swz(r, l_cc % 8), v_base + (unsigned long long)slot[i] * v_pitch, ok);
    }
  };
#else
  // V rows wider than K's (head_dim_vo > head_dim_qk): chunk by chunk, a page-table read each.
  auto copy_rows = [&](unsigned s_dst, const elem* pool, int chunks, int head_dim, unsigned pitch, int t0) {
    for (int c = tid; c < BLOCK_N * chunks; c += THREADS) {
      const int r = c / chunks, cc = c % chunks, t = t0 + r;
      const bool ok = t < kv_hi && cc * 8 < head_dim;  // past the head dim (K's pad to DQK): zeros
      const unsigned long long slot = ok ? (unsigned long long)pages[t / PAGE_SIZE] * PAGE_SIZE + t % PAGE_SIZE : 0ull;
      copy16(s_dst + (cc / 8) * BLOCK_N * 128 + swz(r, cc % 8),
             reinterpret_cast<const char*>(pool) + slot * pitch + (kv_head * head_dim + cc * 8) * 2, ok);
    }
  };
  auto load_tile = [&](int j) {
    const unsigned s_k = s_base + Q_BYTES + (j % STAGES) * STAGE_BYTES;
    copy_rows(s_k, k_pool, CHUNKS, HEAD_DIM_QK, k_pitch, kv_lo + j * BLOCK_N);
    copy_rows(s_k + K_BYTES, v_pool, VCHUNKS, HEAD_DIM_VO, v_pitch, kv_lo + j * BLOCK_N);
  };
#endif
$TILE_ISSUE

  // This thread's rows of the accumulators: r and r + 8 of its warp's 16 in its warpgroup's 64.
  const int r_first = wg * 64 + (warp % 4) * 16 + lane / 4;
  int q_pos[2], head[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int p = row0 + r_first + 8 * i;
    q_pos[i] = prefix + p / GROUP;
    head[i] = kv_head * GROUP + p % GROUP;
  }
  const int last_row = min(rows, row0 + BLOCK_M) - 1;
  const int q_first = prefix + row0 / GROUP, q_last = prefix + last_row / GROUP;

  float o[HEAD_DIM_VO / 2];
#pragma unroll
  for (int i = 0; i < HEAD_DIM_VO / 2; ++i) o[i] = 0.0f;
  float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f};
  const unsigned s_q = s_base + wg * 64 * 128;

  for (int j = j_begin; j < j_end; ++j) {
    wait_groups<STAGES - 2>();
    proxy_fence();    // this thread's cp.async writes, before the products read them
    __syncthreads();  // tile j landed for every thread, and tile j - 1's stage is free to refill
    if (j + STAGES - 1 < j_end) issue(j + STAGES - 1);
    commit();
#if HAS_MASK_MOD
    const unsigned f = (flags >> (2 * (j % STAGES))) & 3u;
    if (!(f & 1u)) continue;  // block-uniform: no row sees a key of this tile
#endif
    const unsigned s_k = s_base + Q_BYTES + (j % STAGES) * STAGE_BYTES;
    const unsigned s_v = s_k + K_BYTES;

    float s[BLOCK_N / 2];
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < DQK / 16; ++kk) {
      wgmma_ss(s, make_desc(s_q + (kk / 4) * BLOCK_M * 128 + (kk % 4) * 32, 16),
               make_desc(s_k + (kk / 4) * BLOCK_N * 128 + (kk % 4) * 32, 16), kk > 0);
    }
    wg_commit();
    wg_wait();
#pragma unroll
    for (int i = 0; i < BLOCK_N / 2; ++i) hold(s[i]);

    // s[4 nb + e]: row r_first + 8 (e / 2), key t0 + 8 nb + 2 (lane % 4) + e % 2.
    const int t0 = kv_lo + j * BLOCK_N;
#if HAS_MASK_MOD
    const bool whole = (f & 2u) != 0;
#else
    const bool whole = t0 + BLOCK_N <= kv_hi && (!causal || t0 + BLOCK_N - 1 <= q_first) &&
                       (window_left < 0 || t0 >= q_last - window_left);
#endif
    // Scale and soft-cap (outside the element loop: the common tile runs the short one), the
    // user's score_mod, then the mask on the tiles that cross a boundary.
    if (soft_cap > 0.0f) {
      const float inside = sm_scale / soft_cap;
#pragma unroll
      for (int x = 0; x < BLOCK_N / 2; ++x) s[x] = soft_cap * fast_tanh(s[x] * inside);
    } else {
#pragma unroll
      for (int x = 0; x < BLOCK_N / 2; ++x) s[x] *= sm_scale;
    }
#pragma unroll
    for (int x = 0; x < BLOCK_N / 2; ++x) {
      const int i = (x % 4) / 2, kv_pos = t0 + 8 * (x / 4) + 2 * (lane % 4) + x % 2;
      s[x] = score_mod(s[x], q_pos[i], kv_pos, head[i], kv_head, request, q_len, kv_len);
    }
    if (!whole) {
#pragma unroll
      for (int x = 0; x < BLOCK_N / 2; ++x) {
        const int i = (x % 4) / 2, kv_pos = t0 + 8 * (x / 4) + 2 * (lane % 4) + x % 2;
        const bool seen = kv_pos < kv_hi && (!causal || kv_pos <= q_pos[i]) &&
                          (window_left < 0 || kv_pos >= q_pos[i] - window_left) &&
                          mask_mod(q_pos[i], kv_pos, head[i], kv_head, request, q_len, kv_len);
        if (!seen) s[x] = NEG_INF;
      }
    }
    float alpha[2];
    bool moved = false;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float mx = NEG_INF;
#pragma unroll
      for (int nb = 0; nb < BLOCK_N / 8; ++nb) mx = fmaxf(mx, fmaxf(s[4 * nb + 2 * i], s[4 * nb + 2 * i + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      mx *= LOG2E;  // log2 units from here: P = exp2(s log2 e - m), one FFMA a score
      const bool move = mx > m[i] + MAX_SLACK;  // m = -inf: any visible score moves it
      moved |= move;
      const float m_new = move ? mx : m[i];
      const float base = m_new == NEG_INF ? 0.0f : m_new;  // a row that sees nothing yet stays zero
      alpha[i] = move ? exp2f(m[i] - base) : 1.0f;
      m[i] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nb = 0; nb < BLOCK_N / 8; ++nb) {
        s[4 * nb + 2 * i] = exp2f(fmaf(s[4 * nb + 2 * i], LOG2E, -base));
        s[4 * nb + 2 * i + 1] = exp2f(fmaf(s[4 * nb + 2 * i + 1], LOG2E, -base));
        sum += s[4 * nb + 2 * i] + s[4 * nb + 2 * i + 1];
      }
      l[i] = l[i] * alpha[i] + sum;
    }
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
      for (int nb = 0; nb < HEAD_DIM_VO / 8; ++nb) {
        o[4 * nb + 0] *= alpha[0];
        o[4 * nb + 1] *= alpha[0];
        o[4 * nb + 2] *= alpha[1];
        o[4 * nb + 3] *= alpha[1];
      }
    }
    // P as the A operand, a 16-key step a fragment (the accumulator's layout, packed in pairs).
    unsigned pa[BLOCK_N / 16][4];
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
      pa[kk][0] = pack2(s[8 * kk + 0], s[8 * kk + 1]);
      pa[kk][1] = pack2(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = pack2(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = pack2(s[8 * kk + 6], s[8 * kk + 7]);
    }
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk) wgmma_rs(o, pa[kk], make_desc(s_v + kk * 16 * 128, BLOCK_N * 128));
    wg_commit();
    wg_wait();
#pragma unroll
    for (int i = 0; i < HEAD_DIM_VO / 2; ++i) hold(o[i]);
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e) hold(pa[kk][e]);
  }
  wait_groups<0>();
#if PDL
  // As mma_tile's: every tile is done, the merge behind this grid may be scheduled.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif

  // Epilogue from the registers: the quad holds each row's columns; m is in log2 units.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float sum = l[i];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int r = r_first + 8 * i, p = row0 + r;
    if (p >= rows) continue;
    const float mx = m[i] / LOG2E;  // natural-log units, as the sinks and partials read it
    const int h = kv_head * GROUP + p % GROUP;
    if (partial_row < 0) {
      if (sinks != nullptr && m[i] != NEG_INF) sum += exp2f(sinks[h] * LOG2E - m[i]);
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // a row that sees nothing is zero
      elem* dst = out + ((long long)(qo_start + p / GROUP) * num_qo_heads + h) * HEAD_DIM_VO + 2 * (lane % 4);
#pragma unroll
      for (int nb = 0; nb < HEAD_DIM_VO / 8; ++nb)
        *reinterpret_cast<unsigned*>(dst + 8 * nb) = pack2(o[4 * nb + 2 * i] * inv, o[4 * nb + 2 * i + 1] * inv);
    } else {
      const long long pr = (long long)(partial_row + r) * num_kv_heads + kv_head;
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
      float* dst = o_part + pr * HEAD_DIM_VO + 2 * (lane % 4);
#pragma unroll
      for (int nb = 0; nb < HEAD_DIM_VO / 8; ++nb) {
        dst[8 * nb] = o[4 * nb + 2 * i] * inv;
        dst[8 * nb + 1] = o[4 * nb + 2 * i + 1] * inv;
      }
      if (lane % 4 == 0) lse_part[pr] = sum > 0.0f ? mx + logf(sum) : NEG_INF;
    }
  }
}

$TILE_COMMON
)CUDA";

}  // namespace attnkit::jit
