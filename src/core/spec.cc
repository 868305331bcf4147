// AttentionSpec checks and the model presets (numbers from each model's published config).
#include "attnkit/spec.h"

#include <cmath>
#include <random>
#include <sstream>

#include "attnkit/error.h"
#include "core/variant_expr.h"

namespace attnkit {

std::string_view attention_kind_name(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::mha: return "MHA";
    case AttentionKind::gqa: return "GQA";
    case AttentionKind::mqa: return "MQA";
    case AttentionKind::mla: return "MLA";
  }
  return "?";
}

AttentionKind AttentionSpec::kind() const {
  if (is_mla()) return AttentionKind::mla;
  if (num_kv_heads == num_qo_heads) return AttentionKind::mha;
  if (num_kv_heads == 1) return AttentionKind::mqa;
  return AttentionKind::gqa;
}

float AttentionSpec::scale() const {
  return sm_scale > 0.0f ? sm_scale : 1.0f / std::sqrt(static_cast<float>(head_dim_qk));
}

void AttentionSpec::validate() const {
  ATTNKIT_CHECK(num_qo_heads > 0, "spec: num_qo_heads must be positive, got ", num_qo_heads);
  ATTNKIT_CHECK(num_kv_heads > 0, "spec: num_kv_heads must be positive, got ", num_kv_heads);
  ATTNKIT_CHECK(num_qo_heads % num_kv_heads == 0, "spec: num_qo_heads (", num_qo_heads,
                ") must be a multiple of num_kv_heads (", num_kv_heads, ")");
  ATTNKIT_CHECK(head_dim_qk > 0 && head_dim_qk <= 1024, "spec: head_dim_qk must be in 1..1024, got ",
                head_dim_qk);
  ATTNKIT_CHECK(head_dim_vo > 0 && head_dim_vo <= 1024, "spec: head_dim_vo must be in 1..1024, got ",
                head_dim_vo);
  ATTNKIT_CHECK(sm_scale >= 0.0f && std::isfinite(sm_scale), "spec: sm_scale must be finite and >= 0, got ",
                sm_scale);
  ATTNKIT_CHECK(window_left >= -1, "spec: window_left must be -1 (none) or >= 0, got ", window_left);
  ATTNKIT_CHECK(logits_soft_cap >= 0.0f && std::isfinite(logits_soft_cap),
                "spec: logits_soft_cap must be finite and >= 0, got ", logits_soft_cap);
  ATTNKIT_CHECK(sinks.empty() || static_cast<int>(sinks.size()) == num_qo_heads,
                "spec: sinks must have num_qo_heads (", num_qo_heads, ") values, got ", sinks.size());
  if (!score_mod.empty()) VariantExpr::parse(score_mod, "spec: score_mod");
  if (!mask_mod.empty()) {
    ATTNKIT_CHECK(!VariantExpr::parse(mask_mod, "spec: mask_mod").reads_score(),
                  "spec: mask_mod decides which keys are visible before any score exists, so it cannot read score: '",
                  mask_mod, "'");
  }
  if (is_mla()) {
    ATTNKIT_CHECK(num_kv_heads == 1, "spec: MLA reads one latent vector per token, so num_kv_heads must be 1, got ",
                  num_kv_heads);
    ATTNKIT_CHECK(qk_rope_head_dim >= 0, "spec: qk_rope_head_dim must be >= 0, got ", qk_rope_head_dim);
    ATTNKIT_CHECK(head_dim_qk == kv_lora_rank + qk_rope_head_dim, "spec: MLA head_dim_qk must be kv_lora_rank + qk_rope_head_dim (",
                  kv_lora_rank + qk_rope_head_dim, "), got ", head_dim_qk);
    ATTNKIT_CHECK(head_dim_vo == kv_lora_rank, "spec: MLA head_dim_vo must be kv_lora_rank (", kv_lora_rank,
                  "), got ", head_dim_vo);
  } else {
    ATTNKIT_CHECK(qk_rope_head_dim == 0, "spec: qk_rope_head_dim is for MLA only (kv_lora_rank > 0), got ",
                  qk_rope_head_dim);
  }
}

std::string AttentionSpec::describe() const {
  std::ostringstream os;
  os << attention_kind_name(kind()) << ' ' << num_qo_heads << "q/" << num_kv_heads << "kv d" << head_dim_qk;
  if (head_dim_vo != head_dim_qk) os << '/' << head_dim_vo;
  os << (causal ? " causal" : " full");
  if (window_left >= 0) os << " window " << window_left;
  if (logits_soft_cap > 0) os << " softcap " << logits_soft_cap;
  if (!sinks.empty()) os << " sinks";
  if (!score_mod.empty()) os << " score_mod '" << score_mod << "'";
  if (!mask_mod.empty()) os << " mask_mod '" << mask_mod << "'";
  return os.str();
}

AttentionSpec AttentionSpec::dense(int num_qo_heads, int num_kv_heads, int head_dim) {
  AttentionSpec s;
  s.num_qo_heads = num_qo_heads;
  s.num_kv_heads = num_kv_heads;
  s.head_dim_qk = head_dim;
  s.head_dim_vo = head_dim;
  return s;
}

AttentionSpec AttentionSpec::mla(int num_qo_heads, int kv_lora_rank, int qk_rope_head_dim, float sm_scale) {
  AttentionSpec s;
  s.num_qo_heads = num_qo_heads;
  s.num_kv_heads = 1;
  s.kv_lora_rank = kv_lora_rank;
  s.qk_rope_head_dim = qk_rope_head_dim;
  s.head_dim_qk = kv_lora_rank + qk_rope_head_dim;
  s.head_dim_vo = kv_lora_rank;
  s.sm_scale = sm_scale;
  return s;
}

const AttentionSpec& ModelSpec::layer(int layer_idx) const {
  ATTNKIT_CHECK(layer_idx >= 0 && layer_idx < num_layers(), "layer must be in 0..", num_layers() - 1,
                " for model ", name, ", got ", layer_idx);
  return layers[static_cast<size_t>(layer_idx)];
}

namespace {

ModelSpec uniform(std::string name, int layers, const AttentionSpec& spec, int hidden, int inter) {
  ModelSpec m;
  m.name = std::move(name);
  m.layers.assign(static_cast<size_t>(layers), spec);
  m.hidden_size = hidden;
  m.intermediate_size = inter;
  return m;
}

}  // namespace

std::vector<std::string> preset_names() {
  return {"llama3-8b", "llama3-70b", "qwen3-0.6b", "gemma2-9b", "gpt-oss-20b", "deepseek-v3"};
}

ModelSpec make_preset(std::string_view name, int num_layers) {
  ModelSpec m;
  if (name == "llama3-8b") {
    m = uniform("llama3-8b", 32, AttentionSpec::dense(32, 8, 128), 4096, 14336);
  } else if (name == "llama3-70b") {
    m = uniform("llama3-70b", 80, AttentionSpec::dense(64, 8, 128), 8192, 28672);
  } else if (name == "qwen3-0.6b") {
    m = uniform("qwen3-0.6b", 28, AttentionSpec::dense(16, 8, 128), 1024, 3072);
  } else if (name == "gemma2-9b") {
    // Soft-cap 50 on every layer; even layers see a sliding window of 4096 tokens (the query
    // and the 4095 before it), odd layers the whole history. Scale 1/sqrt(256) (query_pre_attn_scalar).
    AttentionSpec s = AttentionSpec::dense(16, 8, 256);
    s.logits_soft_cap = 50.0f;
    m = uniform("gemma2-9b", 42, s, 3584, 14336);
    for (int i = 0; i < m.num_layers(); i += 2) m.layers[static_cast<size_t>(i)].window_left = 4095;
  } else if (name == "gpt-oss-20b") {
    // 64 query heads, 8 KV heads of 64; sinks on every layer; even layers window 128.
    // The sink logits are learned weights: the preset draws fixed stand-ins in [-2, 2].
    m = uniform("gpt-oss-20b", 24, AttentionSpec::dense(64, 8, 64), 2880, 2880);
    std::mt19937 rng(20);
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    for (int i = 0; i < m.num_layers(); ++i) {
      auto& layer = m.layers[static_cast<size_t>(i)];
      layer.sinks.resize(64);
      for (float& x : layer.sinks) x = dist(rng);
      if (i % 2 == 0) layer.window_left = 127;
    }
  } else if (name == "deepseek-v3") {
    // Absorbed MLA: 128 heads read one 576-wide latent (512 + 64 rope) per token; the scale is
    // that of the un-absorbed 192-wide query-key product (128 nope + 64 rope).
    const AttentionSpec s = AttentionSpec::mla(128, 512, 64, 1.0f / std::sqrt(192.0f));
    m = uniform("deepseek-v3", 61, s, 7168, 18432);
  } else {
    std::string known;
    for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error(detail::concat("preset must be one of ", known, ", got '", name, "'"));
  }
  if (num_layers >= 0) {
    ATTNKIT_CHECK(num_layers >= 1, "num_layers must be >= 1, got ", num_layers);
    std::vector<AttentionSpec> layers;
    for (int i = 0; i < num_layers; ++i) layers.push_back(m.layers[static_cast<size_t>(i) % m.layers.size()]);
    m.layers = std::move(layers);
  }
  return m;
}

}  // namespace attnkit
