// ForwardBatch accessors and checks, and build_batch, which fills every CSR field from a KvCache.
#include "attnkit/batch.h"

#include <algorithm>
#include <cstdint>

namespace attnkit {

std::string_view forward_mode_name(ForwardMode mode) {
  switch (mode) {
    case ForwardMode::extend: return "extend";
    case ForwardMode::decode: return "decode";
    case ForwardMode::mixed: return "mixed";
  }
  return "?";
}

ForwardMode forward_mode_of(std::span<const int32_t> qo_indptr) {
  const size_t n = qo_indptr.empty() ? 0 : qo_indptr.size() - 1;
  size_t num_single = 0;
  for (size_t i = 0; i < n; ++i) num_single += qo_indptr[i + 1] - qo_indptr[i] == 1;
  if (n > 0 && num_single == n) return ForwardMode::decode;
  return num_single == 0 ? ForwardMode::extend : ForwardMode::mixed;
}

int64_t ForwardBatch::total_kv_len() const {
  int64_t total = 0;
  for (int i = 0; i < batch_size(); ++i) total += kv_len(i);
  return total;
}

int ForwardBatch::max_qo_len() const {
  int m = 0;
  for (int i = 0; i < batch_size(); ++i) m = std::max(m, qo_len(i));
  return m;
}

int ForwardBatch::max_kv_len() const {
  int m = 0;
  for (int i = 0; i < batch_size(); ++i) m = std::max(m, kv_len(i));
  return m;
}

bool ForwardBatch::has_custom_mask(int i) const {
  return !custom_mask_indptr.empty() && custom_mask_indptr[i + 1] > custom_mask_indptr[i];
}

int64_t ForwardBatch::slot(int i, int64_t position) const {
  return int64_t{kv_page_indices[kv_page_indptr[i] + position / page_size]} * page_size + position % page_size;
}

namespace {
// The vectorised checks below: on x86 also compiled for AVX-512 and AVX2, picked at load time;
// elsewhere (Arm) once, for the baseline.
#if defined(__x86_64__)
#define ATTNKIT_X86_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ATTNKIT_X86_CLONES
#endif

template <typename T>
void check_indptr(const char* field, const std::vector<T>& indptr, size_t expected_size) {
  ATTNKIT_CHECK(indptr.size() == expected_size, "batch: ", field, " must have ", expected_size,
                " entries (batch_size + 1), got ", indptr.size());
  ATTNKIT_CHECK(indptr.empty() || indptr[0] == 0, "batch: ", field, "[0] must be 0, got ", indptr[0]);
  // Branch-free first (it vectorises); the loop that names the first decrease only where one is.
  int decreases = 0;
  for (size_t i = 1; i < indptr.size(); ++i) decreases |= indptr[i] < indptr[i - 1];
  if (decreases == 0) return;
  for (size_t i = 1; i < indptr.size(); ++i) {
    ATTNKIT_CHECK(indptr[i] >= indptr[i - 1], "batch: ", field, " must not decrease, but ", field, "[", i, "] = ",
                  indptr[i], " < ", field, "[", i - 1, "] = ", indptr[i - 1]);
  }
}
// Page-table entries in range: one pass without branches (it vectorises; a check per entry cost
// 58 us at 140k pages), then, only if one is out, the search for the first to name.
// all_below: whether every entry, read as unsigned, is below `limit` (negative ones are not).
// On x86 compiled for AVX-512 and AVX2 as well, picked at load time: 140k entries in a few
// microseconds.
ATTNKIT_X86_CLONES bool all_below(const std::vector<int32_t>& v, uint32_t limit) {
  uint32_t out = 0;
  const int32_t* data = v.data();
  const size_t n = v.size();
  for (size_t i = 0; i < n; ++i) out |= static_cast<uint32_t>(data[i]) >= limit ? 1u : 0u;
  return out == 0;
}
// all_below while copying v to dst. The vector loop starts where dst is 64-byte aligned: a vector
// store across two cache lines costs about two, and on the H200 machine's Xeon host the unaligned
// loop copied the page table at half memcpy's rate.
ATTNKIT_X86_CLONES bool copy_all_below(const std::vector<int32_t>& v, uint32_t limit, int32_t* dst) {
  uint32_t out = 0;
  const int32_t* data = v.data();
  const size_t n = v.size();
  size_t i = 0;
  for (; i < n && reinterpret_cast<uintptr_t>(dst + i) % 64 != 0; ++i) {
    dst[i] = data[i];
    out |= static_cast<uint32_t>(data[i]) >= limit ? 1u : 0u;
  }
  for (; i < n; ++i) {
    const int32_t x = data[i];
    dst[i] = x;
    out |= static_cast<uint32_t>(x) >= limit ? 1u : 0u;
  }
  return out == 0;
}
void throw_first_out_of_range(const std::vector<int32_t>& indices, int num_pages) {
  for (size_t p = 0; p < indices.size(); ++p) {
    ATTNKIT_CHECK(indices[p] >= 0 && indices[p] < num_pages, "batch: kv_page_indices[", p, "] must be in 0..",
                  num_pages - 1, ", got ", indices[p]);
  }
}

// The custom masks' indptr and sizes against the batch's lengths.
void check_custom_mask(const ForwardBatch& b) {
  if (!b.custom_mask_indptr.empty()) {
    check_indptr("custom_mask_indptr", b.custom_mask_indptr, static_cast<size_t>(b.batch_size()) + 1);
    ATTNKIT_CHECK(static_cast<size_t>(b.custom_mask_indptr.back()) == b.custom_mask.size(),
                  "batch: custom_mask must have custom_mask_indptr.back() (", b.custom_mask_indptr.back(),
                  ") entries, got ", b.custom_mask.size());
    for (int i = 0; i < b.batch_size(); ++i) {
      const int64_t size = b.custom_mask_indptr[i + 1] - b.custom_mask_indptr[i];
      ATTNKIT_CHECK(size == 0 || size == int64_t{b.qo_len(i)} * b.kv_len(i), "batch: request ", i,
                    "'s custom mask must have qo_len * kv_len (", int64_t{b.qo_len(i)} * b.kv_len(i), ") entries, got ", size);
    }
  } else {
    ATTNKIT_CHECK(b.custom_mask.empty(), "batch: custom_mask is set but custom_mask_indptr is empty");
  }
}

// Whether every request's lengths agree and its new token's slot is its page table's, for a batch
// of one new token a request with at least one page each (a decode batch: the slot is the last
// page's last one, no division), checked without a branch a request so that it vectorises; false
// sends the caller to the checks that name what is wrong. Callers have checked the arrays' sizes.
ATTNKIT_X86_CLONES bool decode_requests_agree(
    int n, int page_size, const int32_t* qo, const int32_t* kvp, const int32_t* last_len, const int32_t* prefix,
    const int32_t* pages, const int64_t* loc) {
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    const int num_pages = kvp[i + 1] - kvp[i], last = last_len[i];
    bad |= (num_pages < 1) | (last < 1) | (last > page_size) | (qo[i + 1] - qo[i] != 1) | (prefix[i] < 0);
    bad |= (num_pages - 1) * page_size + last != prefix[i] + 1;
    const int at = kvp[i + 1] - 1;  // the last page's entry (a request without pages is bad already)
    const int32_t entry = pages[at < 0 ? 0 : at];
    bad |= loc[i] != int64_t{entry} * page_size + (last - 1);
  }
  return bad == 0;
}

}  // namespace

void ForwardBatch::validate(const KvCacheConfig& cache) const {
  validate_except_page_range(cache);
  check_page_range(cache.num_pages);
}

void ForwardBatch::check_page_range(int num_pages) const {
  if (!all_below(kv_page_indices, static_cast<uint32_t>(num_pages))) throw_first_out_of_range(kv_page_indices, num_pages);
}

void ForwardBatch::copy_page_indices(int32_t* dst, int num_pages) const {
  if (!copy_all_below(kv_page_indices, static_cast<uint32_t>(num_pages), dst)) {
    throw_first_out_of_range(kv_page_indices, num_pages);
  }
}

void ForwardBatch::validate_except_page_range(const KvCacheConfig& cache) const {
  ATTNKIT_CHECK(page_size == cache.page_size, "batch: page_size must match the cache's (", cache.page_size,
                "), got ", page_size);
  ATTNKIT_CHECK(!qo_indptr.empty(), "batch: qo_indptr must have batch_size + 1 entries, got 0");
  const size_t n = static_cast<size_t>(batch_size());
  check_indptr("qo_indptr", qo_indptr, n + 1);
  check_indptr("kv_page_indptr", kv_page_indptr, n + 1);
  ATTNKIT_CHECK(static_cast<size_t>(kv_page_indptr.back()) == kv_page_indices.size(),
                "batch: kv_page_indices must have kv_page_indptr.back() (", kv_page_indptr.back(), ") entries, got ",
                kv_page_indices.size());
  ATTNKIT_CHECK(kv_last_page_len.size() == n, "batch: kv_last_page_len must have batch_size (", n,
                ") entries, got ", kv_last_page_len.size());
  ATTNKIT_CHECK(prefix_lens.size() == n, "batch: prefix_lens must have batch_size (", n, ") entries, got ",
                prefix_lens.size());
  ATTNKIT_CHECK(out_cache_loc.size() == static_cast<size_t>(num_tokens()), "batch: out_cache_loc must have num_tokens (",
                num_tokens(), ") entries, got ", out_cache_loc.size());
  // One new token a request (qo_indptr[i] == i) with a page each: the fast check, and the full one
  // only where it fails, to name the problem.
  const bool one_token_each = num_tokens() == batch_size();
  if (one_token_each && !kv_page_indices.empty() &&
      decode_requests_agree(batch_size(), page_size, qo_indptr.data(), kv_page_indptr.data(), kv_last_page_len.data(),
                            prefix_lens.data(), kv_page_indices.data(), out_cache_loc.data())) {
    return check_custom_mask(*this);
  }
  for (int i = 0; i < batch_size(); ++i) {
    const int last = kv_last_page_len[i];
    if (num_pages(i) == 0) {
      ATTNKIT_CHECK(last == 0, "batch: request ", i, " has no pages, so kv_last_page_len must be 0, got ", last);
    } else {
      ATTNKIT_CHECK(last >= 1 && last <= page_size, "batch: kv_last_page_len[", i, "] must be in 1..", page_size,
                    ", got ", last);
    }
    ATTNKIT_CHECK(prefix_lens[i] >= 0, "batch: prefix_lens[", i, "] must be >= 0, got ", prefix_lens[i]);
    ATTNKIT_CHECK(kv_len(i) == prefix_lens[i] + qo_len(i), "batch: request ", i, " has kv_len ", kv_len(i),
                  " from its page table, but prefix_lens + qo_len = ", prefix_lens[i], " + ", qo_len(i));
    if (mode == ForwardMode::decode) {
      ATTNKIT_CHECK(qo_len(i) == 1, "batch: a decode batch has one new token per request, but request ", i,
                    " has ", qo_len(i));
    }
    for (int j = 0; j < qo_len(i); ++j) {
      const int64_t t = qo_indptr[i] + j;
      const int64_t expected = slot(i, prefix_lens[i] + j);
      // A slot from a page-table entry out of range is not the slot's fault: that entry is named.
      if (out_cache_loc[t] != expected && !all_below(kv_page_indices, static_cast<uint32_t>(cache.num_pages))) {
        throw_first_out_of_range(kv_page_indices, cache.num_pages);
      }
      ATTNKIT_CHECK(out_cache_loc[t] == expected, "batch: out_cache_loc[", t, "] must be ", expected,
                    " (the page table's slot for request ", i, " position ", prefix_lens[i] + j, "), got ",
                    out_cache_loc[t]);
    }
  }
  check_custom_mask(*this);
}

ForwardBatch build_batch(KvCache& cache, const std::vector<RequestStep>& steps) {
  const int page_size = cache.config().page_size;
  // Count every page first, so running out changes nothing.
  int64_t pages_needed = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const RequestStep& s = steps[i];
    ATTNKIT_CHECK(s.num_new_tokens >= 0, "build_batch: steps[", i, "].num_new_tokens must be >= 0, got ",
                  s.num_new_tokens);
    ATTNKIT_CHECK(s.id < 0 || s.prefix_len == 0, "build_batch: steps[", i,
                  "] names an existing request, whose prefix is its cached length: prefix_len must be 0, got ", s.prefix_len);
    ATTNKIT_CHECK(s.prefix_len >= 0, "build_batch: steps[", i, "].prefix_len must be >= 0, got ", s.prefix_len);
    const int64_t prefix = s.id >= 0 ? cache.length(s.id) : s.prefix_len;
    const int64_t have = s.id >= 0 ? static_cast<int64_t>(cache.pages(s.id).size()) : 0;
    const int64_t need = (prefix + s.num_new_tokens + page_size - 1) / page_size;
    pages_needed += std::max<int64_t>(0, need - have);
    if (!s.custom_mask.empty()) {
      const int64_t expected = s.num_new_tokens * (prefix + s.num_new_tokens);
      ATTNKIT_CHECK(static_cast<int64_t>(s.custom_mask.size()) == expected, "build_batch: steps[", i,
                    "].custom_mask must have num_new_tokens * (prefix + num_new_tokens) = ", expected,
                    " entries, got ", s.custom_mask.size());
    }
  }
  if (pages_needed > cache.allocator().num_free()) {
    throw OutOfPagesError(detail::concat("KV cache out of pages: the batch needs ", pages_needed, ", ",
                                         cache.allocator().num_free(), " of ", cache.allocator().num_pages(), " free"));
  }

  ForwardBatch b;
  b.page_size = page_size;
  b.qo_indptr.push_back(0);
  b.kv_page_indptr.push_back(0);
  bool any_mask = false;
  for (const RequestStep& s : steps) {
    const RequestId id = s.id >= 0 ? s.id : cache.add_request();
    const int64_t prefix = s.id >= 0 ? cache.length(id) : 0;
    const int64_t cached = s.id >= 0 ? prefix : s.prefix_len;
    cache.reserve(id, cached + s.num_new_tokens);
    const auto& pages = cache.pages(id);
    const int64_t kv_len = cached + s.num_new_tokens;
    b.request_ids.push_back(id);
    b.prefix_lens.push_back(static_cast<int32_t>(cached));
    b.qo_indptr.push_back(b.qo_indptr.back() + static_cast<int32_t>(s.num_new_tokens));
    b.kv_page_indices.insert(b.kv_page_indices.end(), pages.begin(), pages.end());
    b.kv_page_indptr.push_back(static_cast<int32_t>(b.kv_page_indices.size()));
    b.kv_last_page_len.push_back(kv_len == 0 ? 0 : static_cast<int32_t>((kv_len - 1) % page_size + 1));
    for (int64_t j = 0; j < s.num_new_tokens; ++j) b.out_cache_loc.push_back(cache.slot(id, cached + j));
    any_mask = any_mask || !s.custom_mask.empty();
  }
  if (any_mask) {
    b.custom_mask_indptr.push_back(0);
    for (const RequestStep& s : steps) {
      b.custom_mask.insert(b.custom_mask.end(), s.custom_mask.begin(), s.custom_mask.end());
      b.custom_mask_indptr.push_back(static_cast<int64_t>(b.custom_mask.size()));
    }
  }
  b.mode = forward_mode_of(b.qo_indptr);
  return b;
}

}  // namespace attnkit
