// The decode kernel's producer side: each warp's own pipeline of K/V tiles, kStages tiles ahead of
// its consumer and across work-item boundaries. Tile n of the warp's stream uses stage n % kStages;
// K (half 0) and V (half 1) of a stage are copied and waited on separately, on the warp's own
// mbarriers. The copies themselves are decode_copy.cuh; the consumer is decode_mainloop.cuh.
#pragma once

#include "backends/planned/kernels/decode_copy.cuh"

namespace attnkit::planned::decode_detail {

// This warp's barrier of stage s for K (half 0) or V (1): each lane arrives once its copies land.
template <typename C>
__device__ __forceinline__ uint32_t stage_bar(uint32_t s_base, int warp, int s, int half) {
  return s_base + C::kBarOffset + ((s * C::kWarps + warp) * 2 + half) * 8;
}

// What every role of the CTA reads and no role changes: the launch, this thread's place in it,
// and the CTA's list of work items [item_begin, item_end) for its share `rep` of the KV heads.
struct DecodeCta {
  const DecodeParams& p;
  int tid, warp, lane;
  int g, t;  // mma fragment row and column of this lane
  int rep, item_begin, item_end;
  int group;       // query heads a KV head
  int page_shift;  // log2 of a power-of-two page size, else -1
  uint32_t s_base;  // the dynamic shared memory
};

// This warp's copy stream: the next tile to copy (tile `tile` of item `item`), kStages tiles
// ahead of the consumer, across item boundaries. issue_half copies one half of that tile without
// moving on; advance moves on.
template <typename C>
struct DecodeProducer {
  int item, tile;
  DecodeWorkItem it;
  int tiles;
  int page;  // page-table entry of the next tile's row (load_page)

  __device__ __forceinline__ void init(const DecodeCta& cta) {
    item = cta.item_begin;
    tile = 0;
    it = load_item(cta.p, cta.item_begin, cta.rep);
    tiles = num_tiles(it);
    page = load_page(cta.p, it, tile, cta.warp, cta.lane, cta.page_shift);
  }

  __device__ __forceinline__ void issue_half(const DecodeCta& cta, int stage, int half) {
    if (item >= cta.item_end) return;
    issue_rows<C>(cta.p, it, tile, cta.warp, cta.lane, half, cta.page_shift, page, cta.s_base + stage * C::kStageBytes,
                  stage_bar<C>(cta.s_base, cta.warp, stage, half));
  }

  __device__ __forceinline__ void advance(const DecodeCta& cta) {
    if (item >= cta.item_end) return;
    if (++tile == tiles) {
      tile = 0;
      if (++item < cta.item_end) {
        it = load_item(cta.p, item, cta.rep);
        tiles = num_tiles(it);
      }
    }
    if (item < cta.item_end) page = load_page(cta.p, it, tile, cta.warp, cta.lane, cta.page_shift);
  }

  // Both halves of the next tile into `stage`, then on to the tile after it.
  __device__ __forceinline__ void refill(const DecodeCta& cta, int stage) {
    issue_half(cta, stage, 0);
    issue_half(cta, stage, 1);
    advance(cta);
  }
};

}  // namespace attnkit::planned::decode_detail
