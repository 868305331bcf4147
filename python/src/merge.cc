// merge_states from Python: the log-sum-exp merge of partial attention states (split-KV chunks, a
// shared prefix and its suffixes, context-parallel ranks), on the CPU in f32.
#include <nanobind/stl/string.h>

#include <vector>

#include "attnkit/error.h"
#include "attnkit/merge.h"
#include "bindings.h"
#include "tensors.h"

namespace attnkit::python {

void bind_merge(nb::module_& m) {
  m.def(
      "_merge_states",
      [](nb::list parts, nb::handle out_o, nb::handle out_lse) {
        const char* who = "merge_states";
        std::vector<AttentionState> states;
        std::vector<std::string> fields;
        for (size_t i = 0; i < parts.size(); ++i) {
          nb::tuple pair = nb::cast<nb::tuple>(parts[i]);
          ATTNKIT_CHECK(pair.size() == 2, who, ": parts[", i, "] must be a pair (o, lse)");
          const std::string o_field = "parts[" + std::to_string(i) + "].o";
          const std::string lse_field = "parts[" + std::to_string(i) + "].lse";
          states.push_back({view_of({who, o_field.c_str()}, pair[0]), view_of({who, lse_field.c_str()}, pair[1])});
          ATTNKIT_CHECK(states.back().o.device == Device::cpu && states.back().lse.device == Device::cpu, who, ": ",
                        o_field, " and ", lse_field, " must be on cpu");
        }
        merge_states(states, {view_of({who, "out"}, out_o), view_of({who, "out_lse"}, out_lse)});
      },
      nb::arg("parts"), nb::arg("out"), nb::arg("out_lse"),
      "Writes the merge of parts [(o [num_tokens, num_heads, head_dim] f32, lse [num_tokens, num_heads] f32)]\n"
      "into out and out_lse (natural-log LSE; an empty part has lse -inf). CPU tensors.");
}

}  // namespace attnkit::python
