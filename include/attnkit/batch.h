// ForwardBatch: what one forward step asks of the attention layer, in the CSR form every backend
// reads; and the builder that fills it from "request i has prefix p_i and n_i new tokens".
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "attnkit/kv_cache.h"

namespace attnkit {

enum class ForwardMode { extend, decode, mixed };
std::string_view forward_mode_name(ForwardMode mode);
// The mode of a batch whose new tokens a request are given by `qo_indptr` [batch_size + 1]: decode
// when every request has exactly one, extend when none has, mixed otherwise.
ForwardMode forward_mode_of(std::span<const int32_t> qo_indptr);

struct ForwardBatch {
  ForwardMode mode = ForwardMode::extend;
  int page_size = 0;
  std::vector<int32_t> qo_indptr;         // [batch_size + 1] new tokens of request i: [qo_indptr[i], qo_indptr[i+1])
  std::vector<int32_t> kv_page_indptr;    // [batch_size + 1] pages of request i, this step's tokens included
  std::vector<int32_t> kv_page_indices;   // [kv_page_indptr.back()]
  std::vector<int32_t> kv_last_page_len;  // [batch_size] 1..page_size
  std::vector<int32_t> prefix_lens;       // [batch_size] tokens cached before this step
  std::vector<int64_t> out_cache_loc;     // [num_tokens] slot of each new token
  // Optional custom masks (e.g. a speculative-decoding tree): request i's [qo_len, kv_len] row-major
  // 0/1 mask starts at custom_mask[custom_mask_indptr[i]]. Empty: no custom mask. A request whose
  // mask is empty (indptr[i] == indptr[i+1]) uses the spec's causal/window rule.
  std::vector<uint8_t> custom_mask;
  std::vector<int64_t> custom_mask_indptr;  // [batch_size + 1] or empty
  std::vector<RequestId> request_ids;       // [batch_size] when built from a KvCache

  int batch_size() const { return qo_indptr.empty() ? 0 : static_cast<int>(qo_indptr.size()) - 1; }
  int num_tokens() const { return qo_indptr.empty() ? 0 : qo_indptr.back(); }
  int qo_len(int i) const { return qo_indptr[i + 1] - qo_indptr[i]; }
  int num_pages(int i) const { return kv_page_indptr[i + 1] - kv_page_indptr[i]; }
  int kv_len(int i) const {  // inline: planners call it per request
    const int pages = num_pages(i);
    return pages == 0 ? 0 : (pages - 1) * page_size + kv_last_page_len[i];
  }
  int64_t total_kv_len() const;
  int max_qo_len() const;
  int max_kv_len() const;
  bool has_custom_mask(int i) const;
  // Slot of the token at `position` (0-based, prefix included) of request i.
  int64_t slot(int i, int64_t position) const;
  // Throws attnkit::Error naming the first field that disagrees with the others or with `cache`.
  void validate(const KvCacheConfig& cache) const;
  // The same, except that kv_page_indices are not checked against the cache's page count: for a
  // caller that reads them anyway and checks them in the same pass (copy_page_indices does, and the
  // `planned` backend's page-table write).
  void validate_except_page_range(const KvCacheConfig& cache) const;
  // The check validate_except_page_range leaves out: every kv_page_indices entry in [0, num_pages).
  // Throws validate()'s error for the first one out of range.
  void check_page_range(int num_pages) const;
  // Copies kv_page_indices to dst, checking that each is in [0, num_pages): one read of the page
  // table where validate() and a copy read it twice. Throws validate()'s error for the first one
  // out of range.
  void copy_page_indices(int32_t* dst, int num_pages) const;
};

struct RequestStep {
  RequestId id = -1;          // -1: a new request is added to the cache
  int64_t prefix_len = 0;     // new requests only: tokens already cached (the caller writes them)
  int64_t num_new_tokens = 0;
  std::vector<uint8_t> custom_mask;  // optional [num_new_tokens, prefix + num_new_tokens]
};

// Adds the new requests, grows every request by its new tokens (allocating pages for the whole
// batch all-or-nothing: on OutOfPagesError nothing changed), and fills every field. The mode is
// decode when every request has exactly one new token, extend when none has, mixed otherwise.
ForwardBatch build_batch(KvCache& cache, const std::vector<RequestStep>& steps);

}  // namespace attnkit
