// The variant expression language: values computed by hand, C++'s typing (int division, int
// meeting float), the kernel-side text, and the refusals with their exact messages.
#include "core/variant_expr.h"

#include <gtest/gtest.h>

#include <cmath>

#include "attnkit/error.h"

namespace attnkit {
namespace {

VariantInputs at(float score, int q_pos, int kv_pos, int head = 0) {
  VariantInputs in;
  in.score = score;
  in.q_pos = q_pos;
  in.kv_pos = kv_pos;
  in.head = head;
  in.kv_head = head / 4;
  in.request = 1;
  in.q_len = 7;
  in.kv_len = 100;
  return in;
}

float score_of(const std::string& text, const VariantInputs& in) {
  return VariantExpr::parse(text, "score_mod").eval_float(in);
}
bool mask_of(const std::string& text, const VariantInputs& in) {
  return VariantExpr::parse(text, "mask_mod").eval_bool(in);
}

TEST(VariantExpr, AlibiSlopeByHand) {
  // ALiBi with slope 2^-(head + 1): head 2, q 10, kv 4 -> 1.5 - 0.125 * 6 = 0.75.
  EXPECT_FLOAT_EQ(score_of("score - exp2f(-(head + 1)) * (q_pos - kv_pos)", at(1.5f, 10, 4, 2)), 0.75f);
}

TEST(VariantExpr, SoftCapByHand) {
  // 30 * tanh(45 / 30) = 30 * tanh(1.5) = 27.1544...
  EXPECT_NEAR(score_of("30.0f * tanhf(score / 30.0f)", at(45.0f, 0, 0)), 30.0 * std::tanh(1.5), 1e-5);
}

TEST(VariantExpr, IntDivisionTruncatesAsCpp) {
  // Document mask of 64-token documents: 63 / 64 == 0 == 10 / 64; 64 / 64 == 1.
  EXPECT_TRUE(mask_of("kv_pos / 64 == q_pos / 64", at(0, 10, 63)));
  EXPECT_FALSE(mask_of("kv_pos / 64 == q_pos / 64", at(0, 10, 64)));
  EXPECT_EQ(score_of("(q_pos - kv_pos) / 4", at(0, 1, 8)), -1.0f);  // -7 / 4 truncates to -1
  EXPECT_EQ(score_of("(q_pos - kv_pos) % 4", at(0, 1, 8)), -3.0f);
  EXPECT_EQ(score_of("7 / 2 + 0.5f", at(0, 0, 0)), 3.5f);   // int 3, then float
  EXPECT_EQ(score_of("7 / 2.0f", at(0, 0, 0)), 3.5f);
}

TEST(VariantExpr, PrecedenceTernaryAndLogic) {
  EXPECT_EQ(score_of("1 + 2 * 3 - 4 / 2", at(0, 0, 0)), 5.0f);
  EXPECT_EQ(score_of("q_pos >= kv_pos ? score : -1000.0f", at(2.0f, 3, 5)), -1000.0f);
  EXPECT_EQ(score_of("q_pos >= kv_pos ? score : -1000.0f", at(2.0f, 5, 5)), 2.0f);
  // Prefix-LM: the first 16 positions see each other; after that, causal.
  const std::string prefix_lm = "kv_pos < 16 || kv_pos <= q_pos";
  EXPECT_TRUE(mask_of(prefix_lm, at(0, 3, 12)));
  EXPECT_FALSE(mask_of(prefix_lm, at(0, 20, 21)));
  EXPECT_TRUE(mask_of("!(head == 3) && request == 1", at(0, 0, 0, 2)));
  EXPECT_EQ(score_of("min(q_pos, kv_pos) + max(3, 4) + abs(-2)", at(0, 9, 5)), 11.0f);
  EXPECT_EQ(score_of("fminf(score, 1.0f) + fabsf(-0.25f)", at(3.0f, 0, 0)), 1.25f);
  EXPECT_EQ(score_of("q_len + kv_len + kv_head", at(0, 0, 0, 9)), 109.0f);
}

TEST(VariantExpr, KernelTextIsTypedAndParenthesised) {
  EXPECT_EQ(VariantExpr::parse("score - 0.5 * (q_pos - kv_pos)", "s").cuda_source(),
            "(score - (0.5f * ((float)(q_pos - kv_pos))))");
  EXPECT_EQ(VariantExpr::parse("kv_pos / 64 == q_pos / 64", "m").cuda_source(), "((kv_pos / 64) == (q_pos / 64))");
  EXPECT_EQ(VariantExpr::parse("min(score, 2)", "s").cuda_source(), "fminf(score, ((float)2))");
  EXPECT_EQ(VariantExpr::parse("abs(q_pos - kv_pos) < 8", "m").cuda_source(), "(abs((q_pos - kv_pos)) < 8)");
  EXPECT_EQ(VariantExpr::parse("q_pos > 3 ? 1 : 0.5f", "s").cuda_source(), "((q_pos > 3) ? ((float)1) : 0.5f)");
  EXPECT_EQ(VariantExpr::parse("2", "s").cuda_source(), "2");
  EXPECT_EQ(VariantExpr::parse("1e-3f + 3.", "s").cuda_source(), "(0.00100000005f + 3.0f)");
}

TEST(VariantExpr, ReadsScore) {
  EXPECT_TRUE(VariantExpr::parse("score * 2.0f", "s").reads_score());
  EXPECT_FALSE(VariantExpr::parse("kv_pos <= q_pos", "m").reads_score());
}

void expect_refused(const std::string& text, const std::string& message) {
  try {
    VariantExpr::parse(text, "mask_mod");
    FAIL() << "expected an error for '" << text << "'";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST(VariantExpr, RefusalsNameTheColumnAndWhatWasExpected) {
  expect_refused("", "mask_mod: the expression is empty at column 1 of ''");
  expect_refused("kv_pos <= qpos",
                 "mask_mod: unknown name 'qpos' (variables: score q_pos kv_pos head kv_head request q_len kv_len) at "
                 "column 11 of 'kv_pos <= qpos'");
  expect_refused("sin(score)",
                 "mask_mod: unknown function 'sin' (functions: expf logf exp2f log2f sqrtf tanhf fabsf floorf fminf "
                 "fmaxf min max abs) at column 1 of 'sin(score)'");
  expect_refused("kv_pos <= ", "mask_mod: expected an operand, the expression ends at column 11 of 'kv_pos <= '");
  expect_refused("(kv_pos", "mask_mod: expected ')' at column 8 of '(kv_pos'");
  expect_refused("kv_pos = q_pos", "mask_mod: unexpected '=' after a complete expression at column 8 of 'kv_pos = q_pos'");
  expect_refused("score % 2", "mask_mod: '%' needs int operands (use floorf for floats) at column 10 of 'score % 2'");
  expect_refused("0x10 > kv_pos", "mask_mod: '0x10' is not a decimal number at column 1 of '0x10 > kv_pos'");
  expect_refused("q_pos; kv_pos", "mask_mod: unexpected ';' after a complete expression at column 6 of 'q_pos; kv_pos'");
  expect_refused("fmaxf(score)", "mask_mod: expected ',' at column 12 of 'fmaxf(score)'");
}

TEST(VariantExpr, IntDivisionByZeroIsAnError) {
  const VariantExpr e = VariantExpr::parse("q_pos / (kv_pos - 4)", "score_mod");
  EXPECT_THROW(e.eval_float(at(0, 1, 4)), Error);
  EXPECT_EQ(e.eval_float(at(0, 8, 6)), 4.0f);
}

}  // namespace
}  // namespace attnkit
