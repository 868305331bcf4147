// Internal to the report: the runs found in the result files, each with what it was (backend,
// trace, preset, commit, ...) and a label that tells it from every other run on the page.
#pragma once

#include <string>
#include <vector>

#include "serving/report.h"

namespace attnkit::serving::report_impl {

// One thing a run was, as a table shows it (`value`) and as a label adds it (`tag`).
struct Field {
  std::string key;    // "trace", "preset", "commit", ...
  std::string value;  // "" when the file does not say
  std::string tag;    // "sharegpt", "page 16", "@1a2b3c4"
};

struct Run {
  bool replay = true;
  size_t file = 0;                          // index into the inputs
  const nlohmann::json* run = nullptr;      // replay: the run object
  std::vector<const nlohmann::json*> results;  // bench: this backend's results (the tool's own object)
  std::string backend;                      // the replay run's label or the bench backend
  std::string skipped;                      // why the run has no numbers ("": it has)
  std::vector<Field> fields;                // in the order labels pick from
  std::string label;                        // unique on the page
  std::vector<std::string> label_fields;    // the keys of the fields it names
  RunStyle style;                           // set for runs with numbers
  const std::string& field(const std::string& key) const;
};

// The field keys in label order, and each one's table heading.
const std::vector<std::pair<std::string, std::string>>& field_headings();

// Every run of every file (replay runs; bench results grouped by backend), labelled and styled.
std::vector<Run> collect_runs(const std::vector<ReportInput>& inputs);

// The fields that every run shares ("trace sharegpt, preset llama3-8b"), to say once on the page.
std::string shared_fields(const std::vector<const Run*>& runs);

// Whether field `key` takes more than one value among `runs` (a column worth showing).
bool field_varies(const std::vector<const Run*>& runs, const std::string& key);

}  // namespace attnkit::serving::report_impl
