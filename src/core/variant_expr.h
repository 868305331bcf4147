// User-defined attention variants: a score modifier and a mask predicate written as one C++
// expression each, e.g. ALiBi `score - 0.0625f * (q_pos - kv_pos)` or a document mask
// `kv_pos / 512 == q_pos / 512`. The same text is pasted into the kernel source (compiled by NVRTC)
// and evaluated here on the host for `reference`, so both sides compute the same thing. To keep
// that true, an expression must lie in the subset this parser accepts, with C++'s own rules:
//   literals   int (42) and float (0.5f, 1e-3f, 2.0; a float literal without f is still float:
//              the kernels compute in 32-bit float, and so does the evaluator)
//   variables  score (float) and the ints q_pos, kv_pos, head, kv_head, request, q_len, kv_len
//   operators  ?: || && == != < <= > >= + - * / % unary - ! and parentheses; int / and % truncate
//              as in C++, an int meeting a float becomes float
//   functions  expf logf exp2f log2f sqrtf tanhf fabsf floorf (float), fminf fmaxf (two floats),
//              min max abs (on ints or floats, as their CUDA overloads)
// Anything else is refused with attnkit::Error naming the column and what was expected.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace attnkit {

// What an expression may read at one (query row, key) pair.
struct VariantInputs {
  float score = 0.0f;  // the scaled logit (score_mod); 0 in a mask
  int32_t q_pos = 0;   // the query token's position in its sequence (prefix + index)
  int32_t kv_pos = 0;  // the key's position
  int32_t head = 0;    // query head
  int32_t kv_head = 0;
  int32_t request = 0;  // the request's index in the batch
  int32_t q_len = 0;    // the request's new tokens
  int32_t kv_len = 0;   // its KV length (prefix + new)
};

// A parsed expression. Evaluation follows C++: an int result of a score modifier becomes float,
// a mask is true where the value is non-zero.
class VariantExpr {
 public:
  // `what` names the expression in errors ("score_mod"). Throws attnkit::Error on bad input.
  static VariantExpr parse(const std::string& text, const std::string& what);
  VariantExpr(VariantExpr&&) noexcept;
  VariantExpr& operator=(VariantExpr&&) noexcept;
  ~VariantExpr();

  float eval_float(const VariantInputs& in) const;
  bool eval_bool(const VariantInputs& in) const;
  // Whether the text reads `score` (a mask must not: it is applied before scores exist).
  bool reads_score() const { return reads_score_; }
  const std::string& text() const { return text_; }
  // The expression as the kernel source writes it: fully parenthesised, every float literal with
  // its f suffix, min/max/abs resolved to the int or float function; what NVRTC compiles is what
  // eval_* compute.
  std::string cuda_source() const;

  struct Node;

 private:
  VariantExpr() = default;
  std::string text_;
  std::unique_ptr<Node> root_;
  bool reads_score_ = false;
};

// The variables an expression may name, in the order documented above.
const std::vector<std::string>& variant_variables();

}  // namespace attnkit
