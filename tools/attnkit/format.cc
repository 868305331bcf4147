// Table and number formatting for the tool's output.
#include "format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

namespace attnkit::tool {

void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    std::cout << line << '\n';
  }
}

std::string fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

std::string si(double value, const std::string& unit, int digits) {
  static const char* const kPrefix[] = {"", "k", "M", "G", "T", "P"};
  int i = 0;
  double v = value;
  while (std::fabs(v) >= 1000.0 && i < 5) {
    v /= 1000.0;
    ++i;
  }
  const std::string suffix = kPrefix[i] + unit;
  return fixed(v, digits) + (suffix.empty() ? "" : " " + suffix);
}

}  // namespace attnkit::tool
