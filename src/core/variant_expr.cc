// The variant expression's evaluator (reference's side) and its printer (the kernel's side).
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <string_view>

#include "attnkit/error.h"
#include "core/variant_expr_node.h"

namespace attnkit {

using namespace variant_expr_detail;

const std::vector<std::string>& variant_variables() {
  static const std::vector<std::string> names = {"score", "q_pos", "kv_pos", "head", "kv_head", "request", "q_len", "kv_len"};
  return names;
}

namespace {

std::string float_literal(float v) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.9g", static_cast<double>(v));
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // n: inf / nan never occur in literals
  return s + "f";
}

int32_t variable_value(int v, const VariantInputs& in) {
  switch (v) {
    case 1: return in.q_pos;
    case 2: return in.kv_pos;
    case 3: return in.head;
    case 4: return in.kv_head;
    case 5: return in.request;
    case 6: return in.q_len;
    default: return in.kv_len;
  }
}

// A comparison operator (the parser admits no other at this point) on two floats or two ints.
template <typename T>
Value compare(const std::string& op, T x, T y) {
  if (op == "==") return int_value(x == y);
  if (op == "!=") return int_value(x != y);
  if (op == "<") return int_value(x < y);
  if (op == "<=") return int_value(x <= y);
  if (op == ">") return int_value(x > y);
  return int_value(x >= y);
}

}  // namespace

Value VariantExpr::Node::eval(const VariantInputs& in) const {
  switch (kind) {
    case Kind::literal: return literal;
    case Kind::variable: return variable == 0 ? float_value(in.score) : int_value(variable_value(variable, in));
    case Kind::unary: {
      const Value a = args[0]->eval(in);
      if (op == "!") return int_value(!a.truthy());
      return a.type == Type::f32 ? float_value(-a.f) : int_value(wrap(-int64_t{a.i}));
    }
    case Kind::ternary: {
      const Value v = args[0]->eval(in).truthy() ? args[1]->eval(in) : args[2]->eval(in);
      return type == Type::f32 ? float_value(v.as_float()) : v;
    }
    case Kind::call: {
      std::vector<Value> v;
      for (const auto& a : args) v.push_back(a->eval(in));
      if (type == Type::i32) {  // min, max, abs on ints
        if (op == "abs") return int_value(wrap(v[0].i < 0 ? -int64_t{v[0].i} : v[0].i));
        return int_value(op == "min" ? std::min(v[0].i, v[1].i) : std::max(v[0].i, v[1].i));
      }
      const float x = v[0].as_float();
      const std::string f = function->float_name;
      if (f == "expf") return float_value(std::exp(x));
      if (f == "logf") return float_value(std::log(x));
      if (f == "exp2f") return float_value(std::exp2(x));
      if (f == "log2f") return float_value(std::log2(x));
      if (f == "sqrtf") return float_value(std::sqrt(x));
      if (f == "tanhf") return float_value(std::tanh(x));
      if (f == "fabsf") return float_value(std::fabs(x));
      if (f == "floorf") return float_value(std::floor(x));
      if (f == "fminf") return float_value(std::fmin(x, v[1].as_float()));
      return float_value(std::fmax(x, v[1].as_float()));
    }
    case Kind::binary: break;
  }
  if (op == "&&") return int_value(args[0]->eval(in).truthy() && args[1]->eval(in).truthy());
  if (op == "||") return int_value(args[0]->eval(in).truthy() || args[1]->eval(in).truthy());
  const Value a = args[0]->eval(in);
  const Value b = args[1]->eval(in);
  if (a.type == Type::f32 || b.type == Type::f32) {
    const float x = a.as_float(), y = b.as_float();
    if (op == "+") return float_value(x + y);
    if (op == "-") return float_value(x - y);
    if (op == "*") return float_value(x * y);
    if (op == "/") return float_value(x / y);
    return compare(op, x, y);
  }
  const int64_t x = a.i, y = b.i;
  if (op == "+") return int_value(wrap(x + y));
  if (op == "-") return int_value(wrap(x - y));
  if (op == "*") return int_value(wrap(x * y));
  if (op == "/" || op == "%") {
    ATTNKIT_CHECK(y != 0, "variant expression: integer ", op == "/" ? "division" : "remainder", " by zero (q_pos ", in.q_pos,
                  ", kv_pos ", in.kv_pos, ", head ", in.head, ")");
    return int_value(wrap(op == "/" ? x / y : x % y));  // truncates toward zero, as C++
  }
  return compare(op, x, y);
}

namespace {

std::string join(std::initializer_list<std::string_view> parts) {
  std::string s;
  for (std::string_view p : parts) s.append(p);
  return s;
}

}  // namespace

std::string VariantExpr::Node::cuda() const {
  // An int operand of a float operation is converted explicitly, so the kernel's text computes
  // exactly what eval() does (C++'s conversions would agree; the casts make them visible).
  auto as_float_if = [](bool convert, const Node& a) {
    return convert && a.type == Type::i32 ? join({"((float)", a.cuda(), ")"}) : a.cuda();
  };
  switch (kind) {
    case Kind::literal: return literal.type == Type::f32 ? float_literal(literal.f) : std::to_string(literal.i);
    case Kind::variable: return variant_variables()[static_cast<size_t>(variable)];
    case Kind::unary: return join({"(", op, args[0]->cuda(), ")"});
    case Kind::ternary: {
      const bool f = type == Type::f32;
      return join({"(", args[0]->cuda(), " ? ", as_float_if(f, *args[1]), " : ", as_float_if(f, *args[2]), ")"});
    }
    case Kind::call: {
      std::string s = type == Type::f32 ? function->float_name : function->int_name;
      s += "(";
      for (size_t i = 0; i < args.size(); ++i) {
        if (i) s += ", ";
        s += as_float_if(type == Type::f32, *args[i]);
      }
      return s + ")";
    }
    case Kind::binary: {
      const bool logical = op == "&&" || op == "||";
      const bool f = !logical && (args[0]->type == Type::f32 || args[1]->type == Type::f32);
      return join({"(", as_float_if(f, *args[0]), " ", op, " ", as_float_if(f, *args[1]), ")"});
    }
  }
  return {};
}

VariantExpr::VariantExpr(VariantExpr&&) noexcept = default;
VariantExpr& VariantExpr::operator=(VariantExpr&&) noexcept = default;
VariantExpr::~VariantExpr() = default;

float VariantExpr::eval_float(const VariantInputs& in) const { return root_->eval(in).as_float(); }
bool VariantExpr::eval_bool(const VariantInputs& in) const { return root_->eval(in).truthy(); }
std::string VariantExpr::cuda_source() const { return root_->cuda(); }

}  // namespace attnkit
