// The `jit` backend's tensor-core template, rendered by source.cc and compiled by NVRTC: one CTA a
// work item (a block of BLOCK_M query rows of one request and one KV head, over one KV range), the
// rows GQA-packed (token-major, the group's heads minor), K/V tiles of BLOCK_N keys gathered from
// the paged pool into a ring of STAGES shared-memory stages with cp.async, both products on
// `mma.sync.m16n8k16` (sm_80+). The warps form a WARPS_M x WARPS_N grid: WARPS_M splits the rows
// (M_TILES x 16 each: two row tiles a warp read each K/V fragment from shared memory once for both,
// halving that traffic, which bounds prefill), WARPS_N splits each tile's keys (decode: few rows,
// many keys), each warp keeping its own online softmax, joined through shared memory at the end. A work item over part
// of the KV range (split-KV) writes a normalised partial and its log-sum-exp; `merge` joins them.
// The source needs no header (NVRTC compiles it alone): every PTX instruction is inline.
#pragma once

namespace attnkit::jit {

// $NAME placeholders: HEAD_DIM_QK, HEAD_DIM_VO, GROUP, PAGE_SIZE, BF16 (1: bf16, 0: f16; q, cache
// and out share it), BLOCK_N, WARPS_M, WARPS_N, M_TILES, STAGES, SMEM_BYTES (what the host launches
// with), ELEM and CONFIG (words), PTX_FUNCTIONS (kernels/mma_ptx.h), VARIANT_FUNCTIONS
// (kernels/variants.h), HAS_MASK_MOD, MIN_CTAS, TILE_COMMON (kernels/tile_common.h: merge, tile_mask),
// VO_PASSES. `#if LATENT` and `#if PDL` (sm_90+) blocks are resolved by source.cc (resolve_flags),
// not by the compiler.
inline constexpr const char* kMmaTileTemplate = R"CUDA(
// attnkit jit: mma_tile, rendered for head_dim $HEAD_DIM_QK/$HEAD_DIM_VO, group $GROUP, page $PAGE_SIZE, $ELEM, $CONFIG
#define HEAD_DIM_QK $HEAD_DIM_QK
#define HEAD_DIM_VO $HEAD_DIM_VO
#define GROUP $GROUP
#define PAGE_SIZE $PAGE_SIZE
#define BLOCK_N $BLOCK_N
#define WARPS_M $WARPS_M
#define WARPS_N $WARPS_N
#define M_TILES $M_TILES
#define STAGES $STAGES
#define HAS_MASK_MOD $HAS_MASK_MOD
#define MIN_CTAS $MIN_CTAS  // CTAs an SM holds by shared memory: ptxas keeps the registers to match
#define NEG_INF __int_as_float(0xff800000)
#define LOG2E 1.4426950408889634f

#define DQK ((HEAD_DIM_QK + 15) / 16 * 16)  // the k steps of S = Q K^T, zero-filled past HEAD_DIM_QK
#if LATENT
// One latent a token (absorbed MLA): K is its HEAD_DIM_QK values and V its first HEAD_DIM_VO, read
// from the K tile (no V tile). O is computed in VO_PASSES passes of DVO columns, blockIdx.z the
// pass, each scoring every key again: HEAD_DIM_VO fp32 accumulators a row do not fit a thread.
#define VO_PASSES $VO_PASSES
#define DVO (HEAD_DIM_VO / VO_PASSES)
#define KSTRIDE (DQK + 8)  // 16 bytes of pad, as below
#define VSTRIDE KSTRIDE
#else
#define DVO ((HEAD_DIM_VO + 15) / 16 * 16)
// A shared row is 16 bytes longer than its data: the 8 rows one ldmatrix reads fall in 8 bank groups.
#define KSTRIDE (DQK + 8)
#define VSTRIDE (DVO + 8)
#endif
#define WARP_ROWS (16 * M_TILES)
#define BLOCK_M (WARP_ROWS * WARPS_M)
#define THREADS (32 * WARPS_M * WARPS_N)
#define NW (BLOCK_N / WARPS_N)        // keys of a tile one warp scores
#define Q_IN_REGS (M_TILES == 1 && DQK <= 128)  // Q's fragments kept in registers, else read from shared

// Shared memory, in bytes: Q, then STAGES x (K tile, V tile); the epilogue reuses it from 0 for each
// warp's unnormalised O, row max and row sum.
#define Q_BYTES (BLOCK_M * KSTRIDE * 2)
#define K_BYTES (BLOCK_N * KSTRIDE * 2)
#if LATENT
#define STAGE_BYTES K_BYTES
#else
#define STAGE_BYTES (K_BYTES + BLOCK_N * VSTRIDE * 2)
#endif
#define EPILOGUE_BYTES (WARPS_N * BLOCK_M * (DVO + 2) * 4)
#define MAIN_BYTES (Q_BYTES + STAGES * STAGE_BYTES)
static_assert((MAIN_BYTES > EPILOGUE_BYTES ? MAIN_BYTES : EPILOGUE_BYTES) <= $SMEM_BYTES, "the host's shared-memory size is short");
static_assert(NW % 16 == 0, "a warp's keys are whole k steps of P V");
static_assert(STAGES >= 2, "a ring needs two stages");

$PTX_FUNCTIONS

$VARIANT_FUNCTIONS

// The arguments and the work item: tile_common.h.
extern "C" __global__ void __launch_bounds__(THREADS, MIN_CTAS)
attend($ATTEND_PARAMS) {
  extern __shared__ __align__(128) unsigned char smem[];
$WORK_ITEM
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp % WARPS_M, wn = warp / WARPS_M;
  elem* s_q = reinterpret_cast<elem*>(smem);

  for (int c = tid; c < BLOCK_M * (DQK / 8); c += THREADS) {
    const int r = c / (DQK / 8), cc = c % (DQK / 8), p = row0 + r;
    const bool ok = p < rows && cc * 8 < HEAD_DIM_QK;
    const elem* src = ok ? q + ((long long)(qo_start + p / GROUP) * num_qo_heads + kv_head * GROUP + p % GROUP) * HEAD_DIM_QK + cc * 8 : q;
    copy16(smem_addr(s_q + r * KSTRIDE + cc * 8), src, ok);
  }
  const int num_tiles = (kv_hi - kv_lo + BLOCK_N - 1) / BLOCK_N;
  // A tile's 16-byte chunks, unrolled so every page-table read of a tile issues before its copies.
#if LATENT
  // Only K (one KV head: a slot is one latent row): a row's DQK / 8 chunks are 8 threads' (DQK / 64
  // each, at offsets the unrolled loop makes constants), LROWS rows at a time, a page-table read a
  // row a thread. The general load below, unrolled over a row's 72 chunks, spilled past 255
  // registers beside a pass's O (ptxas -v: 152 bytes at n64 w1x4; this one 239 registers, none).
#define LROWS (THREADS / 8)
  static_assert(DQK % 64 == 0 && BLOCK_N % LROWS == 0, "a latent row is 8 threads' whole chunks");
  const unsigned l_smem = smem_addr(smem) + Q_BYTES + ((tid / 8) * KSTRIDE + (tid % 8) * 8) * 2;
  const char* l_base = reinterpret_cast<const char*>(k_pool) + (tid % 8) * 16;
  auto load_tile = [&](int j) {
    const unsigned s_k = l_smem + (j % STAGES) * STAGE_BYTES;
    const int t0 = kv_lo + j * BLOCK_N + tid / 8;
#pragma unroll
    for (int i = 0; i < BLOCK_N / LROWS; ++i) {
      const int t = t0 + i * LROWS;
      const bool ok = t < kv_hi;
      const long long slot = ok ? (long long)__ldg(pages + t / PAGE_SIZE) * PAGE_SIZE + t % PAGE_SIZE : 0;
      const char* row = l_base + slot * (HEAD_DIM_QK * 2);
#pragma unroll
      for (int c = 0; c < DQK / 64; ++c) copy16(s_k + (i * LROWS * KSTRIDE + c * 64) * 2, row + c * 128, ok);
    }
  };
#else
#if THREADS % (DQK / 8) == 0 && HEAD_DIM_QK == HEAD_DIM_VO
  // Each thread copies one 16-byte column (cc) of rows r0, r0 + LROWS, ...: its column, its shared
  // and global bases are loop-invariant, and K and V of a row share one page-table read and one
  // slot (slot x row pitch is one IMAD.WIDE.U32 onto the base).
#define LROWS (THREADS / (DQK / 8))
  const int l_cc = tid % (DQK / 8), l_r0 = tid / (DQK / 8);
  const bool l_col = l_cc * 8 < HEAD_DIM_QK;
  const unsigned l_col_bytes = (kv_head * HEAD_DIM_QK + l_cc * 8) * 2;  // DQK == DVO: one for K and V
  const unsigned k_pitch = num_kv_heads * HEAD_DIM_QK * 2, v_pitch = num_kv_heads * HEAD_DIM_VO * 2;  // bytes a slot
  const unsigned l_smem = smem_addr(smem) + Q_BYTES + (l_r0 * KSTRIDE + l_cc * 8) * 2;
  auto load_tile = [&](int j) {
    const unsigned s_k = l_smem + (j % STAGES) * STAGE_BYTES;
    const char* k_base = reinterpret_cast<const char*>(k_pool) + l_col_bytes;
    const char* v_base = reinterpret_cast<const char*>(v_pool) + l_col_bytes;
    const unsigned t0 = kv_lo + j * BLOCK_N + l_r0;
    unsigned slot[(BLOCK_N + LROWS - 1) / LROWS];
#pragma unroll
    for (int i = 0; i < (BLOCK_N + LROWS - 1) / LROWS; ++i) {
      const unsigned t = t0 + i * LROWS;
      slot[i] = t < (unsigned)kv_hi ? (unsigned)__ldg(pages + t / PAGE_SIZE) * PAGE_SIZE + t % PAGE_SIZE : 0u;
    }
#pragma unroll
    for (int i = 0; i < (BLOCK_N + LROWS - 1) / LROWS; ++i) {
      if (BLOCK_N % LROWS != 0 && l_r0 + i * LROWS >= BLOCK_N) break;
      const bool ok = t0 + i * LROWS < (unsigned)kv_hi && l_col;
      copy16(s_k + i * LROWS * KSTRIDE * 2, k_base + (unsigned long long)slot[i] * k_pitch, ok);
      copy16(s_k + K_BYTES + i * LROWS * VSTRIDE * 2, v_base + (unsigned long long)slot[i] * v_pitch, ok);
    }
  };
#else
  auto load_tile = [&](int j) {
    elem* s_k = reinterpret_cast<elem*>(smem + Q_BYTES + (j % STAGES) * STAGE_BYTES);
    elem* s_v = reinterpret_cast<elem*>(smem + Q_BYTES + (j % STAGES) * STAGE_BYTES + K_BYTES);
    const int t0 = kv_lo + j * BLOCK_N;
#pragma unroll
    for (int i = 0; i < (BLOCK_N * (DQK / 8) + THREADS - 1) / THREADS; ++i) {
      const int c = tid + i * THREADS;
      if (BLOCK_N * (DQK / 8) % THREADS != 0 && c >= BLOCK_N * (DQK / 8)) break;
      const int r = c / (DQK / 8), cc = c % (DQK / 8), t = t0 + r;
      const bool ok = t < kv_hi && cc * 8 < HEAD_DIM_QK;
      const long long slot = ok ? (long long)pages[t / PAGE_SIZE] * PAGE_SIZE + t % PAGE_SIZE : 0;
      copy16(smem_addr(s_k + r * KSTRIDE + cc * 8), k_pool + (slot * num_kv_heads + kv_head) * HEAD_DIM_QK + cc * 8, ok);
    }
#pragma unroll
    for (int i = 0; i < (BLOCK_N * (DVO / 8) + THREADS - 1) / THREADS; ++i) {
      const int c = tid + i * THREADS;
      if (BLOCK_N * (DVO / 8) % THREADS != 0 && c >= BLOCK_N * (DVO / 8)) break;
      const int r = c / (DVO / 8), cc = c % (DVO / 8), t = t0 + r;
      const bool ok = t < kv_hi && cc * 8 < HEAD_DIM_VO;
      const long long slot = ok ? (long long)pages[t / PAGE_SIZE] * PAGE_SIZE + t % PAGE_SIZE : 0;
      copy16(smem_addr(s_v + r * VSTRIDE + cc * 8), v_pool + (slot * num_kv_heads + kv_head) * HEAD_DIM_VO + cc * 8, ok);
    }
  };
#endif
#endif
$TILE_ISSUE

  // This lane's rows (r and r + 8 of each of its warp's row tiles) and what the masks need of them.
  int q_pos[M_TILES][2], head[M_TILES][2];
  for (int mt = 0; mt < M_TILES; ++mt) {
    for (int i = 0; i < 2; ++i) {
      const int p = row0 + wm * WARP_ROWS + mt * 16 + lane / 4 + 8 * i;
      q_pos[mt][i] = prefix + p / GROUP;
      head[mt][i] = kv_head * GROUP + p % GROUP;
    }
  }
  // The block's first and last query positions: a tile every row sees whole needs no mask.
  const int last_row = min(rows, row0 + BLOCK_M) - 1;
  const int q_first = prefix + row0 / GROUP, q_last = prefix + last_row / GROUP;

  float o[M_TILES][DVO / 8][4];
  float m[M_TILES][2], l[M_TILES][2];
  for (int mt = 0; mt < M_TILES; ++mt) {
    for (int n = 0; n < DVO / 8; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
    m[mt][0] = m[mt][1] = NEG_INF;
    l[mt][0] = l[mt][1] = 0.0f;
  }
#if Q_IN_REGS
  unsigned qf[DQK / 16][4];
  bool q_ready = false;
#endif
  const unsigned q_lane = smem_addr(s_q + (wm * WARP_ROWS + lane % 8 + ((lane / 8) % 2) * 8) * KSTRIDE + (lane / 16) * 8);

  for (int j = j_begin; j < j_end; ++j) {
    wait_groups<STAGES - 2>();
    __syncthreads();  // tile j landed for every thread, and tile j - 1's stage is free to refill
    if (j + STAGES - 1 < j_end) issue(j + STAGES - 1);
    commit();
#if HAS_MASK_MOD
    const unsigned f = (flags >> (2 * (j % STAGES))) & 3u;
    if (!(f & 1u)) continue;  // block-uniform: no row sees a key of this tile
#endif
#if Q_IN_REGS
    if (!q_ready) {  // Q landed with the first group
      for (int kk = 0; kk < DQK / 16; ++kk) ldsm4(qf[kk], q_lane + kk * 32);
      q_ready = true;
    }
#endif
    const unsigned char* stage = smem + Q_BYTES + (j % STAGES) * STAGE_BYTES;
    const unsigned k_lane = smem_addr(stage) + ((wn * NW + lane % 8 + (lane / 16) * 8) * KSTRIDE + ((lane / 8) % 2) * 8) * 2;
#if LATENT
    const unsigned v_lane = smem_addr(stage) + ((wn * NW + lane % 8 + ((lane / 8) % 2) * 8) * VSTRIDE + blockIdx.z * DVO + (lane / 16) * 8) * 2;
#else
    const unsigned v_lane = smem_addr(stage + K_BYTES) + ((wn * NW + lane % 8 + ((lane / 8) % 2) * 8) * VSTRIDE + (lane / 16) * 8) * 2;
#endif

    float s[M_TILES][NW / 8][4];
    for (int mt = 0; mt < M_TILES; ++mt)
      for (int n = 0; n < NW / 8; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < DQK / 16; ++kk) {
#if Q_IN_REGS
      const unsigned(*a)[4] = &qf[kk];
#else
      unsigned a[M_TILES][4];
      for (int mt = 0; mt < M_TILES; ++mt) ldsm4(a[mt], q_lane + (mt * 16 * KSTRIDE) * 2 + kk * 32);
#endif
#pragma unroll
      for (int n2 = 0; n2 < NW / 16; ++n2) {
        unsigned b[4];
        ldsm4(b, k_lane + (n2 * 16 * KSTRIDE + kk * 16) * 2);
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt) {
          mma(s[mt][2 * n2], a[mt], b[0], b[1]);
          mma(s[mt][2 * n2 + 1], a[mt], b[2], b[3]);
        }
      }
    }

    const int t0 = kv_lo + j * BLOCK_N;
#if HAS_MASK_MOD
    const bool whole = (f & 2u) != 0;
#else
    const bool whole = t0 + BLOCK_N <= kv_hi && (!causal || t0 + BLOCK_N - 1 <= q_first) &&
                       (window_left < 0 || t0 >= q_last - window_left);
#endif
#pragma unroll
    for (int mt = 0; mt < M_TILES; ++mt) {
#pragma unroll
      for (int n = 0; n < NW / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = e / 2, kv_pos = t0 + wn * NW + n * 8 + 2 * (lane % 4) + e % 2;
          float x = s[mt][n][e] * sm_scale;
          if (soft_cap > 0.0f) x = soft_cap * fast_tanh(x / soft_cap);
          x = score_mod(x, q_pos[mt][i], kv_pos, head[mt][i], kv_head, request, q_len, kv_len);
          if (!whole) {
            const bool seen = kv_pos < kv_hi && (!causal || kv_pos <= q_pos[mt][i]) &&
                              (window_left < 0 || kv_pos >= q_pos[mt][i] - window_left) &&
                              mask_mod(q_pos[mt][i], kv_pos, head[mt][i], kv_head, request, q_len, kv_len);
            if (!seen) x = NEG_INF;
          }
          s[mt][n][e] = x;
        }
      }
      float base[2], alpha[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float mx = m[mt][i];
        for (int n = 0; n < NW / 8; ++n) mx = fmaxf(mx, fmaxf(s[mt][n][2 * i], s[mt][n][2 * i + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        base[i] = mx == NEG_INF ? 0.0f : mx * LOG2E;  // a row that sees nothing yet stays zero
        alpha[i] = exp2f(m[mt][i] * LOG2E - base[i]);  // exactly 1 where the maximum held
        m[mt][i] = mx;
        l[mt][i] *= alpha[i];
      }
      // Once the rows' maxima settle (most tiles of a long row), O needs no rescaling: skipped
      // where no row of the warp moved.
      if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
        for (int n = 0; n < DVO / 8; ++n) {
          o[mt][n][0] *= alpha[0];
          o[mt][n][1] *= alpha[0];
          o[mt][n][2] *= alpha[1];
          o[mt][n][3] *= alpha[1];
        }
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        for (int n = 0; n < NW / 8; ++n) {
          s[mt][n][2 * i] = exp2f(s[mt][n][2 * i] * LOG2E - base[i]);
          s[mt][n][2 * i + 1] = exp2f(s[mt][n][2 * i + 1] * LOG2E - base[i]);
          l[mt][i] += s[mt][n][2 * i] + s[mt][n][2 * i + 1];
        }
      }
    }
#pragma unroll
    for (int kk = 0; kk < NW / 16; ++kk) {
      unsigned a[M_TILES][4];
#pragma unroll
      for (int mt = 0; mt < M_TILES; ++mt) {
        a[mt][0] = pack2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        a[mt][1] = pack2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        a[mt][2] = pack2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        a[mt][3] = pack2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int n2 = 0; n2 < DVO / 16; ++n2) {
        unsigned b[4];
        ldsm4_t(b, v_lane + (kk * 16 * VSTRIDE + n2 * 16) * 2);
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt) {
          mma(o[mt][2 * n2], a[mt], b[0], b[1]);
          mma(o[mt][2 * n2 + 1], a[mt], b[2], b[3]);
        }
      }
    }
  }

#if PDL
  // Every tile is issued: the merge launched behind this grid (programmatic serialisation) may be
  // scheduled once all CTAs are here or done; it waits for this grid's completion before it reads.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  // Epilogue: each warp's O, max and sum to shared memory; the block joins its WARPS_N parts.
  wait_groups<0>();
  __syncthreads();
  float* e_o = reinterpret_cast<float*>(smem);  // [WARPS_N][BLOCK_M][DVO]
  float* e_m = e_o + WARPS_N * BLOCK_M * DVO;   // [WARPS_N][BLOCK_M]
  float* e_l = e_m + WARPS_N * BLOCK_M;
  for (int mt = 0; mt < M_TILES; ++mt) {
    for (int i = 0; i < 2; ++i) {
      float sum = l[mt][i];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int r = wm * WARP_ROWS + mt * 16 + lane / 4 + 8 * i;
      if (lane % 4 == 0) {
        e_m[wn * BLOCK_M + r] = m[mt][i];
        e_l[wn * BLOCK_M + r] = sum;
      }
      for (int n = 0; n < DVO / 8; ++n) {
        float* dst = e_o + (wn * BLOCK_M + r) * DVO + n * 8 + 2 * (lane % 4);
        dst[0] = o[mt][n][2 * i];
        dst[1] = o[mt][n][2 * i + 1];
      }
    }
  }
  __syncthreads();
#if LATENT
  // This pass's DVO columns, from column blockIdx.z * DVO of each output row. Every pass has the
  // same row max and sum (the same scores), so each writes the same log-sum-exp.
  out += blockIdx.z * DVO;
  o_part += blockIdx.z * DVO;
  for (int c = tid; c < BLOCK_M * (DVO / 2); c += THREADS) {
    const int r = c / (DVO / 2), col = 2 * (c % (DVO / 2)), p = row0 + r;
#else
  for (int c = tid; c < BLOCK_M * (HEAD_DIM_VO / 2); c += THREADS) {
    const int r = c / (HEAD_DIM_VO / 2), col = 2 * (c % (HEAD_DIM_VO / 2)), p = row0 + r;
#endif
    if (p >= rows) continue;
    float mx = NEG_INF;
    for (int w = 0; w < WARPS_N; ++w) mx = fmaxf(mx, e_m[w * BLOCK_M + r]);
    float sum = 0.0f, x0 = 0.0f, x1 = 0.0f;
    if (mx != NEG_INF) {
      for (int w = 0; w < WARPS_N; ++w) {
        const float f = exp2f((e_m[w * BLOCK_M + r] - mx) * LOG2E);
        sum += e_l[w * BLOCK_M + r] * f;
        x0 += e_o[(w * BLOCK_M + r) * DVO + col] * f;
        x1 += e_o[(w * BLOCK_M + r) * DVO + col + 1] * f;
      }
    }
    const int h = kv_head * GROUP + p % GROUP;
    if (partial_row < 0) {
      if (sinks != nullptr && mx != NEG_INF) sum += expf(sinks[h] - mx);
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // a row that sees nothing is zero
      const long long token = qo_start + p / GROUP;
      *reinterpret_cast<unsigned*>(out + (token * num_qo_heads + h) * HEAD_DIM_VO + col) = pack2(x0 * inv, x1 * inv);
    } else {
      const long long pr = (long long)(partial_row + r) * num_kv_heads + kv_head;
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
      o_part[pr * HEAD_DIM_VO + col] = x0 * inv;
      o_part[pr * HEAD_DIM_VO + col + 1] = x1 * inv;
      if (col == 0) lse_part[pr] = sum > 0.0f ? mx + logf(sum) : NEG_INF;
    }
  }
}

$TILE_COMMON
)CUDA";

}  // namespace attnkit::jit
