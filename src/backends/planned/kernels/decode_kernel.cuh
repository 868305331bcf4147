// The decode kernel: a persistent CTA walks its list of work items as one stream of 64-key K/V
// tiles, the keys as the rows of m16n8k16 mma tiles and up to 8 query heads of a GQA group as
// their columns. Each warp owns 16 keys of a tile and runs its own pipeline: it copies its K rows
// and its V rows (cp.async) onto its own mbarriers, kStages tiles ahead across item boundaries,
// and no CTA barrier is paid per tile, only at an item's end, where the warps' softmax states meet.
// The body is the sequence of its roles:
//   producer (decode_producer.cuh): each warp's copy stream and its stage barriers;
//   mainloop (decode_mainloop.cuh): S^T = K Q^T, O^T += V^T P^T and the register-carried state;
//   softmax (decode_softmax.cuh): the online update and P^T (the scale and mask are here);
//   epilogue (decode_epilogue.cuh): the warps' states met, the item's rows or partial written;
//   join (decode_join.cuh): the split-KV merge by the CTA that finishes a split last.
// Copies and query loads are decode_copy.cuh; dispatch is decode.cu.
#pragma once

#include <cmath>
#include <type_traits>

#include "backends/planned/kernels/decode_copy.cuh"
#include "backends/planned/kernels/decode_epilogue.cuh"
#include "backends/planned/kernels/decode_join.cuh"
#include "backends/planned/kernels/decode_mainloop.cuh"
#include "backends/planned/kernels/decode_producer.cuh"
#include "backends/planned/kernels/decode_softmax.cuh"

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

template <typename C>
__global__ void __launch_bounds__(C::kThreads, C::kMinCtas) decode_kernel(const __grid_constant__ DecodeParams p) {
  using T = typename C::T;
  constexpr int kS = C::kStages;
  constexpr int kD = C::kHeadDim;
  namespace dd = decode_detail;

  extern __shared__ __align__(128) unsigned char smem[];
  float* s_m = reinterpret_cast<float*>(smem + C::kMlOffset);  // [kWarps, kRows]
  float* s_l = s_m + C::kWarps * C::kRows;                      // [kWarps, kRows]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
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
  const dd::DecodeCta cta{p, tid, warp, lane, g, t, rep, item_begin, item_end, group, page_shift, s_base};
  auto bar = [&](int s, int half) { return dd::stage_bar<C>(s_base, warp, s, half); };
  if (tid < kS * C::kWarps * 2) dd::mbar_init(s_base + C::kBarOffset + tid * 8, 32);  // a lane's arrival each
  dd::mbar_init_fence();
  __syncthreads();  // every barrier is initialised before any copy arrives on it
  const uint32_t s_q = s_base + C::kQOffset;

  // Producer: this warp's copies run kS tiles ahead of its consumer.
  dd::DecodeProducer<C> prod;
  prod.init(cta);
  // Launched with programmatic serialisation: everything above (reads of the plan only) overlapped
  // the cache store before this kernel; q and the cache are read only after it completes.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#pragma unroll
  for (int s = 0; s < kS; ++s) prod.refill(cta, s);
  // The first item's query rows load while the first tiles are in flight (before them, their
  // round trip delayed the first copies by as much).
  dd::stage_q<C>(p, dd::load_item(p, item_begin, rep), group, smem + C::kQOffset);
  __syncthreads();

  // Consumer state: this warp's online softmax over its keys of the current item.
  int c_item = item_begin, c_tile = 0;
  DecodeWorkItem c_it = prod.item == item_begin ? prod.it : dd::load_item(p, item_begin, rep);
  int c_tiles = dd::num_tiles(c_it);
  const uint8_t* c_mask = dd::item_mask(p, c_it);
  dd::DecodeHeadStat r_m, r_l;
  dd::DecodeO<C> r_o;
  dd::reset_state<C>(r_m, r_l, r_o);
  dd::DecodeQFrags<C> r_q;

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
      // A cache in another type: this warp's rows converted into its own buffer. Kept in the body:
      // as a function of its own its loop came out unrolled otherwise, 8 registers more for
      // 16-bit caches.
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
      prod.refill(cta, stage);
      s_k = tile::smem_addr(s_conv);
      s_v = s_k + 16 * kD * 2;
      row0 = 0;
    } else {
      s_k = s_base + stage * C::kStageBytes;
      s_v = s_k + C::kTileBytes;
      row0 = warp * 16;
    }

    const dd::DecodeTileView view{s_k, s_v, row0};
    if (c_tile == 0) dd::load_q_frags<C>(r_q, s_q, lane);
    float r_s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    dd::qk_tile<C>(r_s, r_q, view, lane);
    // K's half of the stage is read: its next tile is copied now, except on the item's last tile,
    // whose stage is the scratch of the warps' combine below.
    const bool item_last = c_tile + 1 == c_tiles;
    if constexpr (!C::kConvert) {
      if (!item_last) prod.issue_half(cta, stage, 0);
    }

    // Scale, soft-cap, mask; element c of this lane: key g + 8 (c / 2), head 2t + (c % 2).
    float sc[4];
    float head_max[2] = {-INFINITY, -INFINITY};
    const int key_base = c_it.kv_begin + c_tile * C::kBlockN + warp * 16;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int key = key_base + g + 8 * (c / 2);
      const float raw = r_s[0][c] + r_s[1][c];
      float x = soft_cap ? p.logits_soft_cap * tanhf(raw * qk_scale / p.logits_soft_cap) * dd::kLog2e
                         : raw * qk_scale_log2;
      const bool visible = key < c_it.kv_end && (c_mask == nullptr || c_mask[key] != 0);
      x = visible ? x : -INFINITY;
      sc[c] = x;
      head_max[c % 2] = fmaxf(head_max[c % 2], x);
    }
    float m_use[2];
    dd::online_update<C>(r_m, r_l, r_o, head_max, m_use);
    uint32_t b_p0, b_p1;
    dd::probs<T>(r_l, sc, m_use, b_p0, b_p1);
    if constexpr (!C::kConvert) dd::mbar_wait(bar(stage, 1), parity);
    dd::pv_tile<C>(r_o, view, b_p0, b_p1, lane);

    // The chunk that owns this step's key stores it, from the tile row it was copied into (the item's
    // last key is in its last tile; the warp that holds that row writes it).
    if (item_last && p.new_k != nullptr && c_it.owns_new_key != 0 && c_it.row_begin == 0) {
      const int tile_row = (c_it.kv_end - 1 - c_it.kv_begin) % C::kBlockN;
      if (tile_row / 16 == warp) dd::store_new_rows<C>(p, c_it, lane, s_stage, tile_row);
    }
    if (!item_last) {
      ++c_tile;
      if constexpr (!C::kConvert) {
        prod.issue_half(cta, stage, 1);
        prod.advance(cta);
      }
      continue;
    }

    // Epilogue of the item's last tile: the four warps' states meet in shared memory and are
    // written out. The stage just consumed has no copy in flight: its next tile is issued after
    // the last barrier.
    __syncthreads();  // every warp is done reading the stage (or conversion buffer) reused here
    if (c_item + 1 == item_end) mark(3);
    const dd::DecodeScratch scratch{s_m, s_l, reinterpret_cast<float*>(C::kConvert ? smem + C::kConvOffset : s_stage)};
    dd::put_state<C>(cta, scratch, r_m, r_l, r_o);
    __syncthreads();
    dd::write_item<C>(cta, scratch, c_it);
    // Past this barrier every warp is done with the scratch: the consumed stage is refilled at once,
    // so the next tiles stream while this item's partial is counted and perhaps joined and
    // the next item's query rows load (each of those an exposed L2 round trip).
    __syncthreads();
    if constexpr (!C::kConvert) prod.refill(cta, stage);
    // Join: the last CTA to write a split's partial joins the split.
    if (c_it.partial_idx >= 0) {
      mark(5);
      dd::join_if_last<T, C::kHeadDim, C::kThreads>(p, c_it, rep, reinterpret_cast<int*>(smem + C::kFlagOffset),
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
      c_mask = dd::item_mask(p, c_it);
    }
    dd::reset_state<C>(r_m, r_l, r_o);
  }
  mark(4);
}

}  // namespace attnkit::planned
