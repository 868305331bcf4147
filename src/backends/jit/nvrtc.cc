#include "backends/jit/nvrtc.h"

#include <dlfcn.h>
#include <nvrtc.h>

#include <cstdlib>
#include <mutex>

#include "attnkit/error.h"

namespace attnkit::jit {

struct Nvrtc::Api {
  decltype(&::nvrtcVersion) version = nullptr;
  decltype(&::nvrtcGetErrorString) error_string = nullptr;
  decltype(&::nvrtcCreateProgram) create = nullptr;
  decltype(&::nvrtcCompileProgram) compile = nullptr;
  decltype(&::nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&::nvrtcGetProgramLog) log = nullptr;
  decltype(&::nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&::nvrtcGetCUBIN) cubin = nullptr;
  decltype(&::nvrtcDestroyProgram) destroy = nullptr;
};

namespace {

// The toolkit's soname first, then its usual folders (a library under /usr/local/cuda is not
// on the loader's path unless the system says so).
std::vector<std::string> candidates() {
  std::vector<std::string> c = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* root = std::getenv(var)) c.push_back(std::string(root) + "/lib64/libnvrtc.so");
  }
  c.push_back("/usr/local/cuda/lib64/libnvrtc.so");
  return c;
}

template <typename F>
bool bind(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}

}  // namespace

const Nvrtc* Nvrtc::get(std::string* why) {
  static std::once_flag once;
  static Api api;
  static const Nvrtc* instance = nullptr;
  static std::string failure;
  std::call_once(once, [] {
    void* lib = nullptr;
    std::string tried;
    for (const std::string& name : candidates()) {
      lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib) break;
      tried += (tried.empty() ? "" : ", ") + name;
    }
    if (!lib) {
      failure = "NVRTC was not found (tried " + tried + "); it comes with the CUDA toolkit";
      return;
    }
    const bool ok = bind(lib, "nvrtcVersion", &api.version) && bind(lib, "nvrtcGetErrorString", &api.error_string) &&
                    bind(lib, "nvrtcCreateProgram", &api.create) && bind(lib, "nvrtcCompileProgram", &api.compile) &&
                    bind(lib, "nvrtcGetProgramLogSize", &api.log_size) && bind(lib, "nvrtcGetProgramLog", &api.log) &&
                    bind(lib, "nvrtcGetCUBINSize", &api.cubin_size) && bind(lib, "nvrtcGetCUBIN", &api.cubin) &&
                    bind(lib, "nvrtcDestroyProgram", &api.destroy);
    if (!ok) {
      failure = "the NVRTC found lacks nvrtcGetCUBIN and friends (CUDA 11.1 or newer is needed)";
      return;
    }
    static const Nvrtc nvrtc(&api);
    instance = &nvrtc;
  });
  if (!instance && why) *why = failure;
  return instance;
}

std::string Nvrtc::version() const {
  int major = 0, minor = 0;
  api_->version(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

std::vector<char> Nvrtc::compile_cubin(const std::string& source, const std::string& name, const std::string& arch,
                                       const std::vector<std::string>& options) const {
  nvrtcProgram prog = nullptr;
  nvrtcResult r = api_->create(&prog, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr);
  ATTNKIT_CHECK(r == NVRTC_SUCCESS, "jit: nvrtcCreateProgram failed for ", name, ": ", api_->error_string(r));
  std::vector<std::string> all = {"--gpu-architecture=" + arch, "-std=c++17"};
  all.insert(all.end(), options.begin(), options.end());
  std::vector<const char*> argv;
  for (const std::string& o : all) argv.push_back(o.c_str());
  r = api_->compile(prog, static_cast<int>(argv.size()), argv.data());
  size_t log_bytes = 0;
  api_->log_size(prog, &log_bytes);
  std::string log(log_bytes, '\0');
  if (log_bytes > 1) api_->log(prog, log.data());
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  if (r != NVRTC_SUCCESS) {
    api_->destroy(&prog);
    throw Error("jit: " + name + " does not compile for " + arch + " (" + api_->error_string(r) + "):\n" + log);
  }
  size_t bytes = 0;
  api_->cubin_size(prog, &bytes);
  std::vector<char> cubin(bytes);
  api_->cubin(prog, cubin.data());
  api_->destroy(&prog);
  ATTNKIT_CHECK(!cubin.empty(), "jit: ", name, " compiled to an empty cubin for ", arch,
                " (a virtual architecture such as compute_90 gives PTX, not a cubin)");
  return cubin;
}

}  // namespace attnkit::jit
