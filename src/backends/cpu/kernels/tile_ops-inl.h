// Per-target SIMD building blocks shared by the rows and heads kernels (Highway, compiled once per
// target): loading any KV dtype as f32 in registers (bf16 as even/odd pairs), converting rows, prefetch, soft-cap.
// Include guard in Highway's per-target form: this file is re-read for every target.
#if defined(ATTNKIT_CPU_TILE_OPS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNKIT_CPU_TILE_OPS_INL_H_
#undef ATTNKIT_CPU_TILE_OPS_INL_H_
#else
#define ATTNKIT_CPU_TILE_OPS_INL_H_
#endif

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "attnkit/dtype.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Arrays of vectors, for the micro-kernels' accumulators and operands: VecArray<N> a; a[i] = v;
// VecGrid<A, B> g; g[i][j] = v. Plain arrays of VF, except on SVE, whose vector types are sizeless
// and form no arrays: there each element is a vector's worth of floats in memory, read and written
// through a reference (VF(a[i]) where a template wants a vector).
#if HWY_TARGET == HWY_SVE || HWY_TARGET == HWY_SVE2 || HWY_TARGET == HWY_SVE_256 || HWY_TARGET == HWY_SVE2_128
class VecRef {
 public:
  explicit VecRef(float* p) : p_(p) {}
  operator VF() const { return hn::LoadU(DF(), p_); }  // NOLINT: a vector where one is wanted
  VecRef& operator=(VF v) {
    hn::StoreU(v, DF(), p_);
    return *this;
  }
  VecRef& operator=(const VecRef& r) { return *this = VF(r); }

 private:
  float* p_;
};

template <int N>
class VecArray {
 public:
  VecRef operator[](int i) { return VecRef(buf_ + i * hn::Lanes(DF())); }

 private:
  float buf_[N * (HWY_MAX_BYTES / sizeof(float))];
};

template <int A, int B>
class VecGrid {
 public:
  VecArray<B>& operator[](int i) { return rows_[i]; }

 private:
  VecArray<B> rows_[A];
};
#else
template <int N>
using VecArray = VF[N];
template <int A, int B>
using VecGrid = VF[A][B];
#endif

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// e4m3 magnitude bits placed at an f32's exponent/mantissa position read 2^120 too small (exponent
// bias 127 against 7): one exact multiply restores the value, e4m3 subnormals included.
constexpr float kE4m3Rescale = 0x1p120f;

// The cache's e4m3 bytes, a distinct type so overloads pick the right conversion.
struct E4m3 {
  uint8_t bits;
};

// ---- One vector of f32 from Lanes(d) stored elements (any position; no alignment needed).
HWY_INLINE VF load_f32(DF d, const float* HWY_RESTRICT p) { return hn::LoadU(d, p); }

HWY_INLINE VF load_f32(DF d, const hwy::bfloat16_t* HWY_RESTRICT p) {
  return hn::PromoteTo(d, hn::LoadU(hn::Rebind<hwy::bfloat16_t, DF>(), p));
}

HWY_INLINE VF load_f32(DF d, const hwy::float16_t* HWY_RESTRICT p) {
  return hn::PromoteTo(d, hn::LoadU(hn::Rebind<hwy::float16_t, DF>(), p));
}

HWY_INLINE VF load_f32(DF d, const E4m3* HWY_RESTRICT p) {
  const hn::RebindToUnsigned<DF> du;
  const auto bits = hn::PromoteTo(du, hn::LoadU(hn::Rebind<uint8_t, DF>(), reinterpret_cast<const uint8_t*>(p)));
  const auto magnitude = hn::BitCast(d, hn::ShiftLeft<20>(hn::And(bits, hn::Set(du, 0x7Fu))));
  const auto sign = hn::BitCast(d, hn::ShiftLeft<24>(hn::And(bits, hn::Set(du, 0x80u))));
  return hn::Or(hn::Mul(magnitude, hn::Set(d, kE4m3Rescale)), sign);
}

// ---- Two vectors from 2 * Lanes(d) stored elements. bf16 comes in even/odd order: one 32-bit
// load holds elements 2i (low half) and 2i+1 (high half), so a shift and a mask widen both, half
// the work of promoting each half in order. Dot products do not care about the order when q is
// permuted alike (permute_pairs), and an output accumulated in that order is put back once.
template <typename T>
HWY_INLINE void load_pair(DF d, const T* HWY_RESTRICT p, VF& first, VF& second) {
  first = load_f32(d, p);
  second = load_f32(d, p + hn::Lanes(d));
}

HWY_INLINE void load_pair(DF d, const hwy::bfloat16_t* HWY_RESTRICT p, VF& even, VF& odd) {
  const hn::RebindToUnsigned<DF> du;
  const auto raw = hn::LoadU(du, reinterpret_cast<const uint32_t*>(p));
  even = hn::BitCast(d, hn::ShiftLeft<16>(raw));
  odd = hn::BitCast(d, hn::And(raw, hn::Set(du, 0xFFFF0000u)));
}

#if HWY_TARGET == HWY_SVE || HWY_TARGET == HWY_SVE2 || HWY_TARGET == HWY_SVE_256 || HWY_TARGET == HWY_SVE2_128
template <typename T>
HWY_INLINE void load_pair(DF d, const T* HWY_RESTRICT p, VecRef first, VecRef second) {
  VF a, b;
  load_pair(d, p, a, b);
  first = a;
  second = b;
}
#endif

template <typename T>
constexpr bool kPairsInterleaved = std::is_same_v<T, hwy::bfloat16_t>;

// x[0, n) (n a multiple of 2 * lanes) from natural order to load_pair's order for T, or back.
template <typename T>
HWY_INLINE void permute_pairs(float* HWY_RESTRICT x, int n, float* HWY_RESTRICT tmp, bool to_pairs) {
  if (!kPairsInterleaved<T>) return;
  const int lanes = static_cast<int>(hn::Lanes(DF()));
  for (int b = 0; b < n; b += 2 * lanes) {
    for (int i = 0; i < 2 * lanes; ++i) tmp[i] = x[b + i];
    for (int i = 0; i < lanes; ++i) {
      if (to_pairs) {
        x[b + i] = tmp[2 * i];
        x[b + lanes + i] = tmp[2 * i + 1];
      } else {
        x[b + 2 * i] = tmp[i];
        x[b + 2 * i + 1] = tmp[lanes + i];
      }
    }
  }
}

// ---- The same conversions for one element (row tails).
HWY_INLINE float scalar_f32(float x) { return x; }
HWY_INLINE float scalar_f32(hwy::bfloat16_t x) { return bf16_bits_to_float(x.bits); }
HWY_INLINE float scalar_f32(hwy::float16_t x) {
  uint16_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return f16_bits_to_float(bits);
}
// The e4m3 value itself, as load_f32 gives it (its NaN excepted, which stores never write); the
// cache's k_scale / v_scale are applied elsewhere.
HWY_INLINE float scalar_f32(E4m3 x) {
  const float v = e4m3_bits_to_float(static_cast<uint8_t>(x.bits & 0x7F));
  return (x.bits & 0x80) ? -v : v;
}

// dst[0, n) = src[0, n) as f32, times `scale`; dst[n, n_pad) = 0.
template <typename T>
HWY_INLINE void convert_row(const T* HWY_RESTRICT src, int n, float scale, float* HWY_RESTRICT dst, int n_pad) {
  const DF d;
  const int lanes = static_cast<int>(hn::Lanes(d));
  const VF vscale = hn::Set(d, scale);
  int e = 0;
  for (; e + lanes <= n; e += lanes) hn::StoreU(hn::Mul(load_f32(d, src + e), vscale), d, dst + e);
  for (; e < n; ++e) dst[e] = scalar_f32(src[e]) * scale;
  for (; e < n_pad; ++e) dst[e] = 0.0f;
}

// Asks for n elements from p into L2 (not L1: the tiles being computed live there). Used by the
// heads kernel, whose key rows are too scattered for the hardware prefetcher.
template <typename T>
HWY_INLINE void prefetch_row(const T* p, int n) {
  const char* c = reinterpret_cast<const char*>(p);
  for (size_t off = 0; off < sizeof(T) * n; off += 64) __builtin_prefetch(c + off, 0, 1);
}

// x = cap * tanh(x / cap) over n floats (n a multiple of the lanes).
HWY_INLINE void soft_cap_inplace(float* HWY_RESTRICT x, int64_t n, float cap) {
  const DF d;
  const VF vcap = hn::Set(d, cap);
  const VF inv_cap = hn::Set(d, 1.0f / cap);
  for (int64_t i = 0; i < n; i += static_cast<int64_t>(hn::Lanes(d))) {
    hn::StoreU(hn::Mul(vcap, hn::Tanh(d, hn::Mul(hn::LoadU(d, x + i), inv_cap))), d, x + i);
  }
}

// The largest m that exp(x - m) may use: -inf (nothing seen yet) becomes 0, so exp(-inf - 0) = 0
// instead of exp(-inf + inf) = NaN.
HWY_INLINE VF safe_max(DF d, VF m) {
  return hn::IfThenElse(hn::Eq(m, hn::Set(d, kNegInf)), hn::Zero(d), m);
}

}  // namespace attnkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNKIT_CPU_TILE_OPS_INL_H_
