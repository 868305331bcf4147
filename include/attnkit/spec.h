// The attention mechanism of one layer (AttentionSpec) and of a model (ModelSpec), with named presets.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace attnkit {

enum class AttentionKind { mha, gqa, mqa, mla };

struct AttentionSpec {
  int num_qo_heads = 0;
  int num_kv_heads = 0;   // MLA: 1 (one latent vector per token, read by every query head)
  int head_dim_qk = 0;    // MLA: kv_lora_rank + qk_rope_head_dim
  int head_dim_vo = 0;    // MLA: kv_lora_rank
  float sm_scale = 0.0f;  // 0: 1 / sqrt(head_dim_qk)
  bool causal = true;
  int window_left = -1;   // -1: no window; else key j is visible to the query at position i iff j >= i - window_left
  float logits_soft_cap = 0.0f;  // 0: off; else logits become cap * tanh(logits / cap) (after scaling)
  std::vector<float> sinks;      // [num_qo_heads] learned logits added to every softmax denominator; empty: off
  // User-defined variants (FlexAttention's score_mod / mask_mod), one C++ expression each in the
  // subset src/core/variant_expr.h documents; empty: off. score_mod rewrites each logit after the
  // scale and the soft-cap (ALiBi: "score - 0.0625f * (q_pos - kv_pos)"); mask_mod keeps a key
  // where it is true, on top of the causal rule, the window and a batch's custom mask (a
  // document mask: "kv_pos / 512 == q_pos / 512"). Both may read q_pos, kv_pos, head, kv_head,
  // request, q_len and kv_len; score_mod also score.
  std::string score_mod;
  std::string mask_mod;
  int kv_lora_rank = 0;          // > 0: MLA in the absorbed form
  int qk_rope_head_dim = 0;

  // q query heads over kv KV heads of head_dim (MHA, GQA or MQA by the ratio), causal, scale 1/sqrt(d).
  static AttentionSpec dense(int num_qo_heads, int num_kv_heads, int head_dim);
  // Absorbed MLA: num_qo_heads read one latent of kv_lora_rank + qk_rope_head_dim per token.
  static AttentionSpec mla(int num_qo_heads, int kv_lora_rank, int qk_rope_head_dim, float sm_scale);

  bool is_mla() const { return kv_lora_rank > 0; }
  int group_size() const { return num_kv_heads > 0 ? num_qo_heads / num_kv_heads : 0; }
  AttentionKind kind() const;
  float scale() const;
  // Throws attnkit::Error naming the first inconsistent field.
  void validate() const;
  std::string describe() const;
};

struct ModelSpec {
  std::string name;
  std::vector<AttentionSpec> layers;  // one per layer: windows and sinks may differ between layers
  int hidden_size = 0;                // for the non-attention matrix products of a layer
  int intermediate_size = 0;

  int num_layers() const { return static_cast<int>(layers.size()); }
  const AttentionSpec& layer(int layer_idx) const;
};

// Presets with the real models' attention numbers. `num_layers` < 0 keeps the model's own count.
ModelSpec make_preset(std::string_view name, int num_layers = -1);
std::vector<std::string> preset_names();

std::string_view attention_kind_name(AttentionKind kind);

}  // namespace attnkit
