// The `cpu` backend against `reference` once per SIMD target this build compiled and this CPU
// runs (attnkit/cpu_target.h), so an AVX-512 machine also checks the AVX2, SSE4 and portable code.
#include <gtest/gtest.h>

#include <iostream>

#include "attnkit/cpu_target.h"
#include "attnkit/error.h"
#include "backends/cpu/cpu_cases.h"
#include "harness/check.h"

namespace attnkit {
namespace {

// Puts the best target back whatever the test does.
struct TargetGuard {
  ~TargetGuard() { set_cpu_target(""); }
};

void every_target_matches_reference(const std::vector<harness::CheckCase>& cases) {
  const TargetGuard guard;
  const std::vector<std::string> targets = cpu_targets();
  ASSERT_FALSE(targets.empty());
  for (const std::string& target : targets) {
    set_cpu_target(target);
    ASSERT_EQ(cpu_target(), target);
    std::cout << "[ target ] " << target << std::endl;
    for (const harness::CheckCase& c : cases) {
      const harness::CheckResult r = harness::run_check("cpu", c);
      ASSERT_TRUE(r.skipped.empty()) << target << ", " << c.label << ": " << r.skipped;
      EXPECT_TRUE(r.passed) << target << ", " << c.label << ": rel error " << r.rel_err << " > " << r.tolerance
                            << "; " << r.message;
    }
  }
}

TEST(CpuTargets, EveryRunnableTargetMatchesReference) { every_target_matches_reference(cpu_test::cpu_cases()); }

// The same on small cases: what an emulated CPU (qemu-aarch64) runs for each of its targets.
TEST(CpuTargets, EveryRunnableTargetMatchesReferenceOnSmallCases) {
  every_target_matches_reference(cpu_test::cpu_small_cases());
}

TEST(CpuTargets, BadNameListsTheTargets) {
  const TargetGuard guard;
  try {
    set_cpu_target("no-such-target");
    FAIL() << "no error for an unknown target";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("no-such-target"), std::string::npos) << message;
    EXPECT_NE(message.find(cpu_targets().front()), std::string::npos) << message;
  }
  set_cpu_target("best");
  EXPECT_EQ(cpu_target(), cpu_targets().front());
}

}  // namespace
}  // namespace attnkit
