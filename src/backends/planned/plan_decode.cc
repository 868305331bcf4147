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

// The plan's items as the planner writes them. Past the capacity they are counted, not written:
// the caller reports the shortfall once the plan is done.
struct ChunkList {
  DecodeWorkItem* data;
  size_t capacity;
  size_t size = 0;
  void push(const DecodeWorkItem& item) {
    if (size < capacity) [[likely]] data[size] = item;
    ++size;
  }
  bool written(size_t end) const { return end <= capacity; }
};

// The open CTA's end on the last CTA: never reached, the last CTA takes everything left.
constexpr int64_t kNoEnd = INT64_MAX / 4;

// The CTAs' shares: where each CTA's list ends, and what the open one holds.
//
// CTA c aims to end where a (c + 1) / num_ctas share of the budget ends, so a CTA that closed
// light or heavy moves the ends of the CTAs after it by no more than it missed. (Shares
// recomputed from what is left drifted up when many CTAs closed light, and left the busiest CTA
// 20% over the mean on short histories.) What light CTAs left is made up a little at a time:
// kCatchUp a CTA, or an even part of it over the CTAs left where that is more. Given to the next
// CTA at once, one unit's end that closed a CTA light made its neighbour 19% heavier than the
// mean.
struct CtaShares {
  CtaShares(int64_t budget, int num_ctas, int32_t* cta_begin)
      : budget(budget), num_ctas(num_ctas), mean_share((budget + num_ctas - 1) / num_ctas),
        step_q(budget / num_ctas), step_r(budget % num_ctas), cta_begin(cta_begin), prefix_q(step_q),
        prefix_r(step_r) {
    cta_begin[0] = 0;
    target = end_of_open_cta();
  }
  bool last() const { return cta == num_ctas - 1; }
  void close(size_t num_chunks) {
    max_load = std::max(max_load, load);
    assigned += load;
    load = 0;
    cta_begin[++cta] = static_cast<int32_t>(num_chunks);
    prefix_q += step_q;
    prefix_r += step_r;
    if (prefix_r >= num_ctas) {
      prefix_r -= num_ctas;
      ++prefix_q;
    }
    target = end_of_open_cta();
  }
  // Once every unit is planned: the open CTA ends, and the CTAs after it are empty.
  void finish(size_t num_chunks) {
    max_load = std::max(max_load, load);
    while (cta < num_ctas) cta_begin[++cta] = static_cast<int32_t>(num_chunks);
  }

  const int64_t budget;
  const int num_ctas;
  const int64_t mean_share;
  // ceil((cta + 1) * budget / num_ctas), stepped without a division a CTA (a 64-bit division
  // costs tens of cycles, and a plan closes hundreds of CTAs).
  const int64_t step_q, step_r;
  int32_t* const cta_begin;  // [num_ctas + 1]: CTA c's chunks are [cta_begin[c], cta_begin[c + 1])
  int64_t prefix_q, prefix_r;  // (cta + 1) * budget = prefix_q * num_ctas + prefix_r
  int cta = 0;
  int64_t assigned = 0;  // cost of the CTAs already closed
  int64_t load = 0;      // cost given to the open CTA
  int64_t max_load = 0;
  int64_t target = 0;    // the open CTA's load at which it closes

 private:
  int64_t end_of_open_cta() const {
    if (last()) return kNoEnd;
    const int64_t to_prefix_end = prefix_q + (prefix_r > 0) - assigned;
    const int64_t floor_share = mean_share + kCatchUp;
    const int64_t left = budget - assigned, ctas_left = num_ctas - cta;
    // The even part of what is left, ceil(left / ctas_left), only where it is above floor_share.
    const int64_t even_part = left > floor_share * ctas_left ? (left + ctas_left - 1) / ctas_left : 0;
    return std::min(to_prefix_end, std::max(floor_share, even_part));
  }
};

// The units that do not fit the open CTA whole: their cutting, and the joins of the
// ones split. The loop over the units that fit (most of them) keeps its own copies of the open
// CTA's load and end and of the chunk list, which then stay in registers; with one state for
// both, they went through memory on every unit.
struct UnitCutter {
  CtaShares ctas;
  ChunkList chunks;
  std::span<DecodeMergeItem> merges;
  DecodePlanStats& st;
  int group, num_ctas;
  bool all_wait_joins;

  // Cuts `whole` (the unit as one item) into chunks on the open CTA and the next ones, closing
  // the CTAs it fills. Each cut adds a chunk (and its fixed cost): the budget allows for the most
  // cuts there can be, which keeps the extra from piling up on the last CTA.
  void cut(const DecodeWorkItem& whole) {
    const size_t first = chunks.size;
    const int kv_len = whole.kv_end;
    for (int begin = whole.kv_begin; begin < kv_len;) {
      const int rest = kv_len - begin;
      const bool last_cta = ctas.last();
      const int64_t room = ctas.target - ctas.load;
      // The smallest next piece (a whole short unit, or a minimum chunk) goes here if that
      // overshoots the share by less than closing now would fall short of it.
      if (!last_cta && ctas.load > 0 && 2 * room < std::min(rest, kMinChunk) + kItemCost) {
        ctas.close(chunks.size);
        continue;
      }
      int take = rest;
      if (!last_cta && rest + kItemCost > room) {
        // Cut what fits, in whole tiles; never a chunk or a tail shorter than kMinChunk.
        const int fit = static_cast<int>((room - kItemCost) / kChunkGrain * kChunkGrain);
        if (fit < kMinChunk && ctas.load > 0) {  // no room for a minimum chunk: the next CTA takes it
          ctas.close(chunks.size);
          continue;
        }
        take = std::max(fit, kMinChunk);
        if (rest - take < kMinChunk) {
          // The tail would be shorter than a minimum chunk. Taking it too overshoots the share
          // for good; leaving a minimum chunk for the next CTA only closes this one light,
          // which the next CTA's fixed end makes up. So take it only when it barely shows.
          const int64_t overshoot = rest + kItemCost - room;
          take = overshoot > kCatchUp && rest - kMinChunk >= kMinChunk ? rest - kMinChunk : rest;
        }
      }
      // Written as if unsplit; a split unit's chunks are amended by join(). Only the last chunk
      // reaches kv_len: it holds this step's new key.
      const int end = begin + take;
      chunks.push({whole.token_idx, whole.request_idx, whole.page_begin, whole.kv_head_idx, whole.row_begin, begin, end,
                   -1, -1, end == kv_len ? 1 : 0, {0, 0}});
      ctas.load += take + kItemCost;
      begin += take;
      if (!last_cta && ctas.load >= ctas.target) ctas.close(chunks.size);
    }
    const int count = static_cast<int>(chunks.size - first);
    if (count > 1) join(first, count, whole);
  }

  // Whether chunks first + 1 .. first + count - 1 each begin a CTA (the CTAs closed so far and
  // the open one), so that every chunk before them ends one.
  bool ends_ctas(size_t first, int count) const {
    const int32_t* begin = ctas.cta_begin;
    const int32_t* end = begin + ctas.cta + 1;
    for (int k = 1; k < count; ++k) {
      if (!std::binary_search(begin, end, static_cast<int32_t>(first) + k)) return false;
    }
    return true;
  }

  // Gives a split unit's `count` chunks from `first` their partial slots and merge items: the
  // chunks' partials, then (two levels) the group partials; the first-level merges, then the one
  // that writes the output.
  void join(size_t first, int count, const DecodeWorkItem& whole) {
    // A wide split whose chunks but the last each end their CTA may be joined by all its CTAs at
    // once, in one level (DecodeMergeItem::all_wait): a CTA that waits for the others then holds
    // up nothing of its own. The last chunk's CTA, open or not, only counts.
    const bool all_wait = all_wait_joins && count > kJoinFanIn && ends_ctas(first, count);
    const int groups = all_wait ? 0 : join_groups(count);
    const int32_t base = st.num_partials, merge_base = st.num_merges;
    st.num_partials += count + groups;
    ATTNKIT_CHECK(static_cast<size_t>(st.num_merges + groups + 1) <= merges.size(), "planned plan: more than ",
                  merges.size(), " merges (the bound for ", num_ctas, " CTAs)");
    const DecodeMergeItem head{whole.token_idx, whole.kv_head_idx * group + whole.row_begin,
                               std::min(kDecodeRows, group - whole.row_begin), 0, 0, -1, -1, 0};
    const int32_t group_base = base + count;      // the group partials
    const int32_t last = st.num_merges + groups;  // the output merge
    for (int g = 0; g < groups; ++g) {
      DecodeMergeItem m = head;
      const int lo = join_group_begin(g, count, groups);
      m.partial_begin = base + lo;
      m.num_partials = join_group_begin(g + 1, count, groups) - lo;
      m.next_merge = last;
      m.out_partial = group_base + g;
      merges[static_cast<size_t>(st.num_merges++)] = m;
    }
    DecodeMergeItem m = head;
    m.partial_begin = groups > 0 ? group_base : base;
    m.num_partials = groups > 0 ? groups : count;
    m.all_wait = all_wait ? 1 : 0;
    st.num_all_wait += m.all_wait;
    merges[static_cast<size_t>(st.num_merges++)] = m;
    if (!chunks.written(first + static_cast<size_t>(count))) return;
    // Chunk k's partial, and the merge that joins it: its group's, or the only one.
    DecodeWorkItem* unit = chunks.data + first;
    for (int g = 0, k = 0; g < std::max(groups, 1); ++g) {
      const int group_end = groups > 0 ? join_group_begin(g + 1, count, groups) : count;
      for (; k < group_end; ++k) {
        unit[k].partial_idx = base + k;
        unit[k].merge_idx = merge_base + g;
      }
    }
  }
};

}  // namespace

// Worked example (llama3-8b heads, 8 KV heads, 264 CTAs): 32 requests of 128 and 32 of 8192 are
// 256 units of 128 and 256 of 8192, costing 256 * (128 + 192) + 256 * (8192 + 192) = 2,228,224 plus
// an item's cost for each of the 263 cuts there can be, so each CTA's share is about 8,630: a CTA
// takes short units whole or about one long one, and a unit is cut only where a share ends. One
// request of 32768 (8 units) gives shares of about 1,190: 33 chunks of 992-1,008 positions a unit
// (the last shorter), joined by all their CTAs (in a cooperative launch) or else in two levels.
DecodePlanStats plan_decode(const ForwardBatch& batch, const PlanShape& shape, int window_left, DecodePlanView out) {
  DecodePlanStats st;
  const int num_ctas = shape.num_ctas;
  const int num_slices = shape.num_slices();
  ATTNKIT_CHECK(num_ctas >= 1, "planned plan: num_ctas must be >= 1, got ", num_ctas);
  ATTNKIT_CHECK(out.cta_item_indptr.size() >= static_cast<size_t>(num_ctas) + 1,
                "planned plan: cta_item_indptr holds ", out.cta_item_indptr.size(), " entries, needs ", num_ctas + 1);
  const int units = shape.num_kv_heads * num_slices;  // per request
  const int n = batch.batch_size();
  // The visible KV positions [lo, kv_len) of request i, or lo == kv_len when it is not planned
  // here (an extend request, or no history).
  auto visible = [&](int i, int& lo) {
    const int kv_len = batch.kv_len(i);
    lo = batch.qo_len(i) == 1 ? decode_kv_begin(kv_len, window_left) : kv_len;
    return kv_len;
  };
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    if (batch.qo_len(i) != 1) continue;
    int lo;
    const int kv_len = visible(i, lo);
    total += int64_t{kv_len - lo + kItemCost};
    ++st.num_decode_requests;
  }
  total *= units;

  // One pass: units are cut into chunks on CTAs; CTA c's first chunk is cta_item_indptr[c].
  UnitCutter cutter{CtaShares(total + int64_t{num_ctas - 1} * kItemCost, num_ctas, out.cta_item_indptr.data()),
                    ChunkList{out.items.data(), out.items.size(), 0}, out.merges, st, shape.group_size(), num_ctas,
                    shape.all_wait_joins};
  // The open CTA's load and end, and the chunk list, as the loop over whole units keeps them;
  // the cutter's copies are brought up to date around each cut.
  int64_t load = 0, target = cutter.ctas.target;
  ChunkList chunks = cutter.chunks;
  for (int i = 0; i < n; ++i) {
    int lo;
    const int kv_len = visible(i, lo);
    if (lo >= kv_len) continue;  // not a decode request, or nothing to read: no items
    const int64_t whole_cost = int64_t{kv_len - lo} + kItemCost;
    // The unit of KV head 0, slice 0 as one item; the others differ in those two fields only.
    const DecodeWorkItem first{batch.qo_indptr[i], i, batch.kv_page_indptr[i], 0, 0, lo, kv_len, -1, -1, 1, {0, 0}};
    auto unit = [&](int j) {  // unit j of the request (units go slice by slice, KV head by KV head)
      DecodeWorkItem whole = first;
      whole.kv_head_idx = j / num_slices;
      whole.row_begin = j % num_slices * kDecodeRows;
      return whole;
    };
    for (int u = 0; u < units;) {
      // The units that leave room in the open CTA go there whole: unit u + j does while
      // (j + 1) whole costs stay below the room. The first that fills it or more goes to the
      // cutter (which also closes the CTA it fills exactly).
      const int64_t room = target - load;
      int fit = 0;
      for (int64_t cost = whole_cost; fit < units - u && cost < room; cost += whole_cost) ++fit;
      for (int j = u; j < u + fit; ++j) chunks.push(unit(j));
      load += fit * whole_cost;
      u += fit;
      if (u == units) break;
      cutter.ctas.load = load;
      cutter.chunks = chunks;
      cutter.cut(unit(u));
      load = cutter.ctas.load;
      target = cutter.ctas.target;
      chunks = cutter.chunks;
      ++u;
    }
  }
  cutter.ctas.load = load;
  cutter.ctas.finish(chunks.size);
  const CtaShares& ctas = cutter.ctas;

  const size_t max_items = out.items.size();
  ATTNKIT_CHECK(chunks.size <= max_items, "planned plan: more than ", max_items, " decode items (the bound for this batch)");
  st.num_items = static_cast<int>(chunks.size);
  st.max_cta_cost = ctas.max_load;
  st.total_cost = ctas.assigned + ctas.load;
  if (out.num_merges) *out.num_merges = st.num_merges;
  return st;
}

int max_steps_between_plans(const PlanShape& shape, const DecodePlanView& plan, const DecodePlanStats& stats) {
  int most_items = 0;
  for (int c = 0; c < shape.num_ctas; ++c) {
    most_items = std::max(most_items, plan.cta_item_indptr[static_cast<size_t>(c) + 1] - plan.cta_item_indptr[static_cast<size_t>(c)]);
  }
  if (most_items == 0) return 32;
  const int64_t mean = stats.total_cost / shape.num_ctas;
  return static_cast<int>(std::clamp<int64_t>(mean / (100 * int64_t{most_items}), 0, 32));
}

}  // namespace attnkit::planned
