// How a backend's config.cc words its Support lists in a refusal ("64, 128 or 256"), and the
// membership test its checks use.
#pragma once

#include <algorithm>
#include <string>
#include <type_traits>

#include "attnkit/dtype.h"

namespace attnkit::support {

template <typename List>
std::string list_text(const List& list) {
  std::string s;
  for (size_t i = 0; i < list.size(); ++i) {
    if (i > 0) s += i + 1 == list.size() ? " or " : ", ";
    if constexpr (std::is_same_v<typename List::value_type, DType>) {
      s += dtype_name(list[i]);
    } else {
      s += std::to_string(list[i]);
    }
  }
  return s;
}

template <typename List, typename T>
bool contains(const List& list, T value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

}  // namespace attnkit::support
