// Programmatic dependent launch in the jit backend's tile sources, without a GPU: a source for
// sm_90 or later carries attend's griddepcontrol.launch_dependents (at its epilogue) and merge's
// griddepcontrol.wait (before its first read of a partial), and compiles with NVRTC for sm_90a;
// a source for an earlier architecture, or for none, carries neither and is the source it was
// before them (the pinned hashes of source_stability_test.cc hold it so).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "backends/jit/config.h"
#include "backends/jit/nvrtc.h"
#include "backends/jit/source.h"
#include "test_keys.h"

namespace attnkit::jit {
namespace {

using testing::make_key;

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t pos = s.find(what); pos != std::string::npos; pos = s.find(what, pos + what.size())) ++n;
  return n;
}

// The lines `more` has beyond `base`, where `base`'s lines are `more`'s in order; else -1.
size_t extra_lines(const std::string& base, const std::string& more) {
  std::vector<std::string> b, m;
  for (auto [text, lines] : {std::pair{&base, &b}, std::pair{&more, &m}}) {
    for (size_t pos = 0; pos < text->size();) {
      const size_t end = std::min(text->find('\n', pos), text->size());
      lines->push_back(text->substr(pos, end - pos));
      pos = end + 1;
    }
  }
  size_t i = 0;
  for (const std::string& line : m) {
    if (i < b.size() && line == b[i]) ++i;
  }
  return i == b.size() ? m.size() - b.size() : static_cast<size_t>(-1);
}

// The tile templates' kinds of key: mma_tile's decode and prefill tiles, a latent key (two output
// passes), and the wgmma template (sm_90a only).
std::vector<KernelKey> tile_keys() {
  std::vector<KernelKey> keys = {make_key(128, 128, 4, 16, DType::bf16, DType::bf16, {64, 1, 4, 1, 4}),
                                 make_key(96, 96, 2, 1, DType::f16, DType::f16, {64, 4, 1, 2, 2}),
                                 make_key(128, 128, 4, 16, DType::bf16, DType::bf16, {128, 8, 1, 1, 2, true})};
  KernelKey latent = make_key(576, 512, 16, 64, DType::bf16, DType::bf16, {64, 1, 4, 1, 2});
  latent.latent = true;
  keys.push_back(latent);
  return keys;
}

TEST(JitPdl, ArchitecturesFromSm90On) {
  for (const char* arch : {"sm_90", "sm_90a", "sm_100", "sm_100a", "sm_120"}) EXPECT_TRUE(pdl_arch(arch)) << arch;
  for (const char* arch : {"", "sm_80", "sm_86", "sm_89", "compute_90", "sm_"}) EXPECT_FALSE(pdl_arch(arch)) << arch;
}

TEST(JitPdl, Sm90SourcesTriggerAtTheEpilogueAndMergeWaitsBeforeItsReads) {
  for (const KernelKey& k : tile_keys()) {
    const std::string s = render(k, compile_arch(k, "sm_90"));
    EXPECT_EQ(s.find("PDL"), std::string::npos) << k.describe() << ": the blocks are resolved when rendered";
    EXPECT_EQ(count(s, "griddepcontrol.launch_dependents;"), 1u) << k.describe();
    EXPECT_EQ(count(s, "griddepcontrol.wait;"), 1u) << k.describe();
    // attend: the trigger after its mainloop, before the epilogue writes a partial.
    const size_t attend = s.find("attend(const elem*"), merge = s.find("\nmerge(elem*");
    const size_t trigger = s.find("griddepcontrol.launch_dependents;");
    ASSERT_NE(attend, std::string::npos);
    ASSERT_NE(merge, std::string::npos);
    EXPECT_GT(trigger, s.find("for (int j = j_begin; j < j_end; ++j)", attend)) << k.describe();
    EXPECT_LT(trigger, s.find("lse_part[pr] =", attend)) << k.describe();
    EXPECT_LT(trigger, merge) << k.describe();
    // merge: the wait before its first read of a partial (o_part or lse_part).
    const size_t wait = s.find("griddepcontrol.wait;");
    EXPECT_GT(wait, merge) << k.describe();
    EXPECT_LT(wait, s.find("lse_part[", merge)) << k.describe();
    EXPECT_LT(wait, s.find("o_part[", merge)) << k.describe();
    // The source without them, line for line, plus the blocks' few lines (merge's and attend's).
    const size_t extra = extra_lines(render(k), s);
    EXPECT_GE(extra, 4u) << k.describe();
    EXPECT_LE(extra, 10u) << k.describe();
  }
}

TEST(JitPdl, OtherArchitecturesRenderAsBefore) {
  for (const KernelKey& k : tile_keys()) {
    const std::string before = k.tile.wgmma ? render_wgmma_tile(k) : render_mma_tile(k);
    EXPECT_EQ(before.find("griddepcontrol"), std::string::npos) << k.describe();
    EXPECT_EQ(before.find("PDL"), std::string::npos) << k.describe();
    for (const char* arch : {"", "sm_80", "sm_86", "sm_89"}) EXPECT_EQ(render(k, arch), before) << k.describe() << " " << arch;
  }
  // warp_row launches no merge: the same source on every architecture.
  const KernelKey row = make_key(96, 96, 2, 16, DType::bf16, DType::f16);
  EXPECT_EQ(render(row, "sm_90"), render(row));
  EXPECT_EQ(render(row, "sm_90").find("griddepcontrol"), std::string::npos);
}

TEST(JitPdl, Sm90SourcesCompileForSm90a) {
  std::string why;
  const Nvrtc* nvrtc = Nvrtc::get(&why);
  if (!nvrtc) GTEST_SKIP() << why;
  for (const KernelKey& k : tile_keys()) {
    const std::vector<char> cubin = nvrtc->compile_cubin(render(k, "sm_90a"), k.describe(), "sm_90a", {});
    EXPECT_GT(cubin.size(), 1000u) << k.describe();
  }
  // An sm_80 source, which carries none, still compiles for sm_80.
  const KernelKey k = tile_keys().front();
  EXPECT_GT(nvrtc->compile_cubin(render(k, "sm_80"), k.describe(), "sm_80", {}).size(), 1000u);
}

}  // namespace
}  // namespace attnkit::jit
