// The heads kernel's products and softmax in Highway (every target; bf16 q and cache on
// AVX512-BF16 CPUs take decode_bf16.h's instead): S of a tile slot by slot for every KV head,
// O += P V head by head, each register-blocked for the target's vector registers.
// Include guard in Highway's per-target form: this file is re-read for every target.
#if defined(ATTNKIT_CPU_DECODE_OPS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNKIT_CPU_DECODE_OPS_INL_H_
#undef ATTNKIT_CPU_DECODE_OPS_INL_H_
#else
#define ATTNKIT_CPU_DECODE_OPS_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backends/cpu/kernels/tile_ops-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit::cpu::HWY_NAMESPACE {

// Keys a tile holds: the scores ([heads, 64] floats) stay in L1, and the per-tile costs (softmax
// bookkeeping, rescaling o) are paid once per 64 keys (32: 5% slower in cache).
constexpr int kKeyTile = 64;
constexpr int kHeadBlock = 4;  // query heads of a group sharing each converted key or value

// S holds 4 keys x 4 heads accumulators, P V 4 heads x 4 column vectors. Targets with 16 vector
// registers (AVX2, SSE4) spill some of them, yet 2 keys and 2 column vectors there ran slower
// (f32 cache in L2: 0.277 against 0.221 ms; bf16 the same), so every target takes these.
constexpr int kQkKeys = 4;
constexpr int kPvPairs = 2;

inline int score_stride() { return std::max(kKeyTile, static_cast<int>(hn::Lanes(DF()))); }

#if HWY_TARGET != HWY_SCALAR && !HWY_HAVE_SCALABLE
// A vector of 4 lanes holding the sums of the blocks of v (halves added until one 128-bit block is left).
template <class D>
HWY_INLINE auto fold_to_block(D d, hn::Vec<D> v) {
  if constexpr (hn::MaxLanes(D()) <= 4) {
    (void)d;
    return v;
  } else {
    const hn::Half<D> dh;
    return fold_to_block(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  }
}
#endif

// out[j] = sum of the lanes of x_j, j = 0..3: interleaves pair the four inside each 128-bit block
// (3 adds, 6 shuffles for all four), then the blocks fold. Four separate reductions cost twice that.
HWY_INLINE void sum4(VF x0, VF x1, VF x2, VF x3, float* HWY_RESTRICT out) {
  const DF d;
#if HWY_TARGET == HWY_SCALAR || HWY_HAVE_SCALABLE
  out[0] = hn::GetLane(hn::SumOfLanes(d, x0));
  out[1] = hn::GetLane(hn::SumOfLanes(d, x1));
  out[2] = hn::GetLane(hn::SumOfLanes(d, x2));
  out[3] = hn::GetLane(hn::SumOfLanes(d, x3));
#else
  const hn::RepartitionToWide<DF> dw;
  const VF r01 = hn::Add(hn::InterleaveLower(d, x0, x1), hn::InterleaveUpper(d, x0, x1));
  const VF r23 = hn::Add(hn::InterleaveLower(d, x2, x3), hn::InterleaveUpper(d, x2, x3));
  const VF lo = hn::BitCast(d, hn::InterleaveLower(dw, hn::BitCast(dw, r01), hn::BitCast(dw, r23)));
  const VF hi = hn::BitCast(d, hn::InterleaveUpper(dw, hn::BitCast(dw, r01), hn::BitCast(dw, r23)));
  const auto sums = fold_to_block(d, hn::Add(lo, hi));
  hn::StoreU(sums, hn::DFromV<decltype(sums)>(), out);
#endif
}

// s[h * stride + k] = q_h . K_k for kTok keys (keys[k] + off) and kHeads heads; q in load_pair order.
template <int kTok, int kHeads, typename KvT>
HWY_INLINE void qk_dot(const float* HWY_RESTRICT q, int dk, const KvT* const* keys, int64_t off, float* s,
                       int stride) {
  const DF d;
  const int lanes = static_cast<int>(hn::Lanes(d));
  VecGrid<kTok, kHeads> acc;
  for (int k = 0; k < kTok; ++k)
    for (int h = 0; h < kHeads; ++h) acc[k][h] = hn::Zero(d);
  for (int e = 0; e < dk; e += 2 * lanes) {
    VecArray<kTok> k0, k1;
    for (int k = 0; k < kTok; ++k) load_pair(d, keys[k] + off + e, k0[k], k1[k]);
    for (int h = 0; h < kHeads; ++h) {
      const VF q0 = hn::LoadU(d, q + int64_t{h} * dk + e);
      const VF q1 = hn::LoadU(d, q + int64_t{h} * dk + e + lanes);
      for (int k = 0; k < kTok; ++k) acc[k][h] = hn::MulAdd(q1, k1[k], hn::MulAdd(q0, k0[k], acc[k][h]));
    }
  }
  if constexpr (kTok == 4) {
    for (int h = 0; h < kHeads; ++h) sum4(acc[0][h], acc[1][h], acc[2][h], acc[3][h], s + h * stride);
  } else if constexpr (kTok == 2) {
    alignas(16) float four[4];
    int h = 0;
    for (; h + 2 <= kHeads; h += 2) {
      sum4(acc[0][h], acc[1][h], acc[0][h + 1], acc[1][h + 1], four);
      s[h * stride] = four[0];
      s[h * stride + 1] = four[1];
      s[(h + 1) * stride] = four[2];
      s[(h + 1) * stride + 1] = four[3];
    }
    if (h < kHeads) {
      s[h * stride] = hn::GetLane(hn::SumOfLanes(d, VF(acc[0][h])));
      s[h * stride + 1] = hn::GetLane(hn::SumOfLanes(d, VF(acc[1][h])));
    }
  } else {
    for (int k = 0; k < kTok; ++k)
      for (int h = 0; h < kHeads; ++h) s[h * stride + k] = hn::GetLane(hn::SumOfLanes(d, VF(acc[k][h])));
  }
}

// Rows to ask for (into L2) while a tile is multiplied, a share at a time: rows[k]'s lines
// [line_begin, line_end) for the k asked about; none past n.
template <typename KvT>
struct RowPrefetch {
  const KvT* const* rows = nullptr;
  int n = 0;
  HWY_INLINE void lines(int k, int line_begin, int line_end) const {
    if (k >= n) return;
    const char* c = reinterpret_cast<const char*>(rows[k]);
    for (int l = line_begin; l < line_end; ++l) __builtin_prefetch(c + l * 64, 0, 1);
  }
};

// Every query head's scores against the tile's nt keys, slot by slot: each block of kQkKeys slots'
// rows for every KV head in turn (head j's dk values at keys[k] + j * dk), so the cache is read in
// the order it is stored; the slot rows of `ahead` (the same blocks kKeysAhead slots on) are asked
// for a KV head's share of their lines at a time. s: [num_kv_heads * group, stride].
template <int kGroup, typename KvT>
HWY_INLINE void qk_tokens(const float* q, int num_kv_heads, int run_time_group, int dk, const KvT* const* keys, int nt,
                          float* s, int stride, const RowPrefetch<KvT>& ahead) {
  const int group = kGroup > 0 ? kGroup : run_time_group;
  const int row_lines = static_cast<int>((int64_t{num_kv_heads} * dk * sizeof(KvT) + 63) / 64);
  auto block = [&](auto tok, int k) HWY_ATTR {
    constexpr int kTok = decltype(tok)::value;
    for (int j = 0; j < num_kv_heads; ++j) {
      for (int t = 0; t < kTok; ++t)
        ahead.lines(k + t, j * row_lines / num_kv_heads, (j + 1) * row_lines / num_kv_heads);
      const int64_t off = int64_t{j} * dk;
      int h = 0;
      for (; h + kHeadBlock <= group; h += kHeadBlock) {
        const int head = j * group + h;
        qk_dot<kTok, kHeadBlock>(q + int64_t{head} * dk, dk, keys + k, off, s + head * stride + k, stride);
      }
      const int head = j * group + h;
      const float* qh = q + int64_t{head} * dk;
      float* sh = s + head * stride + k;
      switch (group - h) {
        case 3: qk_dot<kTok, 3>(qh, dk, keys + k, off, sh, stride); break;
        case 2: qk_dot<kTok, 2>(qh, dk, keys + k, off, sh, stride); break;
        case 1: qk_dot<kTok, 1>(qh, dk, keys + k, off, sh, stride); break;
        default: break;
      }
    }
  };
  int k = 0;
  for (; k + kQkKeys <= nt; k += kQkKeys) block(std::integral_constant<int, kQkKeys>(), k);
  for (; k < nt; ++k) block(std::integral_constant<int, 1>(), k);
}

// o_h = o_h * alpha_h + sum_k P[h][k] V_k over kPairs pairs of column vectors from c0 (load_pair
// order); pf's rows' lines [line_begin, line_end) asked for along the way, a key's row at a time.
template <int kHeads, int kPairs, typename KvT>
HWY_INLINE void pv_dot(float* HWY_RESTRICT o, int dv, const float* alpha, const float* pr, int stride,
                       const KvT* const* vals, int nt, int c0, const RowPrefetch<KvT>& pf, int line_begin,
                       int line_end) {
  const DF d;
  const int lanes = static_cast<int>(hn::Lanes(d));
  constexpr int kVecs = 2 * kPairs;
  VecGrid<kHeads, kVecs> acc;
  for (int h = 0; h < kHeads; ++h) {
    const VF a = hn::Set(d, alpha[h]);
    for (int c = 0; c < kVecs; ++c) acc[h][c] = hn::Mul(hn::LoadU(d, o + int64_t{h} * dv + c0 + c * lanes), a);
  }
  for (int k = 0; k < nt; ++k) {
    pf.lines(k, line_begin, line_end);
    VecArray<kVecs> vv;
    for (int c = 0; c < kPairs; ++c) load_pair(d, vals[k] + c0 + 2 * c * lanes, vv[2 * c], vv[2 * c + 1]);
    for (int h = 0; h < kHeads; ++h) {
      const VF ph = hn::Set(d, pr[h * stride + k]);
      for (int c = 0; c < kVecs; ++c) acc[h][c] = hn::MulAdd(ph, vv[c], acc[h][c]);
    }
  }
  for (int k = nt; k < pf.n; ++k) pf.lines(k, line_begin, line_end);  // the next tile's rows past nt
  for (int h = 0; h < kHeads; ++h)
    for (int c = 0; c < kVecs; ++c) hn::StoreU(acc[h][c], d, o + int64_t{h} * dv + c0 + c * lanes);
}

// Columns in blocks of kPvPairs pairs of vectors, then single pairs; each block asks for its share
// of pf's rows' lines (all in the first block: the prefetches go out in bursts, slower).
template <int kHeads, typename KvT>
HWY_INLINE void pv_heads(float* o, int dv, const float* alpha, const float* pr, int stride, const KvT* const* vals,
                         int nt, const RowPrefetch<KvT>& pf) {
  const int lanes = static_cast<int>(hn::Lanes(DF()));
  const int wide = 2 * kPvPairs * lanes;
  const int blocks = dv / wide + dv % wide / (2 * lanes);
  const int lines = static_cast<int>((int64_t{dv} * sizeof(KvT) + 63) / 64);
  int c = 0, b = 0;
  for (; c + wide <= dv; c += wide, ++b)
    pv_dot<kHeads, kPvPairs>(o, dv, alpha, pr, stride, vals, nt, c, pf, lines * b / blocks, lines * (b + 1) / blocks);
  for (; c < dv; c += 2 * lanes, ++b)
    pv_dot<kHeads, 1>(o, dv, alpha, pr, stride, vals, nt, c, pf, lines * b / blocks, lines * (b + 1) / blocks);
}

// Online softmax of one head over a tile: s becomes exp(s - m_new); returns alpha = exp(m - m_new).
HWY_INLINE float softmax_head(float* HWY_RESTRICT s, int n_pad, float* m, float* l) {
  const DF d;
  const int lanes = static_cast<int>(hn::Lanes(d));
  VF vmax = hn::Set(d, kNegInf);
  for (int k = 0; k < n_pad; k += lanes) vmax = hn::Max(vmax, hn::LoadU(d, s + k));
  const float m_new = std::max(*m, hn::GetLane(hn::MaxOfLanes(d, vmax)));
  const float m_use = m_new == kNegInf ? 0.0f : m_new;  // see safe_max
  const VF vm = hn::Set(d, m_use);
  VF sum = hn::Zero(d);
  for (int k = 0; k < n_pad; k += lanes) {
    const VF pk = hn::Exp(d, hn::Sub(hn::LoadU(d, s + k), vm));
    hn::StoreU(pk, d, s + k);
    sum = hn::Add(sum, pk);
  }
  const float alpha = *m == kNegInf ? 0.0f : std::exp(*m - m_use);
  *m = m_new;
  *l = *l * alpha + hn::GetLane(hn::SumOfLanes(d, sum));
  return alpha;
}

}  // namespace attnkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNKIT_CPU_DECODE_OPS_INL_H_
