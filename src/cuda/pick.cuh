// From one runtime value to the compile-time entry of a constexpr list that equals it: how a GPU
// backend's dispatch turns what its config.h lists into template instances, so the list is written
// once and the dispatch cannot offer more or less than it.
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

namespace attnkit::cuda {

template <typename T>
struct TypeTag {
  using type = T;
};

namespace pick_detail {
template <const auto& kList, typename Fn, size_t... I>
bool pick(auto value, Fn&& fn, std::index_sequence<I...>) {
  using V = std::remove_cvref_t<decltype(kList[0])>;
  return ((value == kList[I] ? (fn(std::integral_constant<V, kList[I]>{}), true) : false) || ...);
}
}  // namespace pick_detail

// Calls fn(std::integral_constant<V, kList[i]>{}) for the i with kList[i] == value; false if none.
template <const auto& kList, typename Fn>
bool pick(auto value, Fn&& fn) {
  return pick_detail::pick<kList>(value, fn, std::make_index_sequence<kList.size()>{});
}

}  // namespace attnkit::cuda
