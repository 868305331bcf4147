// The tuning table: JSON file format, bucket lookup, and the process-wide table `auto` reads.
#include "attnkit/tuning.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <mutex>

#include <nlohmann/json.hpp>

#include "attnkit/error.h"

namespace attnkit {

std::string heads_key(const AttentionSpec& s) {
  std::string key = std::to_string(s.num_qo_heads) + "q" + std::to_string(s.num_kv_heads) + "kv" +
                    std::to_string(s.head_dim_qk);
  if (s.head_dim_vo != s.head_dim_qk) key += "/" + std::to_string(s.head_dim_vo);
  return key;
}

int64_t round_up_pow2(int64_t x) {
  int64_t p = 1;
  while (p < x) p <<= 1;
  return p;
}

TuningBucket bucket_for(const AttentionSpec& spec, Device device, const ForwardBatch& batch) {
  TuningBucket b;
  b.device = std::string(device_name(device));
  b.phase = batch.mode == ForwardMode::decode ? "decode" : "prefill";
  b.heads = heads_key(spec);
  b.batch_size = static_cast<int>(round_up_pow2(std::max(1, batch.batch_size())));
  const int64_t mean_kv = batch.batch_size() ? batch.total_kv_len() / batch.batch_size() : 1;
  b.kv_len = round_up_pow2(std::max<int64_t>(1, mean_kv));
  return b;
}

void TuningTable::add(TuningEntry entry) {
  for (auto& e : entries_) {
    if (e.bucket == entry.bucket) {
      e = std::move(entry);
      return;
    }
  }
  entries_.push_back(std::move(entry));
}

const TuningEntry* TuningTable::lookup(const TuningBucket& want) const {
  const TuningEntry* best = nullptr;
  double best_distance = 0.0;
  for (const auto& e : entries_) {
    const TuningBucket& b = e.bucket;
    if (b.device != want.device || b.phase != want.phase || b.heads != want.heads) continue;
    const double d = std::fabs(std::log2(double(b.batch_size)) - std::log2(double(want.batch_size))) +
                     std::fabs(std::log2(double(b.kv_len)) - std::log2(double(want.kv_len)));
    if (!best || d < best_distance) {
      best = &e;
      best_distance = d;
    }
  }
  return best;
}

void TuningTable::save(const std::string& path) const {
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& e : entries_) {
    entries.push_back({{"device", e.bucket.device},
                       {"phase", e.bucket.phase},
                       {"heads", e.bucket.heads},
                       {"batch_size", e.bucket.batch_size},
                       {"kv_len", e.bucket.kv_len},
                       {"backend", e.backend},
                       {"median_ms", e.median_ms}});
  }
  std::ofstream f(path);
  ATTNKIT_CHECK(f.good(), "tuning table: cannot write '", path, "'");
  f << nlohmann::json{{"format", "attnkit-tuning-1"}, {"entries", entries}}.dump(2) << '\n';
}

TuningTable TuningTable::load(const std::string& path) {
  std::ifstream f(path);
  ATTNKIT_CHECK(f.good(), "tuning table: cannot read '", path, "'");
  TuningTable table;
  try {
    const nlohmann::json j = nlohmann::json::parse(f);
    ATTNKIT_CHECK(j.value("format", "") == "attnkit-tuning-1", "tuning table '", path,
                  "': format must be attnkit-tuning-1, got '", j.value("format", ""), "'");
    for (const auto& e : j.at("entries")) {
      TuningEntry entry;
      entry.bucket.device = e.at("device").get<std::string>();
      entry.bucket.phase = e.at("phase").get<std::string>();
      entry.bucket.heads = e.at("heads").get<std::string>();
      entry.bucket.batch_size = e.at("batch_size").get<int>();
      entry.bucket.kv_len = e.at("kv_len").get<int64_t>();
      entry.backend = e.at("backend").get<std::string>();
      entry.median_ms = e.at("median_ms").get<std::map<std::string, double>>();
      table.add(std::move(entry));
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(detail::concat("tuning table '", path, "': ", e.what()));
  }
  return table;
}

namespace {
struct GlobalTable {
  std::mutex mutex;
  bool initialised = false;
  std::shared_ptr<const TuningTable> table;
  std::string source;
};
GlobalTable& global() {
  static GlobalTable g;
  return g;
}
}  // namespace

void set_tuning_table(std::shared_ptr<const TuningTable> table, std::string source) {
  GlobalTable& g = global();
  std::lock_guard lock(g.mutex);
  g.initialised = true;
  g.table = std::move(table);
  g.source = std::move(source);
}

std::shared_ptr<const TuningTable> tuning_table() {
  GlobalTable& g = global();
  std::lock_guard lock(g.mutex);
  if (!g.initialised) {
    g.initialised = true;
    if (const char* path = std::getenv("ATTNKIT_TUNE_TABLE"); path && *path) {
      g.table = std::make_shared<const TuningTable>(TuningTable::load(path));
      g.source = path;
    }
  }
  return g.table;
}

std::string tuning_table_source() {
  tuning_table();
  GlobalTable& g = global();
  std::lock_guard lock(g.mutex);
  return g.source;
}

}  // namespace attnkit
