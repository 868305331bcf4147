// Small text helpers shared by the subcommands: fixed-width tables and human units.
#pragma once

#include <string>
#include <vector>

namespace attnkit::tool {

// Prints rows as columns padded to their widest cell; the first row is the header.
void print_table(const std::vector<std::vector<std::string>>& rows);
// 1.23e12 -> "1.23 T" (SI prefixes), with `digits` significant digits after the point.
std::string si(double value, int digits = 2);
std::string fixed(double value, int digits);

}  // namespace attnkit::tool
