// The parsed form of a variant expression (variant_expr.h), shared by the parser
// (variant_expr_parse.cc) and the evaluator and printer (variant_expr.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/variant_expr.h"

namespace attnkit::variant_expr_detail {

enum class Type { i32, f32 };

struct Value {
  Type type = Type::i32;
  int32_t i = 0;
  float f = 0.0f;
  float as_float() const { return type == Type::f32 ? f : static_cast<float>(i); }
  bool truthy() const { return type == Type::f32 ? f != 0.0f : i != 0; }
};

inline Value int_value(int64_t v) { return Value{Type::i32, static_cast<int32_t>(static_cast<uint32_t>(v)), 0.0f}; }
inline Value float_value(float v) { return Value{Type::f32, 0, v}; }

// Wrapping 32-bit arithmetic, as the GPU computes it.
inline int32_t wrap(int64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v))); }

struct Function {
  const char* name;
  int args;
  bool float_only;  // else overloaded on int and float
  const char* float_name;
  const char* int_name;
};

inline constexpr Function kFunctions[] = {
    {"expf", 1, true, "expf", nullptr},     {"logf", 1, true, "logf", nullptr},
    {"exp2f", 1, true, "exp2f", nullptr},   {"log2f", 1, true, "log2f", nullptr},
    {"sqrtf", 1, true, "sqrtf", nullptr},   {"tanhf", 1, true, "tanhf", nullptr},
    {"fabsf", 1, true, "fabsf", nullptr},   {"floorf", 1, true, "floorf", nullptr},
    {"fminf", 2, true, "fminf", nullptr},   {"fmaxf", 2, true, "fmaxf", nullptr},
    {"min", 2, false, "fminf", "min"},      {"max", 2, false, "fmaxf", "max"},
    {"abs", 1, false, "fabsf", "abs"},
};

inline const Function* find_function(const std::string& name) {
  for (const Function& f : kFunctions) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

}  // namespace attnkit::variant_expr_detail

namespace attnkit {

struct VariantExpr::Node {
  enum class Kind { literal, variable, unary, binary, ternary, call };
  Kind kind = Kind::literal;
  variant_expr_detail::Type type = variant_expr_detail::Type::i32;
  variant_expr_detail::Value literal;
  int variable = 0;  // index into variant_variables()
  std::string op;    // unary / binary operator, or the function's name
  const variant_expr_detail::Function* function = nullptr;
  std::vector<std::unique_ptr<Node>> args;

  variant_expr_detail::Value eval(const VariantInputs& in) const;
  std::string cuda() const;
};

}  // namespace attnkit
