// The heads kernel (decode): one token's query heads against a range of its keys. S of a tile is
// computed slot by slot (every KV head's key row of a slot, then the next slot), each key converted
// to f32 in registers once for its group's heads (never copied; bf16 q and cache on AVX512-BF16
// CPUs multiply bf16 pairs instead, decode_bf16.cc); then each KV head's scores go through an
// online softmax and O += P V. Split-KV ranges are merged elsewhere.
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
#include "backends/cpu/kernels/decode_ops-inl.h"
#include "backends/cpu/kernels/tile_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit::cpu::HWY_NAMESPACE {
namespace {

// S reads K slot by slot (every KV head's row of a slot, then the next slot: the cache's own order)
// and asks for the slot rows kKeysAhead slots ahead; P V, head by head, asks for the V rows
// kPvPrefetchHeads heads ahead. Read-only, two threads from DRAM read the KV heads of a slot
// together at 0.99 of a sequential read, head by head at 0.55-0.75 (docs/benchmarks.md); K slot by
// slot lifted the bf16 products' decode 64 x 4096 from 24.1 to 27.3 GB/s (16 or 32 ahead: no better),
// and the f32 products' 8 x 4096 f32 cache from 0.557 to 0.605 of the read probe on AVX2, from
// 0.660 to 0.702 on AVX-512 (medians of 4 processes each, alternated).
constexpr int kKeysAhead = 8;
constexpr int kPvPrefetchHeads = 6;

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

// S of every head for the tile (q.h: [num_qo_heads, dk] f32 in load_pair order), the usual groups
// of 4 and 8 compiled for their size.
template <typename KvT>
HWY_NOINLINE void qk_all_heads(const float* q, int num_kv_heads, int group, int dk, const KvT* const* keys, int nt, float* s,
                  int stride, const RowPrefetch<KvT>& ahead) {
  if (group == 4) return qk_tokens<4>(q, num_kv_heads, group, dk, keys, nt, s, stride, ahead);
  if (group == 8) return qk_tokens<8>(q, num_kv_heads, group, dk, keys, nt, s, stride, ahead);
  qk_tokens<0>(q, num_kv_heads, group, dk, keys, nt, s, stride, ahead);
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
  // Row pointers of the current tile's KV head (vals), of the head kPvPrefetchHeads after it
  // (pf_vals, in this tile or the next), and of the slots (head 0's K rows: this tile's, then the next's).
  const KvT* vals[kKeyTile];
  const KvT* pf_vals[kKeyTile];
  const KvT* tok_keys[2 * kKeyTile];
  const KvT* unused[2 * kKeyTile];
  int64_t slots[kKeyTile];
  int64_t next_slots[kKeyTile];
  float* alpha = t.alpha;
  const int n_pad = (kKeyTile + lanes - 1) / lanes * lanes;
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
    // S of every head first, kKeysAhead slots asked for ahead, into the next tile.
    head_rows(slots, nt, 0, tok_keys, vals);
    head_rows(next_slots, next_nt, 0, tok_keys + nt, unused);
    if (bf16) {
      const Bf16Prefetch ahead{as_u16(tok_keys + kKeysAhead), nullptr, nt + next_nt - kKeysAhead,
                               p.num_kv_heads * dk, 0};
      // A unit's first tile also asks for the V rows that P V asks for a tile early elsewhere.
      const int first_heads = key0 == u.kv_begin ? std::min(kPvPrefetchHeads, p.num_kv_heads) : 0;
      const int first_len = first_heads > 0 ? static_cast<int>((first_heads - 1) * p.v_head_stride + dv) : 0;
      const Bf16Prefetch first_vals{nullptr, as_u16(vals), first_heads > 0 ? nt : 0, 0, first_len};
      bf16_tokens_qk(q16, p.num_kv_heads, group, dk, as_u16(tok_keys), nt, p.q_scale, t.s, stride, ahead,
                     first_vals);
    } else {
      const RowPrefetch<KvT> ahead{tok_keys + kKeysAhead, nt + next_nt - kKeysAhead};
      qk_all_heads(t.q, p.num_kv_heads, group, dk, tok_keys, nt, t.s, stride, ahead);
    }
    for (int kv_head = 0; kv_head < p.num_kv_heads; ++kv_head) {
      head_rows(slots, nt, kv_head, unused, vals);
      const int head0 = kv_head * group;
      float* s_group = t.s + head0 * stride;  // this group's scores
      // The head that many ahead, in this tile or the next (at most the next tile's last).
      const int ahead = std::min(kv_head + kPvPrefetchHeads, 2 * p.num_kv_heads - 1);
      int pf_n = 0;
      if (ahead < p.num_kv_heads) {
        head_rows(slots, nt, ahead, unused, pf_vals);
        pf_n = nt;
      } else {
        head_rows(next_slots, next_nt, ahead - p.num_kv_heads, unused, pf_vals);
        pf_n = next_nt;
      }
      for (int h = 0; h < group; ++h) {
        float* s = s_group + h * stride;
        if (p.logits_soft_cap > 0.0f) soft_cap_inplace(s, n_pad, p.logits_soft_cap);
        for (int k = nt; k < n_pad; ++k) s[k] = kNegInf;  // past the range: exp gives 0
        alpha[h] = bf16 ? bf16_softmax_tile(s, n_pad, t.m + head0 + h, t.l + head0 + h)
                        : softmax_head(s, n_pad, t.m + head0 + h, t.l + head0 + h);
      }
      // O = O alpha + P V; the first block of heads asks for the V rows ahead.
      for (int h = 0; h < group; h += kHeadBlock) {
        float* o = t.o + int64_t{head0 + h} * dv;
        const float* pr = s_group + h * stride;
        if (bf16) {
          const Bf16Prefetch vpf{nullptr, as_u16(pf_vals), h > 0 ? 0 : pf_n, 0, dv};  // V rows only
          bf16_heads_pv(vpf, pr, stride, std::min(kHeadBlock, group - h), as_u16(vals), nt, dv, alpha + h, o, p_pairs);
          continue;
        }
        const RowPrefetch<KvT> vpf{pf_vals, h > 0 ? 0 : pf_n};
        switch (std::min(kHeadBlock, group - h)) {
          case 4: pv_heads<4>(o, dv, alpha + h, pr, stride, vals, nt, vpf); break;
          case 3: pv_heads<3>(o, dv, alpha + h, pr, stride, vals, nt, vpf); break;
          case 2: pv_heads<2>(o, dv, alpha + h, pr, stride, vals, nt, vpf); break;
          default: pv_heads<1>(o, dv, alpha + h, pr, stride, vals, nt, vpf); break;
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
