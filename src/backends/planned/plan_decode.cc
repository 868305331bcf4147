// The host scheduler's decode plan: chunking and CTA assignment in one pass over the batch, and the
// merges that join split units. No CUDA here; plan.cc lays out the upload buffer.
#include "backends/planned/plan.h"

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "attnkit/error.h"

namespace attnkit::planned {

int max_decode_items(int num_requests, const PlanShape& shape) {
  // One item per unit, plus one more each time a CTA boundary cuts a unit.
  return num_requests * shape.num_kv_heads * shape.num_slices() + shape.num_ctas;
}
// A split of c chunks has one merge item, or ceil(c / kJoinFanIn) more when joined in two levels,
// each with a group partial. The chunks of all splits number at most 2 (num_ctas - 1), and a split
// with more than kJoinFanIn of them adds at most c / kJoinFanIn + 1 < 2 c / kJoinFanIn.
int max_decode_merges(const PlanShape& shape) {
  const int splits = std::max(shape.num_ctas - 1, 0);
  return splits + (4 * splits + kJoinFanIn - 1) / kJoinFanIn;
}
int max_decode_partials(const PlanShape& shape) {
  const int splits = std::max(shape.num_ctas - 1, 0);
  return 2 * splits + (4 * splits + kJoinFanIn - 1) / kJoinFanIn;
}

namespace {

// First-level groups of a split of `count` chunks: 0 where one level joins it. Group g holds
// chunks [g * count / groups, (g + 1) * count / groups): near-equal sizes, in order.
int join_groups(int count) { return count > kJoinFanIn ? (count + kJoinFanIn - 1) / kJoinFanIn : 0; }
int join_group_begin(int g, int count, int groups) { return g * count / groups; }

// Where pass 1 writes chunks: each as head 0's item of its lane, so that with one CTA a lane (the
// default) the chunks are the plan's items, written once in place. With wider lanes they go to a
// scratch list and pass 2 copies each to the lane's CTAs, one head each; reserved[] then carries
// what head j adds to partial_idx and merge_idx (0 for an unsplit unit), and is cleared there.
struct ChunkList {
  DecodeWorkItem* data;
  size_t capacity;
  size_t size = 0;
  std::vector<DecodeWorkItem>* scratch;  // null: data is the plan's items, never grown
  void push(const DecodeWorkItem& item) {
    if (size >= capacity) [[unlikely]] {
      if (!scratch) {  // counted, not written: the caller reports the shortfall once planned
        ++size;
        return;
      }
      scratch->resize(std::max<size_t>(2 * capacity, 64));
      data = scratch->data();
      capacity = scratch->size();
    }
    data[size++] = item;
  }
  bool written(size_t end) const { return end <= capacity; }
};

// The open lane's end on the last lane: never reached, the last lane takes everything left.
constexpr int64_t kNoLaneEnd = INT64_MAX / 4;

// Pass 1's lanes: where each one ends, and what the open one holds.
//
// Lane l aims to end where a (l + 1) / num_lanes share of the budget ends, so a lane that closed
// light or heavy moves the ends of the lanes after it by no more than it missed. (Shares
// recomputed from what is left drifted up when many lanes closed light, and left the busiest lane
// 20% over the mean on short histories.) What light lanes left is made up a little at a time:
// kCatchUp a lane, or an even part of it over the lanes left where that is more. Given to the next
// lane at once, one unit's end that closed a lane light made its neighbour 19% heavier than the
// mean.
struct Lanes {
  Lanes(int64_t budget, int num_lanes, int32_t* lane_begin)
      : budget(budget), num_lanes(num_lanes), mean_share((budget + num_lanes - 1) / num_lanes),
        step_q(budget / num_lanes), step_r(budget % num_lanes), lane_begin(lane_begin), prefix_q(step_q),
        prefix_r(step_r) {
    lane_begin[0] = 0;
    target = end_of_open_lane();
  }
  bool last() const { return lane == num_lanes - 1; }
  void close(size_t num_chunks) {
    max_load = std::max(max_load, load);
    assigned += load;
    load = 0;
    lane_begin[++lane] = static_cast<int32_t>(num_chunks);
    prefix_q += step_q;
    prefix_r += step_r;
    if (prefix_r >= num_lanes) {
      prefix_r -= num_lanes;
      ++prefix_q;
    }
    target = end_of_open_lane();
  }
  // Once every unit is planned: the open lane ends, and the lanes after it are empty.
  void finish(size_t num_chunks) {
    max_load = std::max(max_load, load);
    while (lane < num_lanes) lane_begin[++lane] = static_cast<int32_t>(num_chunks);
  }

  const int64_t budget;
  const int num_lanes;
  const int64_t mean_share;
  // ceil((lane + 1) * budget / num_lanes), stepped without a division a lane (a 64-bit division
  // costs tens of cycles, and a plan closes hundreds of lanes).
  const int64_t step_q, step_r;
  int32_t* const lane_begin;  // [num_lanes + 1]: lane l's chunks are [lane_begin[l], lane_begin[l + 1])
  int64_t prefix_q, prefix_r;  // (lane + 1) * budget = prefix_q * num_lanes + prefix_r
  int lane = 0;
  int64_t assigned = 0;  // cost of the lanes already closed
  int64_t load = 0;      // cost given to the open lane
  int64_t max_load = 0;
  int64_t target = 0;    // the open lane's load at which it closes

 private:
  int64_t end_of_open_lane() const {
    if (last()) return kNoLaneEnd;
    const int64_t to_prefix_end = prefix_q + (prefix_r > 0) - assigned;
    const int64_t floor_share = mean_share + kCatchUp;
    const int64_t left = budget - assigned, lanes_left = num_lanes - lane;
    // The even part of what is left, ceil(left / lanes_left), only where it is above floor_share.
    const int64_t even_part = left > floor_share * lanes_left ? (left + lanes_left - 1) / lanes_left : 0;
    return std::min(to_prefix_end, std::max(floor_share, even_part));
  }
};

// Pass 1 for the units that do not fit the open lane whole: their cutting, and the joins of the
// ones split. The loop over the units that fit (most of them) keeps its own copies of the open
// lane's load and end and of the chunk list, which then stay in registers; with one state for
// both, they went through memory on every unit.
struct UnitCutter {
  Lanes lanes;
  ChunkList chunks;
  std::span<DecodeMergeItem> merges;
  DecodePlanStats& st;
  int width, group, num_ctas;

  // Cuts `whole` (the unit as one item) into chunks on the open lane and the next ones, closing
  // the lanes it fills. Each cut adds a chunk (and its fixed cost): the budget allows for the most
  // cuts there can be, which keeps the extra from piling up on the last lane.
  void cut(const DecodeWorkItem& whole) {
    const size_t first = chunks.size;
    const int kv_len = whole.kv_end;
    for (int begin = whole.kv_begin; begin < kv_len;) {
      const int rest = kv_len - begin;
      const bool last_lane = lanes.last();
      const int64_t room = lanes.target - lanes.load;
      // The smallest next piece (a whole short unit, or a minimum chunk) goes here if that
      // overshoots the share by less than closing now would fall short of it.
      if (!last_lane && lanes.load > 0 && 2 * room < std::min(rest, kMinChunk) + kItemCost) {
        lanes.close(chunks.size);
        continue;
      }
      int take = rest;
      if (!last_lane && rest + kItemCost > room) {
        // Cut what fits, in whole tiles; never a chunk or a tail shorter than kMinChunk.
        const int fit = static_cast<int>((room - kItemCost) / kChunkGrain * kChunkGrain);
        if (fit < kMinChunk && lanes.load > 0) {  // no room for a minimum chunk: the next lane takes it
          lanes.close(chunks.size);
          continue;
        }
        take = std::max(fit, kMinChunk);
        if (rest - take < kMinChunk) {
          // The tail would be shorter than a minimum chunk. Taking it too overshoots the share
          // for good; leaving a minimum chunk for the next lane only closes this one light,
          // which the next lane's fixed end makes up. So take it only when it barely shows.
          const int64_t overshoot = rest + kItemCost - room;
          take = overshoot > kCatchUp && rest - kMinChunk >= kMinChunk ? rest - kMinChunk : rest;
        }
      }
      // Written as if unsplit; a split unit's chunks are amended by join(). Only the last chunk
      // reaches kv_len: it holds this step's new key.
      const int end = begin + take;
      chunks.push({whole.token_idx, whole.request_idx, whole.page_begin, whole.kv_head_idx, whole.row_begin, begin, end,
                   -1, -1, end == kv_len ? 1 : 0, {0, 0}});
      lanes.load += take + kItemCost;
      begin += take;
      if (!last_lane && lanes.load >= lanes.target) lanes.close(chunks.size);
    }
    const int count = static_cast<int>(chunks.size - first);
    if (count > 1) join(first, count, whole);
  }

  // Gives a split unit's `count` chunks from `first` their partial slots and merge items: per
  // head, the chunks' partials, then (two levels) the group partials; per head, the first-level
  // merges, then the one that writes the output.
  void join(size_t first, int count, const DecodeWorkItem& whole) {
    const int groups = join_groups(count);
    const int32_t base = st.num_partials, merge_base = st.num_merges;
    st.num_partials += (count + groups) * width;
    ATTNKIT_CHECK(static_cast<size_t>(st.num_merges + (groups + 1) * width) <= merges.size(),
                  "planned plan: more than ", merges.size(), " merges (the bound for ", num_ctas, " CTAs)");
    for (int j = 0; j < width; ++j) {
      const DecodeMergeItem head{whole.token_idx, (whole.kv_head_idx + j) * group + whole.row_begin,
                                 std::min(kDecodeRows, group - whole.row_begin), 0, 0, -1, -1, 0};
      const int32_t group_base = base + width * count + j * groups;  // this head's group partials
      const int32_t last = st.num_merges + groups;                    // its output merge
      for (int g = 0; g < groups; ++g) {
        DecodeMergeItem m = head;
        const int lo = join_group_begin(g, count, groups);
        m.partial_begin = base + j * count + lo;
        m.num_partials = join_group_begin(g + 1, count, groups) - lo;
        m.next_merge = last;
        m.out_partial = group_base + g;
        merges[static_cast<size_t>(st.num_merges++)] = m;
      }
      DecodeMergeItem m = head;
      m.partial_begin = groups > 0 ? group_base : base + j * count;
      m.num_partials = groups > 0 ? groups : count;
      merges[static_cast<size_t>(st.num_merges++)] = m;
    }
    if (!chunks.written(first + static_cast<size_t>(count))) return;
    // Head 0's partial of chunk k, and the merge that joins it: its group's, or the only one.
    DecodeWorkItem* unit = chunks.data + first;
    for (int g = 0, k = 0; g < std::max(groups, 1); ++g) {
      const int group_end = groups > 0 ? join_group_begin(g + 1, count, groups) : count;
      for (; k < group_end; ++k) {
        unit[k].partial_idx = base + k;
        unit[k].merge_idx = merge_base + g;
        if (width > 1) unit[k].reserved[0] = count, unit[k].reserved[1] = groups + 1;
      }
    }
  }
};

}  // namespace

// Worked example (llama3-8b heads, 8 KV heads, 264 CTAs, one CTA a lane): 32 requests of 128 and
// 32 of 8192 are 256 units of 128 and 256 of 8192, costing 256 * (128 + 192) + 256 * (8192 + 192)
// = 2,228,224 plus an item's cost for each of the 263 cuts there can be, so each CTA's share is
// about 8,630: a CTA takes short units whole or about one long one, and a unit is cut only where a
// share ends. One request of 32768 (8 units) gives shares of about 1,190: 33 chunks of 992-1,008
// positions a unit (the last shorter), joined in two levels. With lanes of 8 CTAs the same happens
// per lane, per head.
DecodePlanStats plan_decode(const ForwardBatch& batch, const PlanShape& shape, int window_left, DecodePlanView out) {
  DecodePlanStats st;
  const int num_ctas = shape.num_ctas;
  const int num_slices = shape.num_slices();
  ATTNKIT_CHECK(num_ctas >= 1, "planned plan: num_ctas must be >= 1, got ", num_ctas);
  ATTNKIT_CHECK(out.cta_item_indptr.size() >= static_cast<size_t>(num_ctas) + 1,
                "planned plan: cta_item_indptr holds ", out.cta_item_indptr.size(), " entries, needs ", num_ctas + 1);
  // A lane is a run of `width` consecutive CTAs that take the same chunks, one KV head each: they
  // read the interleaved heads of the same cache slots at about the same time.
  const int width = shape.lane_width();
  const int num_lanes = num_ctas / width;
  const int head_blocks = shape.num_kv_heads / width;
  const int units = head_blocks * num_slices;  // per request
  const int n = batch.batch_size();
  int64_t lane_total = 0;
  for (int i = 0; i < n; ++i) {
    if (batch.qo_len(i) != 1) continue;
    const int kv_len = batch.kv_len(i);
    lane_total += int64_t{kv_len - decode_kv_begin(kv_len, window_left) + kItemCost} * units;
    ++st.num_decode_requests;
  }

  // Pass 1: cut units into chunks on lanes.
  thread_local std::vector<DecodeWorkItem> lane_chunks;
  thread_local std::vector<int32_t> lane_begin_scratch;
  // With one CTA a lane, lane l's first chunk is CTA l's first item.
  int32_t* lane_begin = out.cta_item_indptr.data();
  if (width > 1) {
    lane_begin_scratch.resize(static_cast<size_t>(num_lanes) + 1);
    lane_begin = lane_begin_scratch.data();
  }
  UnitCutter cutter{Lanes(lane_total + int64_t{num_lanes - 1} * kItemCost, num_lanes, lane_begin),
                    width == 1 ? ChunkList{out.items.data(), out.items.size(), 0, nullptr}
                               : ChunkList{lane_chunks.data(), lane_chunks.size(), 0, &lane_chunks},
                    out.merges, st, width, shape.group_size(), num_ctas};
  // The open lane's load and end, and the chunk list, as the loop over whole units keeps them;
  // the cutter's copies are brought up to date around each cut.
  int64_t load = 0, target = cutter.lanes.target;
  ChunkList chunks = cutter.chunks;
  for (int i = 0; i < n; ++i) {
    if (batch.qo_len(i) != 1) continue;
    const int kv_len = batch.kv_len(i);
    const int lo = decode_kv_begin(kv_len, window_left);
    if (lo >= kv_len) continue;  // nothing to read (no KV history): no items
    const int64_t whole_cost = int64_t{kv_len - lo} + kItemCost;
    const int32_t token_idx = batch.qo_indptr[i], page_begin = batch.kv_page_indptr[i];
    // The unit as one item. (Built where it is stored: one built on the stack and copied stalls
    // the copy on the store forwarding of its narrower fields.)
    auto whole = [&](int hb, int slice) {
      return DecodeWorkItem{token_idx, i, page_begin, hb * width, slice * kDecodeRows, lo, kv_len, -1, -1, 1, {0, 0}};
    };
    for (int hb = 0; hb < head_blocks; ++hb) {
      for (int slice = 0; slice < num_slices; ++slice) {
        // A unit that leaves room in the open lane goes there whole; one that fills it or more,
        // to the cutter (which also closes the lane it fills exactly).
        if (whole_cost < target - load) {
          chunks.push(whole(hb, slice));
          load += whole_cost;
          continue;
        }
        cutter.lanes.load = load;
        cutter.chunks = chunks;
        cutter.cut(whole(hb, slice));
        load = cutter.lanes.load;
        target = cutter.lanes.target;
        chunks = cutter.chunks;
      }
    }
  }
  cutter.lanes.load = load;
  cutter.lanes.finish(chunks.size);
  const Lanes& lanes = cutter.lanes;

  const size_t max_items = out.items.size();
  ATTNKIT_CHECK(chunks.size * static_cast<size_t>(width) <= max_items, "planned plan: more than ", max_items,
                " decode items (the bound for this batch)");
  st.num_items = static_cast<int>(chunks.size) * width;
  // Pass 2, lanes of several CTAs: each lane's chunks become one item per head, on the lane's CTAs.
  if (width > 1) {
    int num_items = 0;
    out.cta_item_indptr[0] = 0;
    for (int l = 0; l < num_lanes; ++l) {
      for (int j = 0; j < width; ++j) {
        for (int32_t k = lane_begin[l]; k < lane_begin[l + 1]; ++k) {
          DecodeWorkItem item = chunks.data[k];
          item.kv_head_idx += j;
          item.partial_idx += j * item.reserved[0];
          item.merge_idx += j * item.reserved[1];
          item.reserved[0] = item.reserved[1] = 0;
          out.items[static_cast<size_t>(num_items++)] = item;
        }
        out.cta_item_indptr[static_cast<size_t>(l * width + j) + 1] = num_items;
      }
    }
  }
  for (int c = num_lanes * width; c < num_ctas; ++c) out.cta_item_indptr[static_cast<size_t>(c) + 1] = st.num_items;
  st.max_cta_cost = lanes.max_load;
  st.total_cost = (lanes.assigned + lanes.load) * width;
  if (out.num_merges) *out.num_merges = st.num_merges;
  return st;
}

}  // namespace attnkit::planned
