// Hybrid prefill/decode pairs: extend and mixed batches to one backend, decode batches to another,
// allowed only when both read the same cache layout.
#include <algorithm>

#include "attnkit/registry.h"
#include "core/delegating_backend.h"

namespace attnkit {

namespace {

// Extend and mixed batches go to one backend, decode batches to another; both read one cache.
class HybridBackend final : public DelegatingBackend {
 public:
  HybridBackend(const BackendContext& context, std::unique_ptr<AttentionBackend> prefill,
                std::unique_ptr<AttentionBackend> decode)
      : DelegatingBackend(context), prefill_(std::move(prefill)), decode_(std::move(decode)) {}

  std::string name() const override { return prefill_->name() + "+" + decode_->name(); }

  Capabilities capabilities() const override {
    // Extend/mixed come from the prefill side, decode from the decode side; the rest must hold for both.
    const Capabilities& p = prefill_->caps();
    const Capabilities& d = decode_->caps();
    Capabilities c = p;
    auto both = [](const auto& a, const auto& b) {
      std::remove_cvref_t<decltype(a)> out;
      for (const auto& x : a) {
        if (std::find(b.begin(), b.end(), x) != b.end()) out.push_back(x);
      }
      return out;
    };
    c.q_dtypes = both(p.q_dtypes, d.q_dtypes);
    c.kv_dtypes = both(p.kv_dtypes, d.kv_dtypes);
    c.kv_dtype_is_q_dtype = p.kv_dtype_is_q_dtype || d.kv_dtype_is_q_dtype;
    if (p.head_dims.empty()) c.head_dims = d.head_dims;
    else if (!d.head_dims.empty()) c.head_dims = both(p.head_dims, d.head_dims);
    c.max_head_dim = p.max_head_dim == 0 ? d.max_head_dim
                     : d.max_head_dim == 0 ? p.max_head_dim
                                           : std::min(p.max_head_dim, d.max_head_dim);
    c.mla = p.mla && d.mla;
    if (p.mla_dims.empty()) c.mla_dims = d.mla_dims;
    else if (!d.mla_dims.empty()) c.mla_dims = both(p.mla_dims, d.mla_dims);
    if (p.mla_rope_dims.empty()) c.mla_rope_dims = d.mla_rope_dims;
    else if (!d.mla_rope_dims.empty()) c.mla_rope_dims = both(p.mla_rope_dims, d.mla_rope_dims);
    if (p.page_sizes.empty()) c.page_sizes = d.page_sizes;
    else if (!d.page_sizes.empty()) c.page_sizes = both(p.page_sizes, d.page_sizes);
    c.min_page_size = std::max(p.min_page_size, d.min_page_size);
    c.max_page_size = std::min(p.max_page_size, d.max_page_size);
    c.decode = d.decode;
    c.gqa = p.gqa && d.gqa;
    c.mha = p.mha && d.mha;
    c.causal = p.causal && d.causal;
    c.non_causal = p.non_causal && d.non_causal;
    c.window = p.window && d.window;
    c.soft_cap = p.soft_cap && d.soft_cap;
    c.sinks = p.sinks && d.sinks;
    c.variants = p.variants && d.variants;
    c.custom_mask = p.custom_mask;  // decode batches carry no custom mask of their own here
    c.cuda_graph = d.cuda_graph;
    c.lse = p.lse && d.lse;
    return c;
  }

  void init_cuda_graph_state(int max_batch_size, int max_num_pages) override {
    decode_->init_cuda_graph_state(max_batch_size, max_num_pages);
  }
  void synchronize() override {
    prefill_->synchronize();
    decode_->synchronize();
  }

 protected:
  AttentionBackend* choose(const ForwardBatch& batch) override {
    return batch.mode == ForwardMode::decode ? decode_.get() : prefill_.get();
  }

 private:
  std::unique_ptr<AttentionBackend> prefill_;
  std::unique_ptr<AttentionBackend> decode_;
};

}  // namespace

std::unique_ptr<AttentionBackend> create_hybrid_backend(const std::string& prefill, const std::string& decode,
                                                        const BackendContext& context) {
  const Registry& registry = Registry::global();
  const Capabilities p = registry.get(prefill).capabilities();
  const Capabilities d = registry.get(decode).capabilities();
  const std::string pair = detail::concat("hybrid ", prefill, " (prefill) + ", decode, " (decode)");
  ATTNKIT_CHECK(p.device == d.device, pair, ": both must read one cache, but ", prefill, " runs on ",
                device_name(p.device), " and ", decode, " on ", device_name(d.device));
  ATTNKIT_CHECK(p.cache_layout == d.cache_layout, pair, ": both must read one cache layout, but ", prefill, " reads '",
                p.cache_layout, "' and ", decode, " reads '", d.cache_layout, "'");
  const DType kv = context.cache->config().dtype;
  for (const auto& [name, caps] : {std::pair{prefill, p}, std::pair{decode, d}}) {
    ATTNKIT_CHECK(std::find(caps.kv_dtypes.begin(), caps.kv_dtypes.end(), kv) != caps.kv_dtypes.end(), pair,
                  ": the cache dtype is ", dtype_name(kv), ", which ", name, " cannot read");
  }
  return std::make_unique<HybridBackend>(context, create_backend(prefill, context), create_backend(decode, context));
}

}  // namespace attnkit
