// The measured selection table behind `auto`: for shape buckets (device, phase, head layout, batch
// size, KV length), which backend `attnkit tune` timed fastest. Written and read as JSON.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "attnkit/batch.h"
#include "attnkit/spec.h"
#include "attnkit/tensor.h"

namespace attnkit {

struct TuningBucket {
  std::string device;      // "cpu" or "cuda"
  std::string phase;       // "prefill" (extend and mixed batches) or "decode"
  std::string heads;       // "32q8kv128", "128q1kv576/512", see heads_key
  int batch_size = 1;      // rounded up to a power of two
  int64_t kv_len = 1;      // mean KV length, rounded up to a power of two

  bool operator==(const TuningBucket&) const = default;
};

struct TuningEntry {
  TuningBucket bucket;
  std::string backend;                     // the fastest
  std::map<std::string, double> median_ms; // every backend timed, by name
};

class TuningTable {
 public:
  static TuningTable load(const std::string& path);  // throws naming the file and the bad field
  void save(const std::string& path) const;
  void add(TuningEntry entry);  // replaces an entry with the same bucket
  const std::vector<TuningEntry>& entries() const { return entries_; }
  // The entry of the nearest bucket with the same device, phase and heads (nearest in log2 of batch
  // size and KV length); null when none matches.
  const TuningEntry* lookup(const TuningBucket& bucket) const;

 private:
  std::vector<TuningEntry> entries_;
};

std::string heads_key(const AttentionSpec& spec);
int64_t round_up_pow2(int64_t x);
TuningBucket bucket_for(const AttentionSpec& spec, Device device, const ForwardBatch& batch);

// The table `auto` consults; null: the written rules only. At first use it is loaded from the file
// named by the environment variable ATTNKIT_TUNE_TABLE, when set.
void set_tuning_table(std::shared_ptr<const TuningTable> table, std::string source = {});
std::shared_ptr<const TuningTable> tuning_table();
std::string tuning_table_source();

}  // namespace attnkit
