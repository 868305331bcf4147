// The interface every backend implements, and what a backend declares it can do.
// The public forward_* entry points validate once, here, before any backend code touches memory.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/batch.h"
#include "attnkit/kv_cache.h"
#include "attnkit/layer_params.h"
#include "attnkit/spec.h"
#include "attnkit/tensor.h"

namespace attnkit {

// What a backend supports. `why_unsupported` turns it into the one answer every caller uses:
// the support check, `attnkit list`, `attnkit check` and `auto` selection cannot disagree.
struct Capabilities {
  Device device = Device::cpu;
  // How the backend reads the cache; a hybrid pair must agree. "paged-nhd": slot [num_kv_heads, head_dim].
  std::string cache_layout = "paged-nhd";
  std::vector<DType> q_dtypes;       // q, k, v and out share one dtype
  std::vector<DType> kv_dtypes;      // cache dtypes
  bool kv_dtype_is_q_dtype = false;  // a 16-bit cache must have q's dtype (no conversion as tiles load; e4m3 is dequantised)
  std::vector<int> head_dims;        // supported head_dim_qk == head_dim_vo values; empty: any
  int max_head_dim = 0;              // with head_dims empty: head_dim_qk and head_dim_vo at most this (0: any)
  int head_dim_multiple = 1;         // head_dim_qk and head_dim_vo must be multiples of this
  bool mla = false;                  // MLA (absorbed form)
  std::vector<int> mla_dims;         // supported kv_lora_rank values for MLA; empty: any
  std::vector<int> mla_rope_dims;    // supported qk_rope_head_dim values for MLA; empty: any
  bool fp8_blocked_latent = false;   // MLA caches in LatentFormat::fp8_blocked (656-byte slots)
  bool plain_e4m3_latent = true;     // MLA e4m3 caches in LatentFormat::plain (the one k_scale)
  int min_page_size = 1;
  int max_page_size = 256;
  std::vector<int> page_sizes;       // the page sizes served, all in min..max; empty: every size in min..max
  bool extend = true;
  bool decode = true;
  bool mixed = true;
  bool gqa = true;                   // num_qo_heads > num_kv_heads
  bool mha = true;                   // non-MLA attention at all
  bool causal = true;
  bool non_causal = true;
  bool window = true;
  bool soft_cap = true;
  bool sinks = true;
  bool custom_mask = true;
  bool variants = false;             // AttentionSpec::score_mod / mask_mod
  bool cuda_graph = false;
  bool lse = false;                  // forward can also write each output row's log-sum-exp
};

// Empty when `caps` covers the spec, cache and (when given) batch and q dtype; else the reason,
// naming the field.
std::string why_unsupported(const Capabilities& caps, const AttentionSpec& spec,
                            const KvCacheConfig& cache, const ForwardBatch* batch = nullptr,
                            std::optional<DType> q_dtype = std::nullopt);

// Switches between a backend's own code paths, for comparing them on one machine; the defaults are
// what each backend runs best with, and a backend ignores the switches that are not its own.
// `attnkit bench` and `attnkit check` set them with --decode-join, --cpu-bf16-dot, --hopper-kv-load and
// --hopper-fp8-products, `attnkit bench` also with --decode-timeline.
struct BackendOptions {
  // planned: how a decode request split across many CTAs is joined.
  enum class DecodeJoin {
    all_wait,        // by all the split's CTAs at once, in a cooperative launch (the default)
    two_level,       // by the CTA that finishes last, in two levels; plain launches
    all_wait_plain,  // planned as all_wait but launched plainly, so the last CTA to count joins all:
                     // what runs where a device cannot hold the whole grid at once
  };
  DecodeJoin decode_join = DecodeJoin::all_wait;
  // cpu: bf16 products through AVX512-BF16 where the CPU has it; false keeps f32 products.
  bool cpu_bf16_dot = true;
  // hopper: how the extend kernel brings K/V tiles into shared memory.
  enum class HopperKvLoad {
    by_page_size,  // TMA boxes, one a page piece, where pages have 8 slots or more; else gather (the default)
    gather,        // rows gathered with cp.async by the producer warpgroup, whatever the page size
  };
  HopperKvLoad hopper_kv_load = HopperKvLoad::by_page_size;
  // hopper: an e4m3 cache multiplied on e4m3 tensor cores, q quantised to e4m3 a row at a time and P
  // rounded to e4m3, where the cache allows it (head dim 128, pages of 8 slots or more: other caches
  // load as without it); false dequantises the cache to q's type as tiles load and multiplies in
  // that type. Faster, less exact: docs/benchmarks.md states both.
  bool hopper_fp8_products = false;
  // planned, diagnostics: device memory of [kDecodeTimelineCtas, kDecodeTimelineSlots] u64 that
  // every decode launch fills, row c with CTA c's SM id and %globaltimer stamps (entry, first tile
  // landed, last tile consumed, exit, the start and end of its last split's fence-count-join, the
  // start of that join's loads). Null: off, and the kernel skips the stores.
  unsigned long long* decode_timeline = nullptr;
};
// The size of the `cpu` backend's process-wide thread pool, the calling thread included; 0 (the
// default) is ATTNKIT_CPU_THREADS where set, else one thread a core. The pool is made on the first
// cpu forward call, so this is for the start of a program: once the pool runs with another size it
// throws attnkit::Error.
void set_cpu_threads(int num_threads);
inline constexpr int kDecodeTimelineSlots = 8;
inline constexpr int kDecodeTimelineCtas = 4096;  // rows to allocate: more than any decode grid

struct BackendContext {
  const ModelSpec* model = nullptr;  // never null; outlives the backend
  KvCache* cache = nullptr;          // never null; outlives the backend
  BackendOptions options = {};
};

class AttentionBackend {
 public:
  explicit AttentionBackend(const BackendContext& context);
  virtual ~AttentionBackend() = default;
  AttentionBackend(const AttentionBackend&) = delete;
  AttentionBackend& operator=(const AttentionBackend&) = delete;

  virtual std::string name() const = 0;
  virtual Capabilities capabilities() const = 0;
  // The dtype this backend's products round q and P to, for q of `q_dtype` and the cache it was
  // made with: q's own unless it says otherwise (hopper's fp8 products: e4m3). A comparison with
  // `reference` allows the bound that dtype sets (default_tolerance, attnkit/compare.h).
  virtual DType products_dtype(DType q_dtype) const { return q_dtype; }

  // Plan: once per batch, before layer 0. Validates the batch against the cache and capabilities.
  // The batch is read again by every forward_*: it must stay alive and unchanged until the next plan.
  void init_forward_metadata(const ForwardBatch& batch);
  // q [num_tokens, num_qo_heads, head_dim_qk], k [num_tokens, num_kv_heads, head_dim_qk],
  // v [num_tokens, num_kv_heads, head_dim_vo] (MLA: k is the latent [num_tokens, 1, rank + rope],
  // v is empty), out [num_tokens, num_qo_heads, head_dim_vo]; all on the backend's device.
  // Stores k, v at the batch's out_cache_loc, then attends each new token to prefix + new tokens.
  // k and v both empty (MLA: k empty): the new tokens' K/V are in the cache already and nothing is
  // stored (context parallelism stores each on the rank that owns its position, attnkit/context_parallel.h).
  // Where caps().lse, `lse` [num_tokens, num_qo_heads] f32 on the backend's device (empty: not
  // wanted) also gets each output row's natural-log LSE (-inf for a row that sees no key; sinks
  // excluded), for merging with other partial states (attnkit/merge.h).
  void forward_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, const TensorView& lse = TensorView());
  void forward_decode(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, const TensorView& lse = TensorView());
  // Dispatches on the batch mode.
  void forward(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
               const TensorView& out, const TensorView& lse = TensorView());
  // Fixed-address metadata for CUDA-graph capture and replay; throws where unsupported.
  virtual void init_cuda_graph_state(int max_batch_size, int max_num_pages);
  // Blocks until this backend's queued device work is done (timing, and reading outputs).
  virtual void synchronize() {}
  // Memory the backend holds beyond the cache (plan buffers, split-KV partials, score matrices).
  virtual size_t workspace_bytes() const { return 0; }

  const ForwardBatch& batch() const;
  const ModelSpec& model() const { return *context_.model; }
  KvCache& cache() const { return *context_.cache; }
  const BackendOptions& options() const { return context_.options; }
  // Capabilities, computed once.
  const Capabilities& caps() const;
  // The layer's kernel scalars (layer_params.h), resolved once when the backend is made.
  const LayerParams& layer_params(int layer) const { return layer_params_[static_cast<size_t>(layer)]; }

 protected:
  // The batch's out_cache_loc as a host tensor (for CPU backends' cache stores).
  TensorView host_out_cache_loc() const;
  // Every backend's cache store of the new tokens' K/V: KvCache::store, or nothing where the caller
  // passed k and v empty (stored already).
  void store_new_kv(int layer, const TensorView& k, const TensorView& v, const TensorView& out_cache_loc) const {
    if (!k.empty()) cache().store(layer, k, v, out_cache_loc);
  }
  // The current forward call's lse output (validated); empty when the caller did not ask for it.
  const TensorView& lse_output() const { return lse_output_; }
  // Called after validation; the batch is the one given to init_forward_metadata.
  virtual void plan(const ForwardBatch& batch) = 0;
  // True where plan() reads the whole page table anyway and checks its
  // entries against the cache in the same pass: validation then leaves them to it.
  virtual bool plan_checks_page_indices() const { return false; }
  virtual void run_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                          const TensorView& out) = 0;
  // Default: decode is extend with one new token per request.
  virtual void run_decode(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                          const TensorView& out) {
    run_extend(layer, q, k, v, out);
  }

 private:
  void validate_forward(const char* entry, int layer, const TensorView& q, const TensorView& k,
                        const TensorView& v, const TensorView& out, const TensorView& lse) const;

  BackendContext context_;
  std::vector<LayerParams> layer_params_;  // [num_layers]
  const ForwardBatch* batch_ = nullptr;
  bool layers_checked_ = false;  // every layer's spec passed why_unsupported once
  TensorView lse_output_;        // set for the duration of one forward call
  mutable std::unique_ptr<Capabilities> caps_;
};

}  // namespace attnkit
