// Readable names for parametrised tests: a case's label as a GoogleTest name ("gqa4 d128 window 20"
// -> "gqa4_d128_window_20"), so that a list of skipped or failed cases says which case each is.
#pragma once

#include <cctype>
#include <string>

namespace attnkit::testing {

inline std::string param_name(std::string text) {
  std::string name;
  for (char ch : text) {
    const bool keep = std::isalnum(static_cast<unsigned char>(ch)) != 0;
    if (keep) name += ch;
    else if (!name.empty() && name.back() != '_') name += '_';
  }
  while (!name.empty() && name.back() == '_') name.pop_back();
  return name.empty() ? "case" : name;
}

}  // namespace attnkit::testing
