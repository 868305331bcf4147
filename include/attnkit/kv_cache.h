// The paged KV cache: per-layer K and V pools (MLA: one latent pool), a page allocator with a free
// list, and per-request page tables. Pools live on the CPU or a CUDA device.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "attnkit/error.h"
#include "attnkit/spec.h"
#include "attnkit/tensor.h"

namespace attnkit {

// How an MLA latent slot is laid out. `plain`: head_dim_k values of the cache dtype (e4m3 with the
// one k_scale). `fp8_blocked` (e4m3 only; the layout of FlashMLA's fp8 cache): the first head_dim_v
// values (the NoPE part, read again as V) as e4m3 in blocks of 128, each block with its own fp32
// scale (stored = value / scale, scale = the block's largest magnitude / 448), then those scales,
// then the last head_dim_k - head_dim_v values (RoPE) as bf16: 512 + 16 + 128 = 656 bytes for
// deepseek-v3's 512 + 64.
enum class LatentFormat { plain, fp8_blocked };
inline constexpr int kLatentScaleBlock = 128;  // fp8_blocked: NoPE values a scale covers

struct KvCacheConfig {
  int num_layers = 1;
  int num_pages = 0;
  int page_size = 16;          // 1..256 token slots a page
  int num_kv_heads = 0;        // MLA: 1
  int head_dim_k = 0;          // MLA: kv_lora_rank + qk_rope_head_dim
  int head_dim_v = 0;          // MLA: kv_lora_rank (read from the front of the latent slot)
  DType dtype = DType::bf16;   // f32 (CPU backends), f16, bf16, e4m3
  float k_scale = 1.0f;        // e4m3: stored = value / scale, read = stored * scale
  float v_scale = 1.0f;        // MLA: unused (the latent, V half included, has the one k_scale); leave at 1
  bool mla = false;            // one latent pool per layer, no V pool
  LatentFormat latent_format = LatentFormat::plain;  // MLA only
  Device device = Device::cpu;

  // The head layout of `spec` (KV heads, head dims, MLA); the caller sets pages, dtype and device.
  static KvCacheConfig for_spec(const AttentionSpec& spec, int num_layers = 1);

  int64_t num_slots() const { return int64_t{num_pages} * page_size; }
  // Bytes of one token slot of K (MLA: the latent vector) and of V (MLA: 0).
  size_t k_slot_bytes() const {
    if (latent_format == LatentFormat::fp8_blocked) {
      return size_t(head_dim_v) + sizeof(float) * (head_dim_v / kLatentScaleBlock) + 2 * size_t(head_dim_k - head_dim_v);
    }
    return size_t(num_kv_heads) * head_dim_k * dtype_size(dtype);
  }
  size_t v_slot_bytes() const { return mla ? 0 : size_t(num_kv_heads) * head_dim_v * dtype_size(dtype); }
  void validate() const;
};

// Thrown when the pool has fewer free pages than asked for. Nothing was allocated: the caller can
// make the request wait or preempt another one and try again.
class OutOfPagesError : public Error {
 public:
  using Error::Error;
};

// Hands out page indices from a free list. Allocation is all-or-nothing.
class PageAllocator {
 public:
  explicit PageAllocator(int num_pages);
  std::vector<int32_t> allocate(int num_pages);  // throws OutOfPagesError
  void free(std::span<const int32_t> pages);     // throws on a page that is not allocated
  int num_free() const { return static_cast<int>(free_list_.size()); }
  int num_pages() const { return static_cast<int>(owned_.size()); }
  bool is_allocated(int32_t page) const { return owned_.at(static_cast<size_t>(page)) != 0; }
  // Reorders the free list, so tests see page tables that are not in ascending order.
  void shuffle(uint64_t seed);

 private:
  std::vector<int32_t> free_list_;  // popped from the back
  std::vector<uint8_t> owned_;      // [num_pages] 1 while allocated
};

using RequestId = int64_t;

class KvCache {
 public:
  explicit KvCache(const KvCacheConfig& config);
  // A cache over pools the caller allocated and keeps owning (an engine's own KV tensors): one K
  // pool and one V pool a layer (MLA: v_pools empty), each as k_pool_view / v_pool_view describe,
  // contiguous, on config.device, alive as long as the cache. Nothing is allocated or copied.
  KvCache(const KvCacheConfig& config, std::vector<void*> k_pools, std::vector<void*> v_pools);

  const KvCacheConfig& config() const { return config_; }
  PageAllocator& allocator() { return allocator_; }
  const PageAllocator& allocator() const { return allocator_; }

  // Pool of one layer: [num_slots, num_kv_heads, head_dim_k] (K or latent) and
  // [num_slots, num_kv_heads, head_dim_v] (V; MLA: the latent pool again).
  void* k_pool(int layer) const;
  void* v_pool(int layer) const;
  TensorView k_pool_view(int layer) const;
  TensorView v_pool_view(int layer) const;

  // Requests and their page tables.
  RequestId add_request();
  // Grows the request to `new_length` tokens, allocating pages all-or-nothing.
  void reserve(RequestId id, int64_t new_length);
  void free_request(RequestId id);
  int64_t length(RequestId id) const;
  const std::vector<int32_t>& pages(RequestId id) const;
  int64_t slot(RequestId id, int64_t position) const;
  size_t num_requests() const { return requests_.size(); }

  // Writes k [num_tokens, num_kv_heads, head_dim_k] and v [num_tokens, num_kv_heads, head_dim_v]
  // (MLA: v empty) of one layer at the slots out_cache_loc [num_tokens] (i64, on the cache's device),
  // converting to the cache dtype. Validates every shape and slot first: a rejected call writes nothing.
  void store(int layer, const TensorView& k, const TensorView& v, const TensorView& out_cache_loc);

 private:
  struct Request {
    int64_t length = 0;
    std::vector<int32_t> pages;
  };
  const Request& request(RequestId id) const;

  KvCacheConfig config_;
  PageAllocator allocator_;
  std::vector<Buffer> owned_pools_;  // empty for a cache over the caller's pools
  std::vector<void*> k_pools_;       // [num_layers]
  std::vector<void*> v_pools_;       // [num_layers]; MLA: empty
  std::unordered_map<RequestId, Request> requests_;
  RequestId next_id_ = 0;
};

}  // namespace attnkit
