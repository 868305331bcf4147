// The tool's conventions on top of CLI11: output files checked before any work starts, numbers
// that must be positive said plainly, seeds, --threads, and the nearest name for a mistyped one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "attnkit/backend.h"
#include "attnkit/kv_cache.h"
#include "attnkit/spec.h"

namespace attnkit::tool {

// A trace: "builtin" or a file that exists (not a folder).
CLI::Validator trace_path();
// A file the subcommand will write: not a folder, its folder exists and the file can be written there.
CLI::Validator writable_file();
// A number > 0 (CLI::PositiveNumber's message quotes the double range's bounds in full).
CLI::Validator positive_number();
// A whole number from lo to hi, or 0 too where `or_zero` (CLI::Range says "Value abc not in range"
// of a word too).
CLI::Validator whole_number(int64_t lo, int64_t hi, bool or_zero = false);
// A whole number >= 0 written in decimal digits (an unsigned option would take "-1" as 2^64 - 1).
CLI::Validator unsigned_integer();

// Adds --threads to a subcommand: the size of the cpu backend's thread pool, set before the work runs.
void add_threads_option(CLI::App& cmd);
// --latent plain|fp8-blocked: an MLA cache's layout, into *format.
void add_latent_option(CLI::App& cmd, LatentFormat* format);
// --cpu-target NAME: the `cpu` kernels' SIMD target (attnkit/cpu_target.h), set as it is parsed.
void add_cpu_target_option(CLI::App& cmd);
// The switches between a backend's own code paths (attnkit/backend.h, BackendOptions), into
// *options as they are parsed: --decode-join, --cpu-bf16-dot, --hopper-kv-load, --hopper-fp8-products.
void add_backend_options(CLI::App& cmd, BackendOptions* options);

// Changes to a preset a subcommand offers: --heads N (every layer with N query heads, e.g.
// deepseek-v3's 128 as 16, the share of one GPU at tensor parallelism 8; 0 keeps the preset's) and
// --score-mod / --mask-mod (user-defined variants on every layer, AttentionSpec::score_mod).
struct ModelEdits {
  int heads = 0;
  std::string head_dim;  // "QK" or "QK/VO"; empty: the preset's
  std::string score_mod;
  std::string mask_mod;
  float soft_cap = 0.0f;  // 0: the preset's
};
void add_model_options(CLI::App& cmd, ModelEdits* edits);
// `model` with the edits applied; throws attnkit::Error where the KV heads do not divide the heads
// or an expression does not parse (the message names the column).
ModelSpec with_edits(ModelSpec model, const ModelEdits& edits);

// A backend the user named on its own must run here: throws attnkit::Error with the reason where it
// cannot (`all` passes over such backends instead).
void require_available(const std::string& subcommand, const std::string& backend);

// The candidate nearest to `word` by edit distance when it is close enough to be a typo, else "".
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

// "1 result file", "2 result files".
std::string count_of(size_t n, const std::string& noun);

}  // namespace attnkit::tool
