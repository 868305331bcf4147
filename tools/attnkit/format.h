// Small text helpers shared by the subcommands: fixed-width tables and human units.
#pragma once

#include <string>
#include <vector>

namespace attnkit::tool {

// Prints rows as columns padded to their widest cell; the first row is the header.
void print_table(const std::vector<std::vector<std::string>>& rows);
// 1.23e12, "B/s" -> "1.23 TB/s" (SI prefixes), with `digits` digits after the point; 0, "B" -> "0.00 B".
std::string si(double value, const std::string& unit = "", int digits = 2);
std::string fixed(double value, int digits);

}  // namespace attnkit::tool
