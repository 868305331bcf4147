// The host scheduler: decode chunking and CTA assignment in one pass over the batch, the extend
// work list, and the upload buffer's layout. No CUDA here; graph_state.cc moves the bytes.
#include "backends/planned/plan.h"

#include <algorithm>
#include <cstring>
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
  const int group = shape.group_size();
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

  // Pass 1: cut units into chunks on lanes. Each cut adds a chunk (and its fixed cost); budgeting
  // for the most cuts there can be keeps the extra from piling up on the last lane.
  thread_local std::vector<DecodeWorkItem> lane_chunks;
  thread_local std::vector<int32_t> lane_begin_scratch;
  ChunkList chunks = width == 1 ? ChunkList{out.items.data(), out.items.size(), 0, nullptr}
                                : ChunkList{lane_chunks.data(), lane_chunks.size(), 0, &lane_chunks};
  // With one CTA a lane, lane l's first chunk is CTA l's first item.
  int32_t* lane_begin = out.cta_item_indptr.data();
  if (width > 1) {
    lane_begin_scratch.resize(static_cast<size_t>(num_lanes) + 1);
    lane_begin = lane_begin_scratch.data();
  }
  lane_begin[0] = 0;
  const int64_t budget = lane_total + int64_t{num_lanes - 1} * kItemCost;
  int lane = 0;
  int64_t assigned = 0;  // cost of the lanes already closed
  int64_t load = 0;      // cost given to the open lane
  int64_t max_load = 0;
  // Lane l aims to end where a (l + 1) / num_lanes share of the budget ends, so a lane that closed
  // light or heavy moves the ends of the lanes after it by no more than it missed. (Shares
  // recomputed from what is left drifted up when many lanes closed light, and left the busiest
  // lane 20% over the mean on short histories.) What light lanes left is made up a little at a
  // time: kCatchUp a lane, or an even part of it over the lanes left where that is more. Given to
  // the next lane at once, one unit's end that closed a lane light made its neighbour 19% heavier
  // than the mean.
  const int64_t mean_share = (budget + num_lanes - 1) / num_lanes;
  // ceil((lane + 1) * budget / num_lanes), stepped without a division a lane (a 64-bit division
  // costs tens of cycles, and a plan closes hundreds of lanes).
  const int64_t step_q = budget / num_lanes, step_r = budget % num_lanes;
  int64_t prefix_q = step_q, prefix_r = step_r;  // (lane + 1) * budget = prefix_q * num_lanes + prefix_r
  auto share = [&] {
    const int64_t to_prefix_end = prefix_q + (prefix_r > 0) - assigned;
    const int64_t floor_share = mean_share + kCatchUp;
    const int64_t left = budget - assigned, lanes_left = num_lanes - lane;
    // The even part of what is left, ceil(left / lanes_left), only where it is above floor_share.
    const int64_t even_part = left > floor_share * lanes_left ? (left + lanes_left - 1) / lanes_left : 0;
    return std::min(to_prefix_end, std::max(floor_share, even_part));
  };
  int64_t target = share();
  auto close_lane = [&] {
    max_load = std::max(max_load, load);
    assigned += load;
    load = 0;
    lane_begin[++lane] = static_cast<int32_t>(chunks.size);
    prefix_q += step_q;
    prefix_r += step_r;
    if (prefix_r >= num_lanes) {
      prefix_r -= num_lanes;
      ++prefix_q;
    }
    target = share();
  };
  const size_t max_merges = out.merges.size();
  for (int i = 0; i < n; ++i) {
    if (batch.qo_len(i) != 1) continue;
    const int kv_len = batch.kv_len(i);
    const int lo = decode_kv_begin(kv_len, window_left);
    const int32_t token_idx = batch.qo_indptr[i], page_begin = batch.kv_page_indptr[i];
    for (int hb = 0; hb < head_blocks; ++hb) {
      for (int slice = 0; slice < num_slices; ++slice) {
        const size_t first = chunks.size;
        for (int begin = lo; begin < kv_len;) {
          const int rest = kv_len - begin;
          const bool last_lane = lane == num_lanes - 1;
          const int64_t room = target - load;
          // The smallest next piece (a whole short unit, or a minimum chunk) goes here if that
          // overshoots the share by less than closing now would fall short of it.
          if (!last_lane && load > 0 && 2 * room < std::min(rest, kMinChunk) + kItemCost) {
            close_lane();
            continue;
          }
          int take = rest;
          if (!last_lane && rest + kItemCost > room) {
            // Cut what fits, in whole tiles; never a chunk or a tail shorter than kMinChunk.
            const int fit = static_cast<int>((room - kItemCost) / kChunkGrain * kChunkGrain);
            if (fit < kMinChunk && load > 0) {  // no room for a minimum chunk: the next lane takes it
              close_lane();
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
          // Written as if unsplit (no partial, no merge); a split unit's chunks are amended below.
          // Only the last chunk reaches kv_len: it holds this step's new key.
          const int end = begin + take;
          chunks.push({token_idx, i, page_begin, hb * width, slice * kDecodeRows, begin, end, -1, -1,
                       end == kv_len ? 1 : 0, {0, 0}});
          load += take + kItemCost;
          begin = end;
          if (!last_lane && load >= target) close_lane();
        }
        // A split unit's partial slots and merges: per head, the chunks' partials, then (two
        // levels) the group partials; per head, the first-level merges, then the one that writes
        // the output.
        const int count = static_cast<int>(chunks.size - first);
        if (count <= 1) continue;
        const int groups = join_groups(count);
        const int32_t base = st.num_partials, merge_base = st.num_merges;
        st.num_partials += (count + groups) * width;
        ATTNKIT_CHECK(static_cast<size_t>(st.num_merges + (groups + 1) * width) <= max_merges, "planned plan: more than ",
                      max_merges, " merges (the bound for ", num_ctas, " CTAs)");
        for (int j = 0; j < width; ++j) {
          const DecodeMergeItem head{token_idx, (hb * width + j) * group + slice * kDecodeRows,
                                     std::min(kDecodeRows, group - slice * kDecodeRows), 0, 0, -1, -1, 0};
          const int32_t group_base = base + width * count + j * groups;  // this head's group partials
          const int32_t last = st.num_merges + groups;                    // its output merge
          for (int g = 0; g < groups; ++g) {
            DecodeMergeItem m = head;
            const int lo = join_group_begin(g, count, groups);
            m.partial_begin = base + j * count + lo;
            m.num_partials = join_group_begin(g + 1, count, groups) - lo;
            m.next_merge = last;
            m.out_partial = group_base + g;
            out.merges[static_cast<size_t>(st.num_merges++)] = m;
          }
          DecodeMergeItem m = head;
          m.partial_begin = groups > 0 ? group_base : base + j * count;
          m.num_partials = groups > 0 ? groups : count;
          out.merges[static_cast<size_t>(st.num_merges++)] = m;
        }
        if (!chunks.written(chunks.size)) continue;
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
    }
  }
  max_load = std::max(max_load, load);
  while (lane < num_lanes) lane_begin[++lane] = static_cast<int32_t>(chunks.size);

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
  st.max_cta_cost = max_load;
  st.total_cost = (assigned + load) * width;
  if (out.num_merges) *out.num_merges = st.num_merges;
  return st;
}

namespace {
// Packed rows a prefill CTA covers; 0 where the extend kernel is not built (extend is refused).
int prefill_rows(int head_dim) {
#ifdef ATTNKIT_PLANNED_PREFILL
  return prefill_tile_rows(head_dim);
#else
  (void)head_dim;
  return 0;
#endif
}
}  // namespace

int count_prefill_items(const ForwardBatch& batch, const PlanShape& shape) {
  const int rows = prefill_rows(shape.head_dim);
  if (rows == 0) return 0;
  const int group = shape.group_size();
  int count = 0;
  for (int i = 0; i < batch.batch_size(); ++i) {
    const int qo_len = batch.qo_len(i);
    if (qo_len >= 2) count += (qo_len * group + rows - 1) / rows;
  }
  return count;
}

int plan_prefill(const ForwardBatch& batch, const PlanShape& shape, std::span<PrefillWorkItem> out) {
  const int rows = prefill_rows(shape.head_dim);
  if (rows == 0) return 0;
  const int group = shape.group_size();
  std::vector<int> order;
  for (int i = 0; i < batch.batch_size(); ++i) {
    if (batch.qo_len(i) >= 2) order.push_back(i);
  }
  // Longest history first: the last CTAs to start are the short ones, so the tail is short.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return batch.kv_len(a) > batch.kv_len(b); });
  size_t count = 0;
  for (int i : order) {
    const int tiles = (batch.qo_len(i) * group + rows - 1) / rows;
    for (int tile = 0; tile < tiles; ++tile) {
      ATTNKIT_CHECK(count < out.size(), "planned plan: more than ", out.size(), " extend items");
      out[count++] = {i, tile, 0, -1, -1};
    }
  }
  return static_cast<int>(count);
}

bool PlanCapacity::fits(const PlanCapacity& need) const {
  return need.batch_size <= batch_size && need.num_pages <= num_pages && need.num_tokens <= num_tokens &&
         need.mask_bytes <= mask_bytes && need.decode_items <= decode_items && need.prefill_items <= prefill_items;
}

PlanLayout make_layout(const PlanCapacity& c, const PlanShape& shape, int num_variants) {
  ATTNKIT_CHECK(num_variants >= 1 && num_variants <= PlanLayout::kMaxVariants, "planned plan: the model has ",
                num_variants, " distinct window_left values, at most ", PlanLayout::kMaxVariants, " are supported");
  PlanLayout l;
  size_t off = 0;
  auto section = [&](size_t bytes) {
    const size_t at = off;
    off = (off + bytes + 15) / 16 * 16;  // 16-byte aligned: items are read as int4
    return at;
  };
  const size_t b = static_cast<size_t>(c.batch_size);
  l.qo_indptr = section((b + 1) * 4);
  l.kv_page_indptr = section((b + 1) * 4);
  l.kv_last_page_len = section(b * 4);
  l.prefix_lens = section(b * 4);
  l.out_cache_loc = section(static_cast<size_t>(c.num_tokens) * 8);
  l.custom_mask_indptr = section(c.mask_bytes > 0 ? (b + 1) * 8 : 0);
  l.custom_mask = section(static_cast<size_t>(c.mask_bytes));
  l.prefill_items = section(static_cast<size_t>(c.prefill_items) * sizeof(PrefillWorkItem));
  for (int v = 0; v < num_variants; ++v) {
    l.cta_item_indptr[v] = section((static_cast<size_t>(shape.num_ctas) + 1) * 4);
    l.num_merges[v] = section(4);
    l.merges[v] = section(static_cast<size_t>(max_decode_merges(shape)) * sizeof(DecodeMergeItem));
    l.decode_items[v] = section(static_cast<size_t>(c.decode_items) * sizeof(DecodeWorkItem));
  }
  l.kv_page_indices = section(static_cast<size_t>(c.num_pages) * 4);
  l.total_bytes = off;
  return l;
}

PlanCapacity capacity_for(const ForwardBatch& batch, const PlanShape& shape) {
  PlanCapacity c;
  c.batch_size = batch.batch_size();
  c.num_pages = static_cast<int>(batch.kv_page_indices.size());
  c.num_tokens = batch.num_tokens();
  c.mask_bytes = static_cast<int64_t>(batch.custom_mask.size());
  c.decode_items = max_decode_items(c.batch_size, shape);
  c.prefill_items = count_prefill_items(batch, shape);
  return c;
}

void write_batch_arrays(const ForwardBatch& batch, const PlanLayout& l, std::byte* staging) {
  auto put = [&](size_t offset, const auto& v) {
    if (!v.empty()) std::memcpy(staging + offset, v.data(), v.size() * sizeof(v[0]));
  };
  put(l.qo_indptr, batch.qo_indptr);
  put(l.kv_page_indptr, batch.kv_page_indptr);
  put(l.kv_last_page_len, batch.kv_last_page_len);
  put(l.prefix_lens, batch.prefix_lens);
  put(l.out_cache_loc, batch.out_cache_loc);
  if (!batch.custom_mask.empty()) {
    put(l.custom_mask_indptr, batch.custom_mask_indptr);
    put(l.custom_mask, batch.custom_mask);
  }
  put(l.kv_page_indices, batch.kv_page_indices);
}

DecodePlanView decode_view(const PlanLayout& l, const PlanCapacity& c, const PlanShape& shape, int v,
                           std::byte* staging) {
  DecodePlanView view;
  view.cta_item_indptr = {reinterpret_cast<int32_t*>(staging + l.cta_item_indptr[v]),
                          static_cast<size_t>(shape.num_ctas) + 1};
  view.items = {reinterpret_cast<DecodeWorkItem*>(staging + l.decode_items[v]), static_cast<size_t>(c.decode_items)};
  view.merges = {reinterpret_cast<DecodeMergeItem*>(staging + l.merges[v]),
                 static_cast<size_t>(max_decode_merges(shape))};
  view.num_merges = reinterpret_cast<int32_t*>(staging + l.num_merges[v]);
  return view;
}

}  // namespace attnkit::planned
