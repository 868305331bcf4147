// The batch as both `planned` kernels read it on the device: the planner's one upload
// (planner.h), laid out by plan.h's PlanLayout, and the layer's sinks.
#pragma once

#include <cstdint>

namespace attnkit::planned {

struct BatchArrays {
  const int32_t* qo_indptr = nullptr;         // [batch_size + 1], never null
  // Request i's page-table entries: kv_page_indices[page_begin[i] + j] for its pages j, never null.
  const int32_t* kv_page_indices = nullptr;
  const int32_t* page_begin = nullptr;        // [batch_size], never null
  // The batch's [batch_size + 1] and [batch_size] (the decode kernel also reads the end of the
  // chunk that holds a request's new key from these, see load_item), never null.
  const int32_t* kv_page_indptr = nullptr;
  const int32_t* kv_last_page_len = nullptr;  // 1..page_size
  const int32_t* prefix_lens = nullptr;       // [batch_size] position of each request's first new token, never null
  // Optional custom masks: request i's [qo_len, kv_len] row-major 0/1 bytes start at
  // custom_mask[custom_mask_indptr[i]]; an empty range means the causal/window rule. Both null: none.
  const uint8_t* custom_mask = nullptr;         // [custom_mask_indptr[batch_size]] or null
  const int64_t* custom_mask_indptr = nullptr;  // [batch_size + 1] or null
  const float* sinks = nullptr;  // [num_qo_heads] natural-log logits added to the denominator only, or null
};

}  // namespace attnkit::planned
