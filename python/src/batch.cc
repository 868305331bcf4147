// Batch from Python: the engine's CSR page table (FlashInfer's indptr / indices / last_page_len,
// plus qo_indptr), read once into the host ForwardBatch every plan reads; prefix lengths, the new
// tokens' slots and the mode follow from it. Or a batch built on a cache's own page tables.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "batch.h"
#include "bindings.h"
#include "cache.h"
#include "tensors.h"

namespace attnkit::python {

namespace {

constexpr const char* kWho = "Batch";

// Whether kv_page_indptr can be indexed as a page table (sizes agree, entries within
// kv_page_indices): the precondition of computing slots. When not, ForwardBatch::validate names it.
bool page_table_readable(const ForwardBatch& b) {
  const size_t n = b.qo_indptr.empty() ? 0 : b.qo_indptr.size() - 1;
  if (b.qo_indptr.empty() || b.kv_page_indptr.size() != n + 1 || b.kv_last_page_len.size() != n) return false;
  for (size_t i = 0; i < n; ++i) {
    if (b.kv_page_indptr[i] < 0 || b.kv_page_indptr[i] > b.kv_page_indptr[i + 1] || b.qo_indptr[i] > b.qo_indptr[i + 1])
      return false;
  }
  return b.qo_indptr[0] == 0 && b.kv_page_indptr[0] == 0 && static_cast<size_t>(b.kv_page_indptr[n]) == b.kv_page_indices.size();
}

void fill(PyBatch* self, nb::handle qo_indptr, nb::handle kv_page_indptr, nb::handle kv_page_indices,
          nb::handle kv_last_page_len, int page_size, nb::handle out_cache_loc, nb::handle custom_mask,
          nb::handle custom_mask_indptr) {
  new (self) PyBatch();
  ForwardBatch& b = self->batch;
  b.page_size = page_size;
  b.qo_indptr = host_i32({kWho, "qo_indptr"}, qo_indptr);
  b.kv_page_indptr = host_i32({kWho, "kv_page_indptr"}, kv_page_indptr);
  b.kv_page_indices = host_i32({kWho, "kv_page_indices"}, kv_page_indices);
  b.kv_last_page_len = host_i32({kWho, "kv_last_page_len"}, kv_last_page_len);
  if (!custom_mask.is_none()) {
    b.custom_mask = host_u8({kWho, "custom_mask"}, custom_mask);
    ATTNKIT_CHECK(!custom_mask_indptr.is_none(), "Batch: custom_mask needs custom_mask_indptr [batch_size + 1]");
    b.custom_mask_indptr = host_i64({kWho, "custom_mask_indptr"}, custom_mask_indptr);
  }
  ATTNKIT_CHECK(page_size >= 1, "Batch: page_size must be >= 1, got ", page_size);
  KvCacheConfig shape_only;  // what validation of the page table's own consistency reads
  shape_only.page_size = page_size;
  if (!page_table_readable(b)) {
    b.validate_except_page_range(shape_only);
    throw Error("Batch: the page table's arrays disagree");  // validate names the field first
  }
  const int n = b.batch_size();
  b.prefix_lens.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int kv_len = b.num_pages(i) == 0 ? 0 : (b.num_pages(i) - 1) * page_size + b.kv_last_page_len[i];
    ATTNKIT_CHECK(b.qo_len(i) <= kv_len, "Batch: request ", i, " has ", b.qo_len(i), " new tokens (qo_indptr) but kv_len ",
                  kv_len, " (kv_page_indptr, kv_last_page_len): the page table must hold the new tokens too");
    b.prefix_lens[static_cast<size_t>(i)] = kv_len - b.qo_len(i);
  }
  if (out_cache_loc.is_none()) {
    b.out_cache_loc.reserve(static_cast<size_t>(b.num_tokens()));
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < b.qo_len(i); ++j) b.out_cache_loc.push_back(b.slot(i, b.prefix_lens[static_cast<size_t>(i)] + j));
    }
  } else {
    b.out_cache_loc = host_i64({kWho, "out_cache_loc"}, out_cache_loc);
  }
  b.mode = forward_mode_of(b.qo_indptr);
  b.validate_except_page_range(shape_only);
}

nb::object as_numpy_view(const PyBatch& b, const void* data, size_t n, nb::dlpack::dtype dtype) {
  const size_t shape[1] = {n};
  nb::ndarray<nb::numpy, nb::ro> a(const_cast<void*>(data), 1, shape, nb::find(&b), nullptr, dtype);
  return nb::cast(a, nb::rv_policy::reference);
}

}  // namespace

void bind_batch(nb::module_& m) {
  nb::class_<PyBatch>(m, "Batch",
                      "One forward step: per request its new tokens and its page table after them, in CSR form.\n"
                      "Arrays are read once, here (host copies of a few bytes a request; CUDA arrays wait for the\n"
                      "device); the KV pools and q, k, v are never copied.")
      .def("__init__", &fill, nb::arg("qo_indptr"), nb::arg("kv_page_indptr"), nb::arg("kv_page_indices"),
           nb::arg("kv_last_page_len"), nb::kw_only(), nb::arg("page_size"), nb::arg("out_cache_loc") = nb::none(),
           nb::arg("custom_mask") = nb::none(), nb::arg("custom_mask_indptr") = nb::none(),
           "qo_indptr int32 [batch_size + 1]: request i's new tokens are rows qo_indptr[i]..qo_indptr[i+1] of q.\n"
           "kv_page_indptr int32 [batch_size + 1], kv_page_indices int32 [kv_page_indptr[-1]],\n"
           "kv_last_page_len int32 [batch_size] (1..page_size; 0 for a request without pages): each request's\n"
           "pages with this step's tokens included. out_cache_loc int64 [num_tokens]: the new tokens' slots\n"
           "(page * page_size + offset), the page table's; computed when None. custom_mask uint8/bool, request i's\n"
           "[qo_len, kv_len] row-major at custom_mask_indptr[i] (int64 [batch_size + 1]). int64 arrays are\n"
           "accepted for the int32 ones. The mode is decode when every request has one new token, extend when\n"
           "none has, mixed otherwise.")
      .def_static(
          "build",
          [](PyKvCache& cache, std::vector<int64_t> num_new_tokens, std::vector<RequestId> request_ids) {
            ATTNKIT_CHECK(request_ids.empty() || request_ids.size() == num_new_tokens.size(),
                          "Batch.build: request_ids must be empty or have one entry a request (", num_new_tokens.size(),
                          "), got ", request_ids.size());
            std::vector<RequestStep> steps(num_new_tokens.size());
            for (size_t i = 0; i < steps.size(); ++i) {
              steps[i].id = request_ids.empty() ? -1 : request_ids[i];
              steps[i].num_new_tokens = num_new_tokens[i];
            }
            auto* b = new PyBatch();
            try {
              b->batch = build_batch(*cache.cache, steps);
            } catch (...) {
              delete b;
              throw;
            }
            return b;
          },
          nb::arg("cache"), nb::arg("num_new_tokens"), nb::arg("request_ids") = std::vector<RequestId>{},
          nb::rv_policy::take_ownership,
          "A batch on the cache's own page tables: request i grows by num_new_tokens[i]; request_ids[i] -1 (or\n"
          "request_ids empty) adds a new request. Pages are allocated all or nothing (attnkit.OutOfPagesError).\n"
          "batch.request_ids says which request each row is.")
      .def_prop_ro("batch_size", [](const PyBatch& b) { return b.batch.batch_size(); })
      .def_prop_ro("num_tokens", [](const PyBatch& b) { return b.batch.num_tokens(); })
      .def_prop_ro("page_size", [](const PyBatch& b) { return b.batch.page_size; })
      .def_prop_ro("mode", [](const PyBatch& b) { return std::string(forward_mode_name(b.batch.mode)); },
                   "'extend', 'decode' or 'mixed'.")
      .def_prop_ro("request_ids", [](const PyBatch& b) { return b.batch.request_ids; })
      .def_prop_ro("prefix_lens", [](const PyBatch& b) { return b.batch.prefix_lens; })
      .def_prop_ro("kv_lens", [](const PyBatch& b) {
        std::vector<int> lens;
        for (int i = 0; i < b.batch.batch_size(); ++i) lens.push_back(b.batch.kv_len(i));
        return lens;
      })
      .def_prop_ro(
          "out_cache_loc",
          [](const PyBatch& b) {
            return as_numpy_view(b, b.batch.out_cache_loc.data(), b.batch.out_cache_loc.size(), nb::dtype<int64_t>());
          },
          "The new tokens' slots, int64 [num_tokens] (a read-only NumPy view).")
      .def("__repr__", [](const PyBatch& b) {
        return "Batch(" + std::string(forward_mode_name(b.batch.mode)) + ", " + std::to_string(b.batch.batch_size()) +
               " requests, " + std::to_string(b.batch.num_tokens()) + " new tokens, kv " +
               std::to_string(b.batch.total_kv_len()) + ")";
      });
}

}  // namespace attnkit::python
