// The decode mainloop: a persistent CTA walks its list of work items as one stream of 64-key K/V
// tiles, the keys as the rows of m16n8k16 mma tiles and up to 8 query heads of a GQA group as
// their columns. Each warp owns 16 keys of a tile and runs its own pipeline: it copies its K rows
// and its V rows (cp.async) onto its own mbarriers, kStages tiles ahead across item boundaries,
// and no CTA barrier is paid per tile, only at an item's end, where the warps' softmax states meet.
// Copies and query loads are decode_copy.cuh; the split join is decode_join.cuh; dispatch is decode.cu.
#pragma once

#include <cmath>
#include <type_traits>

#include "backends/planned/kernels/decode_copy.cuh"
#include "backends/planned/kernels/decode_join.cuh"

namespace attnkit::planned {

template <typename T_, typename TKv_, int kHeadDim_>
struct DecodeConfig {
  using T = T_;      // q, out and the mma operands: __nv_bfloat16 or __half
  using TKv = TKv_;  // cache element: T, the other 16-bit type, or uint8_t for e4m3
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBlockN = kDecodeTileKv;  // each warp owns 16 keys of a tile
  static constexpr int kRows = kDecodeRows;
  // A cache in another type than q is converted per warp, in shared memory, before the mma.
  static constexpr bool kConvert = !std::is_same_v<T, TKv>;
  static constexpr int kRowBytes = kHeadDim * static_cast<int>(sizeof(TKv));  // one cached row
  // How many tiles a warp has in flight and how many CTAs share an SM. D=128 16-bit: 2 stages and
  // 3 CTAs (12 warps an SM, registers capped at 168), which measured 8% faster on the H200 than
  // 3 stages and 2 CTAs with the same bytes in flight. D=64: 4 stages (3 CTAs); D=256: 3 (1 CTA),
  // or 2 where a 16-bit cache of the other type also needs the 64 KB conversion buffer (227 KB
  // cap); converted D=128 caches: 3 (2 CTAs).
  static constexpr bool kThreeCtas = kHeadDim == 128 && !kConvert;
  static constexpr int kStages =
      kHeadDim == 64 ? 4 : (kThreeCtas || (kHeadDim == 256 && kConvert && sizeof(TKv) == 2) ? 2 : 3);
  // CTAs an SM must hold: __launch_bounds__ caps the registers so that they fit.
  static constexpr int kMinCtas = kThreeCtas ? 3 : 1;
  // K or V of a stage: rows packed (decode_detail::stage_offset places each 16-byte piece).
  static constexpr int kTileBytes = kBlockN * kRowBytes;
  static constexpr int kStageBytes = 2 * kTileBytes;
  // Where warps meet at an item's end: [kWarps, kRows, kHeadDim] f32 = 128 * kHeadDim bytes, in the
  // stage just consumed (16-bit tiles in the mma type) or the conversion buffer.
  static constexpr int kScratchBytes = kWarps * kRows * kHeadDim * 4;
  static constexpr int kConvBytes = kConvert ? kWarps * 2 * 16 * kHeadDim * 2 : 0;
  static constexpr int kConvOffset = kStages * kStageBytes;
  static constexpr int kMlOffset = kConvOffset + kConvBytes;
  static constexpr int kBarOffset = kMlOffset + 2 * kWarps * kRows * 4;  // [kStages, kWarps, K|V] mbarriers
  static constexpr int kFlagOffset = kBarOffset + kStages * kWarps * 16;  // the split join's "am I last"
  static constexpr int kQOffset = kFlagOffset + 16;  // the item's query rows, [kRows, kHeadDim] T, swizzled
  static constexpr int kSmemBytes = kQOffset + kRows * kHeadDim * 2;
  static_assert(kConvert ? kConvBytes >= kScratchBytes : kStageBytes >= kScratchBytes,
                "the merge scratch reuses a consumed stage or the conversion buffer");
  static_assert(kRowBytes % 16 == 0, "rows are copied in 16-byte pieces");
  static_assert(kSmemBytes <= 227 * 1024, "a CTA may use at most 227 KB of shared memory on sm_90");
};

namespace decode_detail {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

}  // namespace decode_detail

template <typename C>
__global__ void __launch_bounds__(C::kThreads, C::kMinCtas) decode_kernel(const __grid_constant__ DecodeParams p) {
  using T = typename C::T;
  constexpr int kD = C::kHeadDim;
  constexpr int kS = C::kStages;
  constexpr int kDt = kD / 16;  // m16 tiles of head_dim in the output (O^T) and k16 steps of Q K^T
  constexpr float kNegInf = -INFINITY;
  namespace dd = decode_detail;

  extern __shared__ __align__(128) unsigned char smem[];
  float* s_m = reinterpret_cast<float*>(smem + C::kMlOffset);  // [kWarps, kRows]
  float* s_l = s_m + C::kWarps * C::kRows;                      // [kWarps, kRows]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // Diagnostics only (p.timeline is normally null): when this CTA reached slot `slot`.
  auto mark = [&](int slot) {
    if (p.timeline == nullptr || tid != 0) return;
    unsigned long long now, sm;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    asm volatile("cvt.u64.u32 %0, %%smid;" : "=l"(sm));
    p.timeline[blockIdx.x * kTimelineSlots] = sm;
    p.timeline[blockIdx.x * kTimelineSlots + slot] = now;
  };
  mark(1);
  // The plan's CTA this one runs, for share `rep` of the KV heads (DecodeParams::head_reps).
  const int rep = static_cast<int>(blockIdx.x) % p.head_reps, plan_cta = static_cast<int>(blockIdx.x) / p.head_reps;
  const int item_begin = p.cta_item_indptr[plan_cta];
  const int item_end = p.cta_item_indptr[plan_cta + 1];
  if (item_begin >= item_end) {
    mark(4);
    return;
  }
  const int g = lane / 4, t = lane % 4;  // mma fragment row and column of this lane
  const int group = p.num_qo_heads / p.num_kv_heads;
  const int page_shift = (p.page_size & (p.page_size - 1)) == 0 ? __ffs(p.page_size) - 1 : -1;
  const bool soft_cap = p.logits_soft_cap > 0.0f;
  const float qk_scale = p.sm_scale * p.k_scale;
  const float qk_scale_log2 = qk_scale * dd::kLog2e;
  const uint32_t s_base = tile::smem_addr(smem);
  // This warp's barrier of stage s for K (half 0) or V (1): each lane arrives once its copies land.
  auto bar = [&](int s, int half) { return s_base + C::kBarOffset + ((s * C::kWarps + warp) * 2 + half) * 8; };
  if (tid < kS * C::kWarps * 2) dd::mbar_init(s_base + C::kBarOffset + tid * 8, 32);  // a lane's arrival each
  dd::mbar_init_fence();
  __syncthreads();  // every barrier is initialised before any copy arrives on it
  const uint32_t s_q = s_base + C::kQOffset;

  // Producer: this warp's next tile to copy; it runs kS tiles ahead, across item boundaries. Tile n
  // of the warp's stream uses stage n % kS; issue_half copies one half of the next tile without
  // moving on, advance moves on.
  int p_item = item_begin, p_tile = 0;
  DecodeWorkItem p_it = dd::load_item(p, item_begin, rep);
  int p_tiles = dd::num_tiles(p_it);
  int r_page = dd::load_page(p, p_it, p_tile, warp, lane, page_shift);  // entry of the next tile's row
  auto issue_half = [&](int stage, int half) {
    if (p_item >= item_end) return;
    dd::issue_rows<C>(p, p_it, p_tile, warp, lane, half, page_shift, r_page, s_base + stage * C::kStageBytes,
                      bar(stage, half));
  };
  auto advance = [&] {
    if (p_item >= item_end) return;
    if (++p_tile == p_tiles) {
      p_tile = 0;
      if (++p_item < item_end) {
        p_it = dd::load_item(p, p_item, rep);
        p_tiles = dd::num_tiles(p_it);
      }
    }
    if (p_item < item_end) r_page = dd::load_page(p, p_it, p_tile, warp, lane, page_shift);
  };
  // Launched with programmatic serialisation: everything above (reads of the plan only) overlapped
  // the cache store before this kernel; q and the cache are read only after it completes.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#pragma unroll
  for (int s = 0; s < kS; ++s) {
    issue_half(s, 0);
    issue_half(s, 1);
    advance();
  }
  // The first item's query rows load while the first tiles are in flight (before them, their
  // round trip delayed the first copies by as much).
  dd::stage_q<C>(p, dd::load_item(p, item_begin, rep), group, smem + C::kQOffset);
  __syncthreads();

  // Consumer state: this warp's online softmax over its keys of the current item.
  int c_item = item_begin, c_tile = 0;
  DecodeWorkItem c_it = p_item == item_begin ? p_it : dd::load_item(p, item_begin, rep);
  int c_tiles = dd::num_tiles(c_it);
  auto item_mask = [&](const DecodeWorkItem& it) -> const uint8_t* {
    if (p.custom_mask_indptr == nullptr) return nullptr;
    const int64_t lo = p.custom_mask_indptr[it.request_idx], hi = p.custom_mask_indptr[it.request_idx + 1];
    return hi > lo ? p.custom_mask + lo : nullptr;
  };
  const uint8_t* c_mask = item_mask(c_it);
  // Softmax state of query heads 2t and 2t + 1 (the same in every lane of a column t).
  float r_m[2] = {kNegInf, kNegInf};  // running max, log2 domain
  float r_l[2] = {0.0f, 0.0f};        // this lane's part of the running denominator
  float r_o[kDt][4];                  // O^T [kD, 8 heads] accumulator fragments
#pragma unroll
  for (int n = 0; n < kDt; ++n) r_o[n][0] = r_o[n][1] = r_o[n][2] = r_o[n][3] = 0.0f;
  uint32_t r_q[kDt][2];  // Q^T [kD, 8 heads] as B fragments, loaded at each item's first tile
  auto col_max = [](float x) {  // over the 8 lanes of a column (the keys g of one head pair)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 8));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 16));
  };

  for (int it_idx = 0; c_item < item_end; ++it_idx) {
    const int stage = it_idx % kS;
    const uint32_t parity = static_cast<uint32_t>(it_idx / kS) & 1u;
    // This tile's K, and with a conversion its V as well (both are converted at once).
    dd::mbar_wait(bar(stage, 0), parity);
    if constexpr (C::kConvert) dd::mbar_wait(bar(stage, 1), parity);
    if (it_idx == 0) mark(2);

    unsigned char* s_stage = smem + stage * C::kStageBytes;
    uint32_t s_k, s_v;
    int row0;  // this warp's first key row in the K/V tile it reads
    if constexpr (C::kConvert) {
      unsigned char* s_conv = smem + C::kConvOffset + warp * (2 * 16 * kD * 2);
      constexpr int kRawCpr = C::kRowBytes / 16;
      __syncwarp();  // every lane is done reading the previous tile's conversion
      for (int idx = lane; idx < 2 * 16 * kRawCpr; idx += 32) {
        const int mat = idx / (16 * kRawCpr), rem = idx % (16 * kRawCpr);
        const int r = rem / kRawCpr, c = rem % kRawCpr;
        const uint4 raw = *reinterpret_cast<const uint4*>(s_stage + mat * C::kTileBytes +
                                                          (warp * 16 + r) * C::kRowBytes + c * 16);
        constexpr int kOutChunks = sizeof(typename C::TKv) == 1 ? 2 : 1;
        uint32_t out[4 * kOutChunks];
        tile::convert16<T, typename C::TKv>(raw, out);
        unsigned char* dst = s_conv + mat * (16 * kD * 2);
#pragma unroll
        for (int o = 0; o < kOutChunks; ++o) {
          *reinterpret_cast<uint4*>(dst + tile::swizzle<kD>(r, c * kOutChunks + o)) =
              make_uint4(out[4 * o], out[4 * o + 1], out[4 * o + 2], out[4 * o + 3]);
        }
      }
      __syncwarp();
      // The raw stage is free once converted: the tile kS ahead goes into it now.
      issue_half(stage, 0);
      issue_half(stage, 1);
      advance();
      s_k = tile::smem_addr(s_conv);
      s_v = s_k + 16 * kD * 2;
      row0 = 0;
    } else {
      s_k = s_base + stage * C::kStageBytes;
      s_v = s_k + C::kTileBytes;
      row0 = warp * 16;
    }

    // S^T = K Q^T: [16 keys, 8 query heads], K as the A operand (m16) and Q as B (n8), so a GQA
    // group of up to 8 heads wastes no more than half the mma; two accumulator chains (even and
    // odd k steps) halve the dependent mma latency.
    if (c_tile == 0) {
#pragma unroll
      for (int kk = 0; kk < kDt; kk += 2) {
        uint32_t q4[4];
        tile::ldmatrix_x4(q4, s_q + tile::swizzle<kD>(lane % 8, kk * 2 + lane / 8));
        r_q[kk][0] = q4[0];
        r_q[kk][1] = q4[1];
        r_q[kk + 1][0] = q4[2];
        r_q[kk + 1][1] = q4[3];
      }
    }
    float r_s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int kk = 0; kk < kDt; ++kk) {
      uint32_t a[4];
      tile::ldmatrix_x4(a, s_k + tile::swizzle<kD>(row0 + lane % 16, kk * 2 + lane / 16));
      tile::mma_16816<T>(r_s[kk & 1], a, r_q[kk][0], r_q[kk][1]);
    }
    // K's half of the stage is read: its next tile is copied now, except on the item's last tile,
    // whose stage is the scratch of the warps' combine below.
    const bool item_last = c_tile + 1 == c_tiles;
    if constexpr (!C::kConvert) {
      if (!item_last) issue_half(stage, 0);
    }

    // Scale, soft-cap, mask; online softmax per head. Element c of this lane: key g + 8 (c / 2),
    // head 2t + (c % 2).
    const int key_base = c_it.kv_begin + c_tile * C::kBlockN + warp * 16;
    float sc[4];
    float head_max[2] = {kNegInf, kNegInf};
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int key = key_base + g + 8 * (c / 2);
      const float raw = r_s[0][c] + r_s[1][c];
      float x = soft_cap ? p.logits_soft_cap * tanhf(raw * qk_scale / p.logits_soft_cap) * dd::kLog2e
                         : raw * qk_scale_log2;
      const bool visible = key < c_it.kv_end && (c_mask == nullptr || c_mask[key] != 0);
      x = visible ? x : kNegInf;
      sc[c] = x;
      head_max[c % 2] = fmaxf(head_max[c % 2], x);
    }
    float m_use[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float m_new = fmaxf(r_m[j], col_max(head_max[j]));
      // -inf - -inf is NaN: a head with nothing visible yet keeps base 0, so its P and alpha are 0.
      m_use[j] = m_new == kNegInf ? 0.0f : m_new;
      const float alpha = tile::fast_exp2(r_m[j] - m_use[j]);
      r_m[j] = m_new;
      r_l[j] *= alpha;
#pragma unroll
      for (int n = 0; n < kDt; ++n) {
        r_o[n][j] *= alpha;
        r_o[n][2 + j] *= alpha;
      }
    }
    float pr[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      pr[c] = tile::fast_exp2(sc[c] - m_use[c % 2]);
      r_l[c % 2] += pr[c];
    }
    // P^T as the B operand of O^T += V^T P^T: this lane holds P[key][heads 2t, 2t+1]; the B
    // fragment wants P[keys 2t, 2t+1][head g]: one 8x8 transpose a half of the keys.
    const uint32_t b_p0 = dd::transpose8x8(tile::pack2<T>(pr[0], pr[1]));
    const uint32_t b_p1 = dd::transpose8x8(tile::pack2<T>(pr[2], pr[3]));
    if constexpr (!C::kConvert) dd::mbar_wait(bar(stage, 1), parity);
    // O^T += V^T P^T: V^T fragments (16 dims x 16 keys) through ldmatrix.trans.
#pragma unroll
    for (int dn = 0; dn < kDt; ++dn) {
      uint32_t a[4];
      tile::ldmatrix_x4_trans(a, s_v + tile::swizzle<kD>(row0 + lane % 8 + 8 * (lane / 16), dn * 2 + (lane / 8) % 2));
      tile::mma_16816<T>(r_o[dn], a, b_p0, b_p1);
    }

    // The chunk that owns this step's key stores it, from the tile row it was copied into (the item's
    // last key is in its last tile; the warp that holds that row writes it).
    if (item_last && p.new_k != nullptr && c_it.owns_new_key != 0 && c_it.row_begin == 0) {
      const int tile_row = (c_it.kv_end - 1 - c_it.kv_begin) % C::kBlockN;
      if (tile_row / 16 == warp) dd::store_new_rows<C>(p, c_it, lane, s_stage, tile_row);
    }
    if (!item_last) {
      ++c_tile;
      if constexpr (!C::kConvert) {
        issue_half(stage, 1);
        advance();
      }
      continue;
    }

    // The item's last tile: the four warps' states meet in shared memory and are written out. The
    // stage just consumed has no copy in flight: its next tile is issued after the last barrier.
    __syncthreads();  // every warp is done reading the stage (or conversion buffer) reused here
    if (c_item + 1 == item_end) mark(3);
    float* s_o = reinterpret_cast<float*>(C::kConvert ? smem + C::kConvOffset : s_stage);  // [kWarps, kRows, kD]
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float l = r_l[j];
      l += __shfl_xor_sync(0xffffffffu, l, 4);
      l += __shfl_xor_sync(0xffffffffu, l, 8);
      l += __shfl_xor_sync(0xffffffffu, l, 16);
      const int head = 2 * t + j;
      if (g == 0) {
        s_m[warp * C::kRows + head] = r_m[j];
        s_l[warp * C::kRows + head] = l;
      }
#pragma unroll
      for (int n = 0; n < kDt; ++n) {
        s_o[(warp * C::kRows + head) * kD + n * 16 + g] = r_o[n][j];
        s_o[(warp * C::kRows + head) * kD + n * 16 + g + 8] = r_o[n][2 + j];
      }
    }
    __syncthreads();
    const int rows = min(C::kRows, group - c_it.row_begin);
    const int head0 = c_it.kv_head_idx * group + c_it.row_begin;
    for (int idx = tid; idx < rows * (kD / 4); idx += C::kThreads) {
      const int r = idx / (kD / 4), d = (idx % (kD / 4)) * 4;
      float m_max = kNegInf;
#pragma unroll
      for (int w = 0; w < C::kWarps; ++w) m_max = fmaxf(m_max, s_m[w * C::kRows + r]);
      const float base = m_max == kNegInf ? 0.0f : m_max;
      float l_sum = 0.0f;
      float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int w = 0; w < C::kWarps; ++w) {
        const float f = tile::fast_exp2(s_m[w * C::kRows + r] - base);
        l_sum += f * s_l[w * C::kRows + r];
        const float4 ow = *reinterpret_cast<const float4*>(s_o + (w * C::kRows + r) * kD + d);
        o.x += f * ow.x; o.y += f * ow.y; o.z += f * ow.z; o.w += f * ow.w;
      }
      if (c_it.partial_idx >= 0) {
        const float inv = l_sum > 0.0f ? p.v_scale / l_sum : 0.0f;
        const int64_t row = int64_t{c_it.partial_idx} * C::kRows + r;
        *reinterpret_cast<float4*>(p.partial_o + row * kD + d) = make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv);
        if (d == 0) p.partial_lse[row] = m_max == kNegInf ? kNegInf : (m_max + __log2f(l_sum)) * dd::kLn2;
      } else {
        // The sink joins the denominator only, and only where some key was visible.
        if (p.sinks != nullptr && m_max != kNegInf) l_sum += tile::fast_exp2(p.sinks[head0 + r] * dd::kLog2e - m_max);
        const float inv = l_sum > 0.0f ? p.v_scale / l_sum : 0.0f;
        T* g_out = static_cast<T*>(p.out) + (int64_t{c_it.token_idx} * p.num_qo_heads + head0 + r) * kD + d;
        *reinterpret_cast<uint2*>(g_out) = make_uint2(tile::pack2<T>(o.x * inv, o.y * inv), tile::pack2<T>(o.z * inv, o.w * inv));
      }
    }
    // Past this barrier every warp is done with the scratch: the consumed stage is refilled at once,
    // so the next tiles stream while this item's partial is counted and perhaps joined and
    // the next item's query rows load (each of those an exposed L2 round trip).
    __syncthreads();
    if constexpr (!C::kConvert) {
      issue_half(stage, 0);
      issue_half(stage, 1);
      advance();
    }
    if (c_it.partial_idx >= 0) {
      mark(5);
      dd::join_if_last<T, kD, C::kThreads>(p, c_it, rep, reinterpret_cast<int*>(smem + C::kFlagOffset),
                                           [&] { mark(7); });
      mark(6);
    }
    // Every warp is past its last Q K^T of this item (the barriers above): the next item's rows.
    if (c_item + 1 < item_end) {
      dd::stage_q<C>(p, dd::load_item(p, c_item + 1, rep), group, smem + C::kQOffset);
      __syncthreads();  // the rows are in place before any warp's first Q K^T of that item
    }
    c_tile = 0;
    if (++c_item < item_end) {
      c_it = dd::load_item(p, c_item, rep);
      c_tiles = dd::num_tiles(c_it);
      c_mask = item_mask(c_it);
    }
    r_m[0] = r_m[1] = kNegInf;
    r_l[0] = r_l[1] = 0.0f;
#pragma unroll
    for (int n = 0; n < kDt; ++n) r_o[n][0] = r_o[n][1] = r_o[n][2] = r_o[n][3] = 0.0f;
  }
  mark(4);
}

}  // namespace attnkit::planned
