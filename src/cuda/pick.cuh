// From one runtime value to the compile-time entry of a constexpr list that equals it, and a DType
// to its CUDA element type: how a GPU backend's dispatch turns what its config.h lists into
// template instances, so the list is written once and the dispatch cannot offer more or less.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstddef>
#include <type_traits>
#include <utility>

#include "attnkit/dtype.h"

namespace attnkit::cuda {

template <typename T>
struct TypeTag {
  using type = T;
};

// The CUDA element type of a DType; a backend that reads e4m3 as raw bytes names uint8_t for it.
template <DType, typename E4m3 = __nv_fp8_e4m3>
struct ElementType;
template <typename E4m3>
struct ElementType<DType::f32, E4m3> {
  using type = float;
};
template <typename E4m3>
struct ElementType<DType::bf16, E4m3> {
  using type = __nv_bfloat16;
};
template <typename E4m3>
struct ElementType<DType::f16, E4m3> {
  using type = __half;
};
template <typename E4m3>
struct ElementType<DType::e4m3, E4m3> {
  using type = E4m3;
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
