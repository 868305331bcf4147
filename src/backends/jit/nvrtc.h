// NVRTC, the CUDA toolkit's run-time compiler, loaded when first needed (dlopen), so libattnkit
// links no CUDA library beyond the runtime and a machine without NVRTC still loads it: the `jit`
// backend then reports itself unavailable with the reason. Compiling needs no GPU, only the
// target architecture, so the compile path is tested on machines without one.
#pragma once

#include <string>
#include <vector>

namespace attnkit::jit {

class Nvrtc {
 public:
  // The process's NVRTC, or nullptr with *why set (which libraries were tried).
  static const Nvrtc* get(std::string* why);

  // "13.0": part of every cache key.
  std::string version() const;
  // `source` compiled for `arch` ("sm_90a", or "sm_80" ...) to a cubin. Throws attnkit::Error
  // naming `name` with NVRTC's log where the source does not compile.
  std::vector<char> compile_cubin(const std::string& source, const std::string& name, const std::string& arch,
                                  const std::vector<std::string>& options) const;

  struct Api;

 private:
  explicit Nvrtc(const Api* api) : api_(api) {}
  const Api* api_;
};

}  // namespace attnkit::jit
