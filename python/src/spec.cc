// AttentionSpec (one layer's mechanism) and ModelSpec (every layer's), with the named presets.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <optional>

#include "attnkit/spec.h"
#include "bindings.h"

namespace attnkit::python {

void bind_spec(nb::module_& m) {
  nb::class_<AttentionSpec>(m, "AttentionSpec",
                            "One layer's attention: MHA, GQA or MQA by num_qo_heads / num_kv_heads, or absorbed MLA.")
      .def(
          "__init__",
          [](AttentionSpec* self, int num_qo_heads, int num_kv_heads, int head_dim, std::optional<int> head_dim_vo,
             float sm_scale, bool causal, int window_left, float logits_soft_cap, std::vector<float> sinks,
             std::string score_mod, std::string mask_mod) {
            new (self) AttentionSpec(AttentionSpec::dense(num_qo_heads, num_kv_heads, head_dim));
            self->head_dim_vo = head_dim_vo.value_or(head_dim);
            self->sm_scale = sm_scale;
            self->causal = causal;
            self->window_left = window_left;
            self->logits_soft_cap = logits_soft_cap;
            self->sinks = std::move(sinks);
            self->score_mod = std::move(score_mod);
            self->mask_mod = std::move(mask_mod);
            self->validate();
          },
          nb::arg("num_qo_heads"), nb::arg("num_kv_heads"), nb::arg("head_dim"), nb::kw_only(),
          nb::arg("head_dim_vo") = nb::none(), nb::arg("sm_scale") = 0.0f, nb::arg("causal") = true,
          nb::arg("window_left") = -1, nb::arg("logits_soft_cap") = 0.0f, nb::arg("sinks") = std::vector<float>{},
          nb::arg("score_mod") = "", nb::arg("mask_mod") = "",
          "num_qo_heads query heads over num_kv_heads KV heads of head_dim (head_dim_vo for V, default head_dim).\n"
          "sm_scale 0 means 1/sqrt(head_dim); window_left -1 means no window (else key j is visible to the query\n"
          "at position i iff j >= i - window_left); logits_soft_cap 0 is off (else cap * tanh(logits / cap));\n"
          "sinks: [num_qo_heads] learned logits added to every softmax denominator (empty: off);\n"
          "score_mod / mask_mod: user-defined variants, one C++ expression each (empty: off), e.g. ALiBi\n"
          "'score - 0.0625f * (q_pos - kv_pos)' or a document mask 'kv_pos / 512 == q_pos / 512'.")
      .def_static(
          "mla",
          [](int num_qo_heads, int kv_lora_rank, int qk_rope_head_dim, float sm_scale) {
            AttentionSpec s = AttentionSpec::mla(num_qo_heads, kv_lora_rank, qk_rope_head_dim, sm_scale);
            s.validate();
            return s;
          },
          nb::arg("num_qo_heads"), nb::arg("kv_lora_rank"), nb::arg("qk_rope_head_dim"), nb::arg("sm_scale"),
          "Absorbed MLA: num_qo_heads heads read one latent of kv_lora_rank + qk_rope_head_dim a token.")
      .def_rw("num_qo_heads", &AttentionSpec::num_qo_heads)
      .def_rw("num_kv_heads", &AttentionSpec::num_kv_heads)
      .def_rw("head_dim_qk", &AttentionSpec::head_dim_qk)
      .def_rw("head_dim_vo", &AttentionSpec::head_dim_vo)
      .def_rw("sm_scale", &AttentionSpec::sm_scale)
      .def_rw("causal", &AttentionSpec::causal)
      .def_rw("window_left", &AttentionSpec::window_left)
      .def_rw("logits_soft_cap", &AttentionSpec::logits_soft_cap)
      .def_rw("sinks", &AttentionSpec::sinks)
      .def_rw("score_mod", &AttentionSpec::score_mod)
      .def_rw("mask_mod", &AttentionSpec::mask_mod)
      .def_rw("kv_lora_rank", &AttentionSpec::kv_lora_rank)
      .def_rw("qk_rope_head_dim", &AttentionSpec::qk_rope_head_dim)
      .def_prop_ro("kind", [](const AttentionSpec& s) { return std::string(attention_kind_name(s.kind())); },
                   "'mha', 'gqa', 'mqa' or 'mla'.")
      .def_prop_ro("scale", &AttentionSpec::scale, "The logit scale, resolved (sm_scale or 1/sqrt(head_dim_qk)).")
      .def("validate", &AttentionSpec::validate, "Raises attnkit.Error naming the first inconsistent field.")
      .def("__repr__", [](const AttentionSpec& s) { return "AttentionSpec(" + s.describe() + ")"; });

  nb::class_<ModelSpec>(m, "ModelSpec", "Every layer's AttentionSpec (windows and sinks may differ between layers).")
      .def(
          "__init__",
          [](ModelSpec* self, std::vector<AttentionSpec> layers, std::string name) {
            new (self) ModelSpec();
            self->name = std::move(name);
            self->layers = std::move(layers);
          },
          nb::arg("layers"), nb::arg("name") = "")
      .def_static("preset", &make_preset, nb::arg("name"), nb::arg("num_layers") = -1,
                  "A real model's attention numbers: see preset_names(); num_layers < 0 keeps the model's own count.")
      .def_rw("name", &ModelSpec::name)
      .def_rw("layers", &ModelSpec::layers)
      .def_prop_ro("num_layers", &ModelSpec::num_layers)
      .def("layer", &ModelSpec::layer, nb::arg("layer_idx"))
      .def("__repr__", [](const ModelSpec& s) {
        return "ModelSpec('" + s.name + "', " + std::to_string(s.num_layers()) + " layers, " +
               (s.layers.empty() ? std::string("-") : s.layers[0].describe()) + ")";
      });
  m.def("preset_names", &preset_names, "The names ModelSpec.preset knows.");
}

}  // namespace attnkit::python
