// A context-parallel decode step in one process: every rank's cache and backend, the in-process
// group, and `reference` over the unsharded history on the same values, for the parallel tests.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnkit/compare.h"
#include "attnkit/context_parallel.h"
#include "attnkit/registry.h"
#include "harness/device_copy.h"

namespace attnkit::cp_testing {

// One layer's random q, k, v of `rows` tokens, in `dtype` on the host, and their exact f32 copies.
struct LayerInputs {
  LayerInputs(const AttentionSpec& spec, int64_t rows, uint64_t seed, DType dtype = DType::bf16);
  harness::Staged q, k, v;
  harness::Staged q32, k32, v32;
};

struct CpCase {
  std::string label;
  std::string backend = "cpu";
  AttentionSpec spec;
  int num_ranks = 2;
  ShareKind kind = ShareKind::interleaved;
  int pages_per_run = 2;  // contiguous only
  int page_size = 4;
  std::vector<int64_t> kv_lens;  // each request's length after this step, its one new token included
  int num_layers = 2;
  uint64_t seed = 1;
  DType dtype = DType::bf16;  // q, k, v, the output and every cache
};

class StepBuffers;

// The ranks of one case: built (caches, page tables, history written, plans made) by the
// constructor; step() runs every layer once.
class CpWorld {
 public:
  explicit CpWorld(const CpCase& c);

  struct Step {
    double rel_err = 0.0;                       // worst over layers: rank 0's output against `reference`
    std::string message;                        // the worst element, its index and both values
    bool ranks_agree = true;                    // every rank's output bit-identical to rank 0's
    std::vector<std::vector<uint8_t>> outputs;  // [layer] rank 0's output bytes
  };
  Step step();
  // One layer on every rank, queued and not waited for: every rank's attend of io's q, k, v, then
  // every rank's merge into its output, the order of the in-process group (and of a graph of it).
  void run_layer(int layer, StepBuffers& io);

  // Every rank's cache, every layer's K and V pools, as bytes.
  std::vector<uint8_t> cache_bytes() const;

  CpCase c;
  ModelSpec model;
  ShareLayout layout;
  Device device = Device::cpu;  // the backend's: where the ranks' caches, inputs and outputs live
  std::vector<std::unique_ptr<KvCache>> caches;  // [num_ranks]
  std::unique_ptr<ShardedPageTables> tables;
  ForwardBatch global;
  std::unique_ptr<InProcessGroup> group;
  std::vector<std::unique_ptr<AttentionBackend>> backends;    // [num_ranks]
  std::vector<std::unique_ptr<ContextParallelDecode>> ranks;  // [num_ranks]
  std::unique_ptr<KvCache> ref_cache;
  ForwardBatch ref_batch;
  std::unique_ptr<AttentionBackend> ref;
};

// One layer's q, k, v and every rank's output on the world's device, at addresses that stay for
// the object's life (a captured step reads and writes these).
class StepBuffers {
 public:
  explicit StepBuffers(const CpWorld& world);
  void load(const LayerInputs& in);  // in's q, k, v into the same buffers
  void poison_outputs();
  // Waits for the device, then every rank's output bytes (also in outs[r].host()).
  std::vector<std::vector<uint8_t>> download_outputs();

  harness::Staged q, k, v;
  std::vector<harness::Staged> outs;  // [num_ranks]
};

}  // namespace attnkit::cp_testing
