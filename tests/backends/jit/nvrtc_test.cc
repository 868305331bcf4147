// NVRTC from the jit backend: a kernel with a variant expression pasted in compiles to an sm_90a
// cubin on a machine without a GPU; a source that does not compile gives NVRTC's own message.
#include "backends/jit/nvrtc.h"

#include <gtest/gtest.h>

#include "attnkit/error.h"
#include "core/variant_expr.h"

namespace attnkit::jit {
namespace {

const Nvrtc& nvrtc_or_skip(bool* skip) {
  std::string why;
  const Nvrtc* n = Nvrtc::get(&why);
  *skip = n == nullptr;
  static const Nvrtc* keep = n;
  if (!n) std::cerr << "skipped: " << why << "\n";
  return *keep;
}

TEST(JitNvrtc, CompilesAVariantIntoAnSm90aCubin) {
  bool skip = false;
  const Nvrtc& nvrtc = nvrtc_or_skip(&skip);
  if (skip) GTEST_SKIP() << "NVRTC is not installed here";
  EXPECT_FALSE(nvrtc.version().empty());
  const VariantExpr alibi = VariantExpr::parse("score - exp2f(-(head + 1)) * (q_pos - kv_pos)", "score_mod");
  const std::string source = "extern \"C\" __global__ void scores(float* out, int q_pos, int head) {\n"
                             "  const int kv_pos = threadIdx.x;\n"
                             "  const float score = out[kv_pos];\n"
                             "  out[kv_pos] = " + alibi.cuda_source() + ";\n"
                             "}\n";
  const std::vector<char> cubin = nvrtc.compile_cubin(source, "alibi_scores", "sm_90a", {});
  ASSERT_GT(cubin.size(), 4u);
  EXPECT_EQ(std::string(cubin.begin(), cubin.begin() + 4), "\x7f" "ELF");
}

TEST(JitNvrtc, ACompileErrorCarriesTheCompilersMessage) {
  bool skip = false;
  const Nvrtc& nvrtc = nvrtc_or_skip(&skip);
  if (skip) GTEST_SKIP() << "NVRTC is not installed here";
  try {
    nvrtc.compile_cubin("extern \"C\" __global__ void k(float* x) { x[0] = undeclared_name; }\n", "broken", "sm_90a", {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("jit: broken does not compile for sm_90a (NVRTC_ERROR_COMPILATION)"), std::string::npos) << what;
    EXPECT_NE(what.find("undeclared_name"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace attnkit::jit
