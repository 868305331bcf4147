// The zig-zag split of a causal prefill and the index arrays one rank's step follows
// (prefill_plan.h), worked out on the host once a batch.
#include "parallel/prefill_plan.h"

#include <algorithm>
#include <limits>

#include "attnkit/error.h"

namespace attnkit {

int64_t zigzag_chunk_begin(int64_t len, int num_chunks, int chunk) {
  const int64_t base = len / num_chunks, longer = len % num_chunks;
  return chunk * base + std::min<int64_t>(chunk, longer);
}

namespace {
// Rank r's two chunks, in the order its rows hold them.
int my_chunk(int num_ranks, int rank, int k) { return k == 0 ? rank : 2 * num_ranks - 1 - rank; }
// The rank holding chunk c, and which of its two chunks c is.
int chunk_rank(int num_ranks, int c) { return c < num_ranks ? c : 2 * num_ranks - 1 - c; }
int chunk_slot(int num_ranks, int c) { return c < num_ranks ? 0 : 1; }
}  // namespace

std::vector<int32_t> zigzag_rows(const ForwardBatch& global, int num_ranks, int rank) {
  std::vector<int32_t> rows;
  for (int i = 0; i < global.batch_size(); ++i) {
    for (int k = 0; k < 2; ++k) {
      const int c = my_chunk(num_ranks, rank, k);
      const int64_t len = global.qo_len(i);
      for (int64_t t = zigzag_chunk_begin(len, 2 * num_ranks, c); t < zigzag_chunk_begin(len, 2 * num_ranks, c + 1);
           ++t) {
        rows.push_back(global.qo_indptr[i] + static_cast<int32_t>(t));
      }
    }
  }
  return rows;
}

namespace parallel {

PrefillIndices prefill_indices(const ForwardBatch& global, const ShareLayout& layout, int rank, int page_size) {
  const int n = layout.num_ranks, chunks = 2 * n, ps = page_size;
  const StoreRoute route = route_new_tokens(global, layout, rank);  // checks the batch against the layout
  for (int i = 0; i < global.batch_size(); ++i) {
    ATTNKIT_CHECK(global.prefix_lens[i] == 0, "context parallel prefill: prefix_lens[", i,
                  "] must be 0 (a prompt with nothing cached; a cached prefix is not supported yet), got ",
                  global.prefix_lens[i]);
  }
  const int bs = global.batch_size();
  auto begin = [&](int i, int c) { return zigzag_chunk_begin(global.qo_len(i), chunks, c); };
  auto size_of = [&](int i, int c) { return static_cast<int32_t>(begin(i, c + 1) - begin(i, c)); };
  PrefillIndices x;
  // The gather: request i's chunks, each padded to cmax[i] rows, from row0[i] of a rank's rows.
  std::vector<int64_t> cmax, row0;
  std::vector<int32_t> page0;  // [bs * chunks] each chunk's first scratch page
  for (int i = 0; i < bs; ++i) {
    cmax.push_back((global.qo_len(i) + chunks - 1) / chunks);
    row0.push_back(x.gather_rows);
    x.gather_rows += 2 * cmax.back();
    for (int c = 0; c < chunks; ++c) {
      page0.push_back(x.scratch_pages);
      x.scratch_pages += (size_of(i, c) + ps - 1) / ps;
    }
  }
  ATTNKIT_CHECK(x.gather_rows * n <= std::numeric_limits<int32_t>::max(), "context parallel prefill: the ",
                n, " ranks gather ", x.gather_rows * n, " rows, expected at most 2^31 - 1 (i32 row indices)");
  x.send_rows.assign(static_cast<size_t>(x.gather_rows), -1);
  int32_t my_row = 0;
  for (int i = 0; i < bs; ++i) {
    for (int s = 0; s < 2; ++s) {
      const int64_t first = row0[static_cast<size_t>(i)] + s * cmax[static_cast<size_t>(i)];
      const int32_t size = size_of(i, my_chunk(n, rank, s));
      for (int32_t t = 0; t < size; ++t) x.send_rows[static_cast<size_t>(first + t)] = my_row++;
    }
  }
  // Each token's gathered row and scratch slot; this rank's stored tokens first.
  const auto num_tokens = static_cast<size_t>(global.num_tokens());
  std::vector<int32_t> gathered(num_tokens);
  std::vector<int64_t> slot(num_tokens);
  for (int i = 0; i < bs; ++i) {
    for (int c = 0; c < chunks; ++c) {
      const int64_t first = int64_t{chunk_rank(n, c)} * x.gather_rows + row0[static_cast<size_t>(i)] +
                            chunk_slot(n, c) * cmax[static_cast<size_t>(i)];
      const int32_t page = page0[static_cast<size_t>(i * chunks + c)];
      for (int32_t t = 0; t < size_of(i, c); ++t) {
        const auto token = static_cast<size_t>(global.qo_indptr[i] + begin(i, c) + t);
        gathered[token] = static_cast<int32_t>(first + t);
        slot[token] = int64_t{page + t / ps} * ps + t % ps;
      }
    }
  }
  std::vector<bool> stored(num_tokens, false);
  for (const int32_t token : route.token_idx) {
    x.kv_rows.push_back(gathered[static_cast<size_t>(token)]);
    x.scratch_slots.push_back(slot[static_cast<size_t>(token)]);
    stored[static_cast<size_t>(token)] = true;
  }
  x.stored_slots = route.slots;
  for (size_t token = 0; token < num_tokens; ++token) {
    if (stored[token]) continue;
    x.kv_rows.push_back(gathered[token]);
    x.scratch_slots.push_back(slot[token]);
  }

  // The two batches over the scratch cache: every (query chunk, KV chunk) pair this rank sees.
  for (ForwardBatch* b : {&x.causal_batch, &x.full_batch}) {
    b->page_size = ps;
    b->qo_indptr = {0};
    b->kv_page_indptr = {0};
  }
  struct Group {  // one query chunk of one request: its rows, merged over its pairs
    int32_t num_rows = 0;
    std::vector<std::pair<bool, int32_t>> parts;  // (in the causal batch?, its first query row there)
  };
  std::vector<Group> groups;
  std::vector<int32_t> causal_q_rows, full_q_rows;
  int32_t out_row = 0;
  for (int i = 0; i < bs; ++i) {
    for (int k = 0; k < 2; ++k) {
      const int qc = my_chunk(n, rank, k);
      Group g{.num_rows = size_of(i, qc), .parts = {}};
      for (int kc = 0; kc <= qc && g.num_rows > 0; ++kc) {  // chunks after qc are masked out entirely: skipped
        const int32_t kv_len = size_of(i, kc);
        if (kv_len == 0) continue;
        const bool diagonal = kc == qc;
        ForwardBatch& b = diagonal ? x.causal_batch : x.full_batch;
        std::vector<int32_t>& q_rows = diagonal ? causal_q_rows : full_q_rows;
        g.parts.emplace_back(diagonal, b.qo_indptr.back());
        const int32_t page = page0[static_cast<size_t>(i * chunks + kc)];
        for (int32_t pg = 0; pg < (kv_len + ps - 1) / ps; ++pg) b.kv_page_indices.push_back(page + pg);
        b.kv_page_indptr.push_back(static_cast<int32_t>(b.kv_page_indices.size()));
        b.kv_last_page_len.push_back((kv_len - 1) % ps + 1);
        // The query rows are the last num_rows of the KV chunk (kv_len >= num_rows: earlier chunks
        // are never shorter); the non-causal backend lets each see the whole chunk.
        b.prefix_lens.push_back(kv_len - g.num_rows);
        b.qo_indptr.push_back(b.qo_indptr.back() + g.num_rows);
        for (int32_t t = kv_len - g.num_rows; t < kv_len; ++t) {
          b.out_cache_loc.push_back(int64_t{page + t / ps} * ps + t % ps);
          q_rows.push_back(out_row + t - (kv_len - g.num_rows));
        }
      }
      out_row += g.num_rows;
      groups.push_back(std::move(g));
    }
  }
  x.causal_batch.mode = forward_mode_of(x.causal_batch.qo_indptr);
  x.full_batch.mode = forward_mode_of(x.full_batch.qo_indptr);
  const int32_t align = PrefillIndices::kBatchAlignRows;
  x.full_first = (x.causal_batch.num_tokens() + align - 1) / align * align;
  x.q_rows = std::move(causal_q_rows);
  x.q_rows.resize(static_cast<size_t>(x.full_first), -1);
  x.q_rows.insert(x.q_rows.end(), full_q_rows.begin(), full_q_rows.end());
  // Row j of a group merges row j of each of its pairs.
  x.merge_indptr = {0};
  for (const Group& g : groups) {
    for (int32_t j = 0; j < g.num_rows; ++j) {
      for (const auto& [diagonal, first] : g.parts) x.merge_parts.push_back((diagonal ? 0 : x.full_first) + first + j);
      x.merge_indptr.push_back(static_cast<int32_t>(x.merge_parts.size()));
    }
  }
  return x;
}

PrefillLayout prefill_layout(const AttentionSpec& spec, const PrefillIndices& idx, int num_ranks, size_t kv_bytes,
                             size_t part_bytes) {
  const auto heads = static_cast<size_t>(spec.num_qo_heads), kv_heads = static_cast<size_t>(spec.num_kv_heads);
  const auto dk = static_cast<size_t>(spec.head_dim_qk), dv = static_cast<size_t>(spec.head_dim_vo);
  const auto gathered = static_cast<size_t>(idx.gather_rows), tokens = static_cast<size_t>(idx.num_tokens());
  const auto partial = static_cast<size_t>(idx.num_partial());
  const size_t kv_row = kv_heads * (dk + dv) * kv_bytes;
  PrefillLayout l;
  auto region = [&l](size_t nbytes) {
    const size_t at = l.bytes;
    l.bytes = (l.bytes + nbytes + 255) / 256 * 256;
    return at;
  };
  l.send = region(gathered * kv_row);
  l.recv = region(gathered * kv_row * static_cast<size_t>(num_ranks));
  l.k = region(tokens * kv_heads * dk * kv_bytes);
  l.v = region(tokens * kv_heads * dv * kv_bytes);
  l.q = region(partial * heads * dk * part_bytes);
  l.o = region(partial * heads * dv * part_bytes);
  l.lse = region(partial * heads * sizeof(float));
  return l;
}

}  // namespace parallel
}  // namespace attnkit
