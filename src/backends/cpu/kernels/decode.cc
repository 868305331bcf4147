// The heads kernel (decode): one token's query heads against a range of its keys. Each key slot is
// read once for every head of its group, converted to f32 in registers (never copied; bf16 q and
// cache on AVX512-BF16 CPUs multiply bf16 pairs instead, decode_bf16.cc, and compute S of a tile
// slot by slot), and the scores of a tile of keys go through an online softmax per head; split-KV
// ranges are merged elsewhere.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/kernels/decode.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <cmath>

#include "attnkit/error.h"
#include "backends/cpu/kernels/bf16_dot.h"
#include "backends/cpu/kernels/decode_bf16.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/params.h"
#include "backends/cpu/kernels/tile_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit::cpu::HWY_NAMESPACE {
namespace {

// Keys a tile holds: the scores ([heads, 64] floats; every head's where S goes slot by slot) stay in
// L1, and the per-tile costs (softmax bookkeeping, rescaling o) are paid once per 64 keys (32: 5%
// slower in cache).
constexpr int kKeyTile = 64;
constexpr int kHeadBlock = 4;  // heads of a group sharing each loaded key: 4 keys x 4 heads accumulators
constexpr int kKeyBlock = 4;
constexpr int kPrefetchHeads = 2;  // see Prefetch
// bf16 products (decode_bf16.h): S reads K slot by slot and asks for the K rows kKeysAhead slots
// ahead; P V, head by head, asks for V rows kPvPrefetchHeads heads ahead. Read-only, two threads
// from DRAM read the KV heads of a slot together at 0.99 of a sequential read, head by head (as P V
// and the other cache types do) at 0.55-0.75 (docs/benchmarks.md); K slot by slot lifted decode
// 64 x 4096 from 24.1 to 27.3 GB/s (medians of 5, alternated; 16 or 32 slots ahead: no better).
constexpr int kKeysAhead = 8;
constexpr int kPvPrefetchHeads = 6;

int score_stride() { return std::max(kKeyTile, static_cast<int>(hn::Lanes(DF()))); }

struct HeadsTiles {
  float* q = nullptr;      // [num_qo_heads, head_dim_qk] pre-scaled
  float* o = nullptr;      // [num_qo_heads, head_dim_vo]
  float* m = nullptr;      // [num_qo_heads]
  float* l = nullptr;      // [num_qo_heads]
  float* s = nullptr;      // [num_qo_heads, score_stride()] scores, then probabilities
  float* alpha = nullptr;  // [group_size] this tile's rescale of o
};

HeadsTiles carve(const AttendParams& p, float* scratch) {
  HeadsTiles t;
  float* f = scratch;
  auto take = [&f](int64_t n) { float* r = f; f += (n + 15) / 16 * 16; return r; };
  t.q = take(int64_t{p.num_qo_heads} * p.head_dim_qk);
  t.o = take(int64_t{p.num_qo_heads} * p.head_dim_vo);
  t.m = take(p.num_qo_heads);
  t.l = take(p.num_qo_heads);
  t.s = take(int64_t{p.num_qo_heads} * score_stride());
  t.alpha = take(p.group_size);
  return t;
}

// Rows to prefetch while a head's keys are computed. A KV head's key rows are 256-byte pieces
// 2 KiB apart (llama3-8b heads, bf16), too scattered for the hardware prefetcher, so the kernel asks
// (into L2) for the rows of the head kPrefetchHeads ahead, a few rows per block of keys. Measured on
// one Zen 4 core, decode 8 x 4096 bf16 from DRAM: no prefetch 5.6 GB/s; a burst per head into L1
// 5.6; into L2 7.9 (bursts get dropped, L1 prefetches evict q and o); spread per block 10.5; two
// heads ahead 11.6-12.3.
template <typename KvT>
struct Prefetch {
  const KvT* const* keys = nullptr;
  const KvT* const* vals = nullptr;
  int n = 0;
  int k_len = 0;
  int v_len = 0;
  HWY_INLINE void rows(int begin, int end) const {
    for (int k = begin; k < std::min(end, n); ++k) {
      prefetch_row(keys[k], k_len);
      prefetch_row(vals[k], v_len);
    }
  }
};

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
  // Per block: [x0_0 + x0_2, x1_0 + x1_2, x0_1 + x0_3, x1_1 + x1_3], and the same for x2, x3.
  const VF r01 = hn::Add(hn::InterleaveLower(d, x0, x1), hn::InterleaveUpper(d, x0, x1));
  const VF r23 = hn::Add(hn::InterleaveLower(d, x2, x3), hn::InterleaveUpper(d, x2, x3));
  // Per block: [x0, x1, x2, x3] partial sums.
  const VF lo = hn::BitCast(d, hn::InterleaveLower(dw, hn::BitCast(dw, r01), hn::BitCast(dw, r23)));
  const VF hi = hn::BitCast(d, hn::InterleaveUpper(dw, hn::BitCast(dw, r01), hn::BitCast(dw, r23)));
  const auto sums = fold_to_block(d, hn::Add(lo, hi));
  hn::StoreU(sums, hn::DFromV<decltype(sums)>(), out);
#endif
}

// s[h][key_idx + k] = q_h . K_k for kTok keys and kHeads heads; q in load_pair order.
template <int kTok, int kHeads, typename KvT>
HWY_INLINE void qk_dot(const float* HWY_RESTRICT q, int dk, const KvT* const* keys, float* s, int key_idx) {
  const DF d;
  const int lanes = static_cast<int>(hn::Lanes(d));
  VF acc[kTok][kHeads];
  for (int k = 0; k < kTok; ++k)
    for (int h = 0; h < kHeads; ++h) acc[k][h] = hn::Zero(d);
  for (int e = 0; e < dk; e += 2 * lanes) {
    VF k0[kTok], k1[kTok];
    for (int k = 0; k < kTok; ++k) load_pair(d, keys[k] + e, k0[k], k1[k]);
    for (int h = 0; h < kHeads; ++h) {
      const VF q0 = hn::LoadU(d, q + int64_t{h} * dk + e);
      const VF q1 = hn::LoadU(d, q + int64_t{h} * dk + e + lanes);
      for (int k = 0; k < kTok; ++k) acc[k][h] = hn::MulAdd(q1, k1[k], hn::MulAdd(q0, k0[k], acc[k][h]));
    }
  }
  const int stride = score_stride();
  if constexpr (kTok == 4) {
    for (int h = 0; h < kHeads; ++h) sum4(acc[0][h], acc[1][h], acc[2][h], acc[3][h], s + h * stride + key_idx);
  } else {
    for (int k = 0; k < kTok; ++k)
      for (int h = 0; h < kHeads; ++h) s[h * stride + key_idx + k] = hn::GetLane(hn::SumOfLanes(d, acc[k][h]));
  }
}

template <int kHeads, typename KvT>
HWY_INLINE void qk_heads(const float* q, int dk, const KvT* const* keys, int nt, float* s, const Prefetch<KvT>& pf) {
  int k = 0;
  for (; k + kKeyBlock <= nt; k += kKeyBlock) {
    pf.rows(k, k + kKeyBlock);
    qk_dot<kKeyBlock, kHeads>(q, dk, keys + k, s, k);
  }
  pf.rows(k, pf.n);
  for (; k < nt; ++k) qk_dot<1, kHeads>(q, dk, keys + k, s, k);
}

// o_h = o_h * alpha_h + sum_k P[h][k] V_k over kPairs pairs of column vectors from c0 (load_pair order).
template <int kHeads, int kPairs, typename KvT>
HWY_INLINE void pv_dot(float* HWY_RESTRICT o, int dv, const float* alpha, const float* pr, const KvT* const* vals,
                       int nt, int c0) {
  const DF d;
  const int lanes = static_cast<int>(hn::Lanes(d));
  const int stride = score_stride();
  constexpr int kVecs = 2 * kPairs;
  VF acc[kHeads][kVecs];
  for (int h = 0; h < kHeads; ++h) {
    const VF a = hn::Set(d, alpha[h]);
    for (int c = 0; c < kVecs; ++c) acc[h][c] = hn::Mul(hn::LoadU(d, o + int64_t{h} * dv + c0 + c * lanes), a);
  }
  for (int k = 0; k < nt; ++k) {
    VF vv[kVecs];
    for (int c = 0; c < kPairs; ++c) load_pair(d, vals[k] + c0 + 2 * c * lanes, vv[2 * c], vv[2 * c + 1]);
    for (int h = 0; h < kHeads; ++h) {
      const VF ph = hn::Set(d, pr[h * stride + k]);
      for (int c = 0; c < kVecs; ++c) acc[h][c] = hn::MulAdd(ph, vv[c], acc[h][c]);
    }
  }
  for (int h = 0; h < kHeads; ++h)
    for (int c = 0; c < kVecs; ++c) hn::StoreU(acc[h][c], d, o + int64_t{h} * dv + c0 + c * lanes);
}

template <int kHeads, typename KvT>
HWY_INLINE void pv_heads(float* o, int dv, const float* alpha, const float* pr, const KvT* const* vals, int nt) {
  const int lanes = static_cast<int>(hn::Lanes(DF()));
  int c = 0;
  for (; c + 4 * lanes <= dv; c += 4 * lanes) pv_dot<kHeads, 2>(o, dv, alpha, pr, vals, nt, c);
  for (; c < dv; c += 2 * lanes) pv_dot<kHeads, 1>(o, dv, alpha, pr, vals, nt, c);
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

// Whether the products go through decode_bf16.h: the rows kernel's conditions for its bf16 path.
bool uses_bf16_dot(const AttendParams& p) {
  return p.bf16_dot && static_cast<int>(hn::Lanes(DF())) == kBf16DotLanes && p.q_dtype == DType::bf16 &&
         p.kv_dtype == DType::bf16 && p.head_dim_qk % 32 == 0 && p.head_dim_vo % 32 == 0;
}

template <typename KvT>
const uint16_t* const* as_u16(const KvT* const* rows) {
  return reinterpret_cast<const uint16_t* const*>(rows);
}

template <typename KvT>
UnitState attend_heads_t(const AttendParams& p, const UnitWork& u, float* scratch) {
  const DF d;
  const int lanes = static_cast<int>(hn::Lanes(d));
  const int dk = p.head_dim_qk;
  const int dv = p.head_dim_vo;
  const int group = p.group_size;
  const int stride = score_stride();
  ATTNKIT_CHECK(dk % (2 * lanes) == 0 && dv % (2 * lanes) == 0,
                "cpu: the heads kernel needs head dims that are multiples of ", 2 * lanes, ", got ", dk, "/", dv);
  const HeadsTiles t = carve(p, scratch);
  const int64_t token = p.qo_indptr[u.request_idx];
  // bf16 q and cache on an AVX512-BF16 CPU: both products on bf16 pairs (decode_bf16.h), q and the
  // rows read in place, the scale applied to S; softmax and o stay f32.
  const bool bf16 = uses_bf16_dot(p);
  const uint16_t* q16 = bf16 ? static_cast<const uint16_t*>(p.q) + token * p.num_qo_heads * int64_t{dk} : nullptr;
  alignas(64) uint32_t p_pairs[kHeadBlock * kKeyTile / 2];
  for (int h = 0; h < p.num_qo_heads; ++h) {
    const int64_t base = (token * p.num_qo_heads + h) * int64_t{dk};
    float* qh = t.q + int64_t{h} * dk;
    t.m[h] = kNegInf;
    t.l[h] = 0.0f;
    if (bf16) continue;
    switch (p.q_dtype) {
      case DType::f32: convert_row(static_cast<const float*>(p.q) + base, dk, p.q_scale, qh, dk); break;
      case DType::bf16: convert_row(static_cast<const hwy::bfloat16_t*>(p.q) + base, dk, p.q_scale, qh, dk); break;
      case DType::f16: convert_row(static_cast<const hwy::float16_t*>(p.q) + base, dk, p.q_scale, qh, dk); break;
      default: throw Error("cpu: q dtype must be f32, f16 or bf16, got " + std::string(dtype_name(p.q_dtype)));
    }
    permute_pairs<KvT>(qh, dk, t.s, true);
  }
  for (int64_t i = 0; i < int64_t{p.num_qo_heads} * dv; ++i) t.o[i] = 0.0f;

  const KvT* k_pool = static_cast<const KvT*>(p.k_pool);
  const KvT* v_pool = static_cast<const KvT*>(p.v_pool);
  // Row pointers of the current tile's head (keys/vals) and of the head kPrefetchHeads after it
  // (pf_*), in this tile or the next.
  const KvT* keys[kKeyTile];
  const KvT* vals[kKeyTile];
  const KvT* pf_keys[kKeyTile];
  const KvT* pf_vals[kKeyTile];
  const KvT* tok_keys[2 * kKeyTile];  // this tile's slots, then the next tile's (head 0's rows)
  int64_t slots[kKeyTile];
  int64_t next_slots[kKeyTile];
  float* alpha = t.alpha;
  const int n_pad = (kKeyTile + lanes - 1) / lanes * lanes;
  Prefetch<KvT> pf{pf_keys, pf_vals, 0, dk, dv};
  auto tile_slots = [&](int key0, int64_t* out) HWY_ATTR {
    const int n = std::max(0, std::min(kKeyTile, u.kv_end - key0));
    for (int k = 0; k < n; ++k) out[k] = p.slot(u.request_idx, key0 + k);
    return n;
  };
  auto head_rows = [&](const int64_t* tile, int n, int kv_head, const KvT** k_rows, const KvT** v_rows) HWY_ATTR {
    for (int k = 0; k < n; ++k) {
      k_rows[k] = k_pool + tile[k] * p.k_slot_stride + int64_t{kv_head} * dk;
      v_rows[k] = v_pool + tile[k] * p.v_slot_stride + kv_head * p.v_head_stride;
    }
  };
  tile_slots(u.kv_begin, slots);
  for (int key0 = u.kv_begin; key0 < u.kv_end; key0 += kKeyTile) {
    const int nt = std::min(kKeyTile, u.kv_end - key0);
    const int next_nt = tile_slots(key0 + kKeyTile, next_slots);
    if (bf16) {
      // S of every head first, the keys read slot by slot (every KV head's row of a slot, then
      // the next slot: the cache's own order), kKeysAhead slots asked for ahead, into the next tile.
      head_rows(slots, nt, 0, tok_keys, vals);
      head_rows(next_slots, next_nt, 0, tok_keys + nt, pf_vals);
      const Bf16Prefetch ahead{as_u16(tok_keys + kKeysAhead), nullptr, nt + next_nt - kKeysAhead,
                               p.num_kv_heads * dk, 0};
      // A unit's first tile also asks for the V rows that P V asks for a tile early elsewhere.
      const int first_heads = key0 == u.kv_begin ? std::min(kPvPrefetchHeads, p.num_kv_heads) : 0;
      const int first_len = first_heads > 0 ? static_cast<int>((first_heads - 1) * p.v_head_stride + dv) : 0;
      const Bf16Prefetch first_vals{nullptr, as_u16(vals), first_heads > 0 ? nt : 0, 0, first_len};
      bf16_tokens_qk(q16, p.num_kv_heads, group, dk, as_u16(tok_keys), nt, p.q_scale, t.s, stride, ahead,
                     first_vals);
    }
    for (int kv_head = 0; kv_head < p.num_kv_heads; ++kv_head) {
      head_rows(slots, nt, kv_head, keys, vals);
      const int head0 = kv_head * group;
      float* s_group = t.s + (bf16 ? head0 * stride : 0);  // this group's scores
      // The head that many ahead, in this tile or the next (at most the next tile's last).
      const int ahead = std::min(kv_head + (bf16 ? kPvPrefetchHeads : kPrefetchHeads), 2 * p.num_kv_heads - 1);
      if (ahead < p.num_kv_heads) {
        head_rows(slots, nt, ahead, pf_keys, pf_vals);
        pf.n = nt;
      } else {
        head_rows(next_slots, next_nt, ahead - p.num_kv_heads, pf_keys, pf_vals);
        pf.n = next_nt;
      }
      // S = q K^T, the group's heads sharing each converted key.
      for (int h = 0; h < group && !bf16; h += kHeadBlock) {
        const float* q = t.q + int64_t{head0 + h} * dk;
        float* s = t.s + h * stride;
        if (h > 0) pf.n = 0;  // the first head block asked for them
        switch (std::min(kHeadBlock, group - h)) {
          case 4: qk_heads<4>(q, dk, keys, nt, s, pf); break;
          case 3: qk_heads<3>(q, dk, keys, nt, s, pf); break;
          case 2: qk_heads<2>(q, dk, keys, nt, s, pf); break;
          default: qk_heads<1>(q, dk, keys, nt, s, pf); break;
        }
      }
      for (int h = 0; h < group; ++h) {
        float* s = s_group + h * stride;
        if (p.logits_soft_cap > 0.0f) soft_cap_inplace(s, n_pad, p.logits_soft_cap);
        for (int k = nt; k < n_pad; ++k) s[k] = kNegInf;  // past the range: exp gives 0
        alpha[h] = bf16 ? bf16_softmax_tile(s, n_pad, t.m + head0 + h, t.l + head0 + h)
                        : softmax_head(s, n_pad, t.m + head0 + h, t.l + head0 + h);
      }
      // O = O alpha + P V.
      for (int h = 0; h < group; h += kHeadBlock) {
        float* o = t.o + int64_t{head0 + h} * dv;
        const float* pr = s_group + h * stride;
        if (bf16) {
          const Bf16Prefetch vpf{nullptr, as_u16(pf_vals), h > 0 ? 0 : pf.n, 0, dv};  // V rows only
          bf16_heads_pv(vpf, pr, stride, std::min(kHeadBlock, group - h), as_u16(vals), nt, dv, alpha + h, o, p_pairs);
          continue;
        }
        switch (std::min(kHeadBlock, group - h)) {
          case 4: pv_heads<4>(o, dv, alpha + h, pr, vals, nt); break;
          case 3: pv_heads<3>(o, dv, alpha + h, pr, vals, nt); break;
          case 2: pv_heads<2>(o, dv, alpha + h, pr, vals, nt); break;
          default: pv_heads<1>(o, dv, alpha + h, pr, vals, nt); break;
        }
      }
    }
    std::copy(next_slots, next_slots + next_nt, slots);
  }
  for (int h = 0; h < p.num_qo_heads; ++h) {
    if (bf16) {
      bf16_pairs_to_natural(t.o + int64_t{h} * dv, dv);
    } else {
      permute_pairs<KvT>(t.o + int64_t{h} * dv, dv, t.s, false);
    }
  }
  return UnitState{t.o, t.m, t.l, dv};
}

}  // namespace

size_t heads_scratch_floats(const AttendParams& p) {
  const int64_t floats = int64_t{p.num_qo_heads} * (p.head_dim_qk + p.head_dim_vo + 2) +
                         int64_t{p.num_qo_heads} * score_stride() + p.group_size;
  return static_cast<size_t>(floats + 6 * 16);  // each piece rounded up to 16 floats
}

int64_t dispatched_target() { return HWY_TARGET; }

UnitState attend_heads(const AttendParams& p, const UnitWork& u, float* scratch) {
  switch (p.kv_dtype) {
    case DType::f32: return attend_heads_t<float>(p, u, scratch);
    case DType::bf16: return attend_heads_t<hwy::bfloat16_t>(p, u, scratch);
    case DType::f16: return attend_heads_t<hwy::float16_t>(p, u, scratch);
    case DType::e4m3: return attend_heads_t<E4m3>(p, u, scratch);
    default: throw Error("cpu: cache dtype must be f32, f16, bf16 or e4m3, got " + std::string(dtype_name(p.kv_dtype)));
  }
}

}  // namespace attnkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnkit::cpu {

HWY_EXPORT(dispatched_target);
HWY_EXPORT(heads_scratch_floats);
HWY_EXPORT(attend_heads);

int64_t dispatched_target() { return HWY_DYNAMIC_DISPATCH(dispatched_target)(); }
size_t heads_scratch_floats(const AttendParams& p) { return HWY_DYNAMIC_DISPATCH(heads_scratch_floats)(p); }
UnitState attend_heads(const AttendParams& p, const UnitWork& u, float* scratch) {
  return HWY_DYNAMIC_DISPATCH(attend_heads)(p, u, scratch);
}

}  // namespace attnkit::cpu
#endif  // HWY_ONCE
