// The variant expression parser: recursive descent over C++'s precedence levels, typing each node
// (int or float) as C++ would.
#include <cctype>
#include <cstdlib>

#include "attnkit/error.h"
#include "core/variant_expr_node.h"

namespace attnkit {

using namespace variant_expr_detail;

namespace {

class Parser {
 public:
  Parser(const std::string& text, const std::string& what) : text_(text), what_(what) {}

  std::unique_ptr<VariantExpr::Node> parse_all(bool* reads_score) {
    skip_space();
    if (pos_ == text_.size()) fail("the expression is empty");
    auto node = ternary();
    skip_space();
    if (pos_ != text_.size()) fail(detail::concat("unexpected '", text_[pos_], "' after a complete expression"));
    *reads_score = reads_score_;
    return node;
  }

 private:
  using NodePtr = std::unique_ptr<VariantExpr::Node>;

  [[noreturn]] void fail(const std::string& why) const {
    throw Error(detail::concat(what_, ": ", why, " at column ", pos_ + 1, " of '", text_, "'"));
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool accept(const char* op) {
    skip_space();
    const size_t n = std::char_traits<char>::length(op);
    if (text_.compare(pos_, n, op) != 0) return false;
    // "<" must not take the first half of "<=", "&" is not "&&", "=" alone is no operator.
    if (n == 1 && pos_ + 1 < text_.size()) {
      const char next = text_[pos_ + 1];
      if ((op[0] == '<' || op[0] == '>' || op[0] == '!') && next == '=') return false;
    }
    pos_ += n;
    return true;
  }
  void expect(const char* op) {
    if (!accept(op)) fail(detail::concat("expected '", op, "'"));
  }

  static NodePtr make(VariantExpr::Node::Kind kind, Type type) {
    auto n = std::make_unique<VariantExpr::Node>();
    n->kind = kind;
    n->type = type;
    return n;
  }
  NodePtr binary(const std::string& op, NodePtr a, NodePtr b) {
    const bool logical = op == "||" || op == "&&" || op == "==" || op == "!=" || op == "<" || op == "<=" ||
                         op == ">" || op == ">=";
    const bool any_float = a->type == Type::f32 || b->type == Type::f32;
    if (op == "%" && any_float) fail("'%' needs int operands (use floorf for floats)");
    auto n = make(VariantExpr::Node::Kind::binary, logical ? Type::i32 : (any_float ? Type::f32 : Type::i32));
    n->op = op;
    n->args.push_back(std::move(a));
    n->args.push_back(std::move(b));
    return n;
  }

  NodePtr ternary() {
    NodePtr cond = binary_level(0);
    if (!accept("?")) return cond;
    NodePtr a = ternary();
    expect(":");
    NodePtr b = ternary();
    auto n = make(VariantExpr::Node::Kind::ternary, a->type == Type::f32 || b->type == Type::f32 ? Type::f32 : Type::i32);
    n->args.push_back(std::move(cond));
    n->args.push_back(std::move(a));
    n->args.push_back(std::move(b));
    return n;
  }
  // The binary operators by C++ precedence, loosest first; each level is left-associative.
  // Within a level the longer spelling comes first ("<=" before "<").
  static constexpr const char* kLevels[][4] = {
      {"||"}, {"&&"}, {"==", "!="}, {"<=", ">=", "<", ">"}, {"+", "-"}, {"*", "/", "%"}};
  static constexpr int kNumLevels = sizeof(kLevels) / sizeof(kLevels[0]);

  NodePtr binary_level(int level) {
    if (level == kNumLevels) return unary();
    NodePtr n = binary_level(level + 1);
    for (;;) {
      const char* matched = nullptr;
      for (const char* op : kLevels[level]) {
        if (op != nullptr && accept(op)) {
          matched = op;
          break;
        }
      }
      if (matched == nullptr) return n;
      n = binary(matched, std::move(n), binary_level(level + 1));
    }
  }
  NodePtr unary() {
    for (const char* op : {"-", "!", "+"}) {
      if (accept(op)) {
        NodePtr a = unary();
        if (op[0] == '+') return a;
        auto n = make(VariantExpr::Node::Kind::unary, op[0] == '!' ? Type::i32 : a->type);
        n->op = op;
        n->args.push_back(std::move(a));
        return n;
      }
    }
    return primary();
  }
  NodePtr primary() {
    skip_space();
    if (pos_ == text_.size()) fail("expected an operand, the expression ends");
    const char c = text_[pos_];
    if (c == '(') {
      ++pos_;
      NodePtr n = ternary();
      expect(")");
      return n;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') return number();
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') return name();
    fail(detail::concat("expected an operand, got '", c, "'"));
  }
  NodePtr number() {
    const size_t start = pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '.' ||
                                   ((text_[pos_] == '-' || text_[pos_] == '+') && (text_[pos_ - 1] == 'e' || text_[pos_ - 1] == 'E')))) {
      ++pos_;
    }
    std::string tok = text_.substr(start, pos_ - start);
    for (char ch : tok) {
      if (std::isalpha(static_cast<unsigned char>(ch)) && std::string("eEfF").find(ch) == std::string::npos) {
        pos_ = start;
        fail(detail::concat("'", tok, "' is not a decimal number"));
      }
    }
    const bool is_float = tok.find_first_of(".eEfF") != std::string::npos;
    if (is_float) {
      if (tok.back() == 'f' || tok.back() == 'F') tok.pop_back();
      char* end = nullptr;
      const float v = std::strtof(tok.c_str(), &end);
      if (end != tok.c_str() + tok.size() || tok.empty()) { pos_ = start; fail(detail::concat("'", text_.substr(start, pos_ - start), "' is not a number")); }
      auto n = make(VariantExpr::Node::Kind::literal, Type::f32);
      n->literal = float_value(v);
      return n;
    }
    char* end = nullptr;
    const long long v = std::strtoll(tok.c_str(), &end, 10);
    if (end != tok.c_str() + tok.size() || v > INT32_MAX) {
      pos_ = start;
      fail(detail::concat("'", tok, "' is not an int literal (decimal, at most 2147483647)"));
    }
    auto n = make(VariantExpr::Node::Kind::literal, Type::i32);
    n->literal = int_value(v);
    return n;
  }
  NodePtr name() {
    const size_t start = pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) ++pos_;
    const std::string id = text_.substr(start, pos_ - start);
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == '(') {
      const Function* f = find_function(id);
      if (f == nullptr) {
        pos_ = start;
        fail(detail::concat("unknown function '", id, "' (functions: expf logf exp2f log2f sqrtf tanhf fabsf floorf fminf fmaxf min max abs)"));
      }
      ++pos_;
      std::vector<NodePtr> args;
      for (int a = 0; a < f->args; ++a) {
        if (a > 0) expect(",");
        args.push_back(ternary());
      }
      expect(")");
      bool any_float = f->float_only;
      for (const auto& a : args) any_float = any_float || a->type == Type::f32;
      auto n = make(VariantExpr::Node::Kind::call, any_float ? Type::f32 : Type::i32);
      n->function = f;
      n->op = id;
      n->args = std::move(args);
      return n;
    }
    const auto& vars = variant_variables();
    for (size_t v = 0; v < vars.size(); ++v) {
      if (vars[v] == id) {
        auto n = make(VariantExpr::Node::Kind::variable, v == 0 ? Type::f32 : Type::i32);
        n->variable = static_cast<int>(v);
        reads_score_ = reads_score_ || v == 0;
        return n;
      }
    }
    pos_ = start;
    fail(detail::concat("unknown name '", id, "' (variables: score q_pos kv_pos head kv_head request q_len kv_len)"));
  }

  const std::string& text_;
  const std::string& what_;
  size_t pos_ = 0;
  bool reads_score_ = false;
};

}  // namespace

VariantExpr VariantExpr::parse(const std::string& text, const std::string& what) {
  VariantExpr e;
  e.text_ = text;
  Parser parser(e.text_, what);
  e.root_ = parser.parse_all(&e.reads_score_);
  return e;
}

}  // namespace attnkit
