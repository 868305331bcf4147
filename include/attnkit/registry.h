// The registry of backends (name -> factory, description, device, capabilities), `auto` selection
// by written rules, and hybrid prefill/decode pairs.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attnkit/backend.h"

namespace attnkit {

struct BackendInfo {
  std::string name;
  std::string description;  // the idea the backend carries, one line
  Device device = Device::cpu;
  std::function<Capabilities()> capabilities;
  // Empty when the backend can run on this machine; else why not ("no NVIDIA GPU found ...").
  std::function<std::string()> why_unavailable;
  std::function<std::unique_ptr<AttentionBackend>(const BackendContext&)> create;
};

class Registry {
 public:
  // The registry with every backend built into this library.
  static Registry& global();

  void add(BackendInfo info);  // throws on a duplicate name
  const BackendInfo& get(const std::string& name) const;  // throws naming the known backends
  const std::vector<BackendInfo>& all() const { return backends_; }
  std::vector<std::string> names() const;

 private:
  std::vector<BackendInfo> backends_;
};

struct Selection {
  std::string backend;  // the chosen backend's name
  std::string reason;   // why it was chosen and why each better-ranked one was not
};

// `auto`: the first backend in the written preference order that is available, on `device`,
// and supports the spec, cache and batch. Rules (in order):
//   cuda:  hopper (extend on sm_90) > mla (MLA decode) > planned > jit > cuda-naive
//   cpu:   cpu > reference
// With a batch, a measured tuning table (attnkit/tuning.h) is consulted first.
Selection select_backend(const AttentionSpec& spec, const KvCacheConfig& cache,
                         const ForwardBatch* batch = nullptr);
// The same, requiring support for every layer of the model.
Selection select_backend(const ModelSpec& model, const KvCacheConfig& cache,
                         const ForwardBatch* batch = nullptr);

// Creates a backend by name. "auto" is a backend that selects per batch (select_backend over the
// whole model), creates each chosen backend once and hands it every call.
std::unique_ptr<AttentionBackend> create_backend(const std::string& name, const BackendContext& context);

// Extend (and mixed) batches go to `prefill`, decode batches to `decode`. Both must read the same
// cache layout (device and KV dtype), else attnkit::Error names both backends and the mismatch.
std::unique_ptr<AttentionBackend> create_hybrid_backend(const std::string& prefill,
                                                        const std::string& decode,
                                                        const BackendContext& context);

}  // namespace attnkit
