// The rows kernel: a block of query rows (positions x the heads of one KV group) walks its visible
// keys tile by tile through the page table; S^T = K Q^T keeps one row per SIMD lane, so the online
// softmax runs down the lanes with no horizontal reductions. Nothing of size qo_len x kv_len exists.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/kernels/extend.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "attnkit/error.h"
#include "attnkit/latent_fp8.h"
#include "backends/cpu/kernels/bf16_dot.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/params.h"
#include "backends/cpu/kernels/tile_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit::cpu::HWY_NAMESPACE {
namespace {

constexpr int kRowVecs = 4;  // row vectors a micro-tile holds: 4 x 16 lanes = 64 rows with AVX-512
constexpr int kTokens = 4;   // keys a QK micro-tile holds: 4 x 4 accumulators, 4 Q loads per 16 FMAs

int round_up(int x, int m) { return (x + m - 1) / m * m; }

// Where each tile lives in the unit's scratch.
struct RowsTiles {
  int rows = 0;       // real rows
  int m_pad = 0;      // rows rounded up to a vector
  int dk = 0;
  int dv_pad = 0;     // head_dim_vo rounded up to a vector
  int k_stride = 0;   // floats per key of the K tile (MLA: V is the front of the same row)
  float* qt = nullptr;     // [dk, m_pad]      Q^T, pre-scaled
  float* kt = nullptr;     // [kv_tile, k_stride]
  float* vt = nullptr;     // [kv_tile, dv_pad] (MLA: unused)
  float* st = nullptr;     // [kv_tile, m_pad]  S^T, then P^T
  float* o = nullptr;      // [m_pad, dv_pad]
  float* m = nullptr;      // [m_pad]
  float* l = nullptr;      // [m_pad]
  float* alpha = nullptr;  // [m_pad] this tile's rescale of o
  float* pos = nullptr;    // [m_pad] each row's position, as float (exact below 2^24)
  float* row = nullptr;    // [k_stride] one q row while packing
  // bf16 q and cache on an AVX512-BF16 CPU: both products on bf16 pairs (bf16_dot.h), in the same
  // memory as the f32 tiles they replace; S^T, softmax and O stay f32.
  bool bf16 = false;
  Bf16Pair* qp = nullptr;  // [dk / 2, m_pad] unscaled (in qt's place)
  Bf16Pair* vp = nullptr;  // [kv_tile / 2 + 1, dv_pad] V pairs (in vt's place)
  Bf16Pair* pp = nullptr;  // [kv_tile / 2 + 1, max_m] P^T pairs
};

// Rows are padded to whole vectors and to the 4 rows a PV micro-tile takes (lanes are powers of two).
int row_align() { return std::max(static_cast<int>(hn::Lanes(DF())), 4); }

RowsTiles carve(const AttendParams& p, int rows, float* scratch) {
  const int lanes = static_cast<int>(hn::Lanes(DF()));
  RowsTiles t;
  t.rows = rows;
  t.m_pad = round_up(rows, row_align());
  t.dk = p.head_dim_qk;
  t.dv_pad = round_up(p.head_dim_vo, lanes);
  t.k_stride = round_up(std::max(p.head_dim_qk, p.mla ? p.head_dim_vo : 0), lanes);
  const int max_m = round_up(kBlockRows, row_align());
  float* f = scratch;
  auto take = [&f](int64_t n) { float* r = f; f += (n + 15) / 16 * 16; return r; };
  t.qt = take(int64_t{t.dk} * max_m);
  t.kt = take(int64_t{p.kv_tile} * t.k_stride);
  t.vt = take(int64_t{p.kv_tile} * t.dv_pad);
  t.st = take(int64_t{p.kv_tile} * max_m);
  t.o = take(int64_t{max_m} * t.dv_pad);
  t.m = take(max_m);
  t.l = take(max_m);
  t.alpha = take(max_m);
  t.pos = take(max_m);
  t.row = take(t.k_stride);
  t.pp = reinterpret_cast<Bf16Pair*>(take(int64_t{p.kv_tile / 2 + 1} * max_m));
  t.bf16 = p.bf16_dot && lanes == kBf16DotLanes && p.q_dtype == DType::bf16 && p.kv_dtype == DType::bf16 && !p.mla &&
           t.dk % 2 == 0 && p.head_dim_vo % (4 * kBf16DotLanes) == 0;
  t.qp = reinterpret_cast<Bf16Pair*>(t.qt);
  t.vp = reinterpret_cast<Bf16Pair*>(t.vt);
  return t;
}

// Q^T[e][r] = q[token(r)][head(r)][e] * q_scale; padding rows are zero.
template <typename QT>
void pack_q(const AttendParams& p, const UnitWork& u, const RowsTiles& t) {
  const QT* q = static_cast<const QT*>(p.q);
  for (int r = 0; r < t.m_pad; ++r) {
    if (r < t.rows) {
      const int64_t base = (u.token(p, r) * p.num_qo_heads + u.head(r)) * int64_t{t.dk};
      convert_row(q + base, t.dk, p.q_scale, t.row, t.dk);
      for (int e = 0; e < t.dk; ++e) t.qt[int64_t{e} * t.m_pad + r] = t.row[e];
    } else {
      for (int e = 0; e < t.dk; ++e) t.qt[int64_t{e} * t.m_pad + r] = 0.0f;
    }
  }
}

// The bf16 pairs of Q^T: q's own bits, unscaled (the scale multiplies S), padding rows zero.
void pack_q_pairs(const AttendParams& p, const UnitWork& u, const RowsTiles& t) {
  const Bf16Pair* q = static_cast<const Bf16Pair*>(p.q);
  const int pairs = t.dk / 2;
  for (int r = 0; r < t.m_pad; ++r) {
    const Bf16Pair* row = r < t.rows ? q + (u.token(p, r) * p.num_qo_heads + u.head(r)) * int64_t{pairs} : nullptr;
    for (int e = 0; e < pairs; ++e) t.qp[int64_t{e} * t.m_pad + r] = row != nullptr ? row[e] : 0u;
  }
}

// S^T[t][r] = sum_e K[t][e] Q^T[e][r] for kTok keys and kVecs row vectors starting at row r0.
template <int kTok, int kVecs>
HWY_INLINE void qk_micro(const RowsTiles& t, int t0, int r0) {
  const DF d;
  const int lanes = static_cast<int>(hn::Lanes(d));
  VecGrid<kTok, kVecs> acc;
  for (int k = 0; k < kTok; ++k)
    for (int v = 0; v < kVecs; ++v) acc[k][v] = hn::Zero(d);
  const float* q = t.qt + r0;
  const float* kr = t.kt + int64_t{t0} * t.k_stride;
  for (int e = 0; e < t.dk; ++e) {
    VecArray<kVecs> qv;
    for (int v = 0; v < kVecs; ++v) qv[v] = hn::LoadU(d, q + int64_t{e} * t.m_pad + v * lanes);
    for (int k = 0; k < kTok; ++k) {
      const VF kk = hn::Set(d, kr[int64_t{k} * t.k_stride + e]);
      for (int v = 0; v < kVecs; ++v) acc[k][v] = hn::MulAdd(kk, qv[v], acc[k][v]);
    }
  }
  for (int k = 0; k < kTok; ++k)
    for (int v = 0; v < kVecs; ++v) hn::StoreU(acc[k][v], d, t.st + int64_t{t0 + k} * t.m_pad + r0 + v * lanes);
}

template <int kTok>
HWY_INLINE void qk_keys(const RowsTiles& t, int t0) {
  const int lanes = static_cast<int>(hn::Lanes(DF()));
  int r = 0;
  for (; r + kRowVecs * lanes <= t.m_pad; r += kRowVecs * lanes) qk_micro<kTok, kRowVecs>(t, t0, r);
  switch ((t.m_pad - r) / lanes) {
    case 3: qk_micro<kTok, 3>(t, t0, r); break;
    case 2: qk_micro<kTok, 2>(t, t0, r); break;
    case 1: qk_micro<kTok, 1>(t, t0, r); break;
    default: break;
  }
}

// S^T = K Q^T for the tile's nk keys.
void qk_tile(const RowsTiles& t, int nk) {
  int k = 0;
  for (; k + kTokens <= nk; k += kTokens) qk_keys<kTokens>(t, k);
  for (; k < nk; ++k) qk_keys<1>(t, k);
}

// Sets S^T to -inf where a key is hidden by the causal rule or the window (no custom mask; at
// least one of the two is on, or no tile would be partial).
void mask_positions(const AttendParams& p, const RowsTiles& t, int key0, int nk) {
  const DF d;
  const int lanes = static_cast<int>(hn::Lanes(d));
  const VF neg_inf = hn::Set(d, kNegInf);
  const VF window = hn::Set(d, static_cast<float>(p.window_left));
  const bool causal = p.causal;
  const bool windowed = p.window_left >= 0;
  for (int k = 0; k < nk; ++k) {
    const VF key = hn::Set(d, static_cast<float>(key0 + k));
    const VF key_plus_window = hn::Add(key, window);
    float* s = t.st + int64_t{k} * t.m_pad;
    for (int r = 0; r < t.m_pad; r += lanes) {
      const VF pos = hn::LoadU(d, t.pos + r);
      const VF sv = hn::LoadU(d, s + r);
      VF masked;
      if (causal && windowed) {  // pos - window <= key <= pos
        masked = hn::IfThenElse(hn::And(hn::Le(key, pos), hn::Ge(key_plus_window, pos)), sv, neg_inf);
      } else if (causal) {
        masked = hn::IfThenElse(hn::Le(key, pos), sv, neg_inf);
      } else {
        masked = hn::IfThenElse(hn::Ge(key_plus_window, pos), sv, neg_inf);
      }
      hn::StoreU(masked, d, s + r);
    }
  }
}

// The custom mask replaces the causal rule; the window still applies. Returns whether any key of
// the tile is visible to any row (when none is, the tile is skipped before any arithmetic).
bool mask_custom(const AttendParams& p, const UnitWork& u, const RowsTiles& t, const uint8_t* mask, int key0, int nk,
                 bool apply) {
  const int64_t kv_len = p.kv_len(u.request_idx);
  bool any = false;
  for (int r = 0; r < t.rows; ++r) {
    const int64_t qo_idx = (u.row_begin + r) / u.rows_per_token;
    const uint8_t* row = mask + qo_idx * kv_len;
    const float pos = t.pos[r];
    for (int k = 0; k < nk; ++k) {
      const int key = key0 + k;
      const bool visible = row[key] != 0 && (p.window_left < 0 || key + p.window_left >= pos);
      any |= visible;
      if (apply && !visible) t.st[int64_t{k} * t.m_pad + r] = kNegInf;
    }
  }
  return any;
}

// Online softmax down each lane: m_new = max(m, max_t s), P^T = exp(S^T - m_new) in place,
// l = l * alpha + sum_t P, alpha = exp(m - m_new) kept for O.
void softmax_tile(const RowsTiles& t, int nk) {
  const DF d;
  const int lanes = static_cast<int>(hn::Lanes(d));
  for (int r = 0; r < t.m_pad; r += lanes) {
    VF tile_max = hn::Set(d, kNegInf);
    for (int k = 0; k < nk; ++k) tile_max = hn::Max(tile_max, hn::LoadU(d, t.st + int64_t{k} * t.m_pad + r));
    const VF m_old = hn::LoadU(d, t.m + r);
    const VF m_new = hn::Max(m_old, tile_max);
    const VF m_use = safe_max(d, m_new);
    VF sum = hn::Zero(d);
    for (int k = 0; k < nk; ++k) {
      float* s = t.st + int64_t{k} * t.m_pad + r;
      const VF pk = hn::Exp(d, hn::Sub(hn::LoadU(d, s), m_use));
      hn::StoreU(pk, d, s);
      sum = hn::Add(sum, pk);
    }
    const VF alpha = hn::Exp(d, hn::Sub(m_old, m_use));
    hn::StoreU(m_new, d, t.m + r);
    hn::StoreU(hn::MulAdd(hn::LoadU(d, t.l + r), alpha, sum), d, t.l + r);
    hn::StoreU(alpha, d, t.alpha + r);
  }
}

// O[r][c..] = O[r][c..] * alpha[r] + sum_t P^T[t][r] V[t][c..] for 4 rows and kVecs column vectors.
template <int kVecs>
HWY_INLINE void pv_micro(const RowsTiles& t, const float* v, int v_stride, int nk, int r0, int c0) {
  const DF d;
  const int lanes = static_cast<int>(hn::Lanes(d));
  constexpr int kRows = 4;
  VecGrid<kRows, kVecs> acc;
  for (int i = 0; i < kRows; ++i) {
    const VF a = hn::Set(d, t.alpha[r0 + i]);
    for (int c = 0; c < kVecs; ++c) acc[i][c] = hn::Mul(hn::LoadU(d, t.o + int64_t{r0 + i} * t.dv_pad + c0 + c * lanes), a);
  }
  for (int k = 0; k < nk; ++k) {
    VecArray<kVecs> vv;
    for (int c = 0; c < kVecs; ++c) vv[c] = hn::LoadU(d, v + int64_t{k} * v_stride + c0 + c * lanes);
    const float* pk = t.st + int64_t{k} * t.m_pad + r0;
    for (int i = 0; i < kRows; ++i) {
      const VF pi = hn::Set(d, pk[i]);
      for (int c = 0; c < kVecs; ++c) acc[i][c] = hn::MulAdd(pi, vv[c], acc[i][c]);
    }
  }
  for (int i = 0; i < kRows; ++i)
    for (int c = 0; c < kVecs; ++c) hn::StoreU(acc[i][c], d, t.o + int64_t{r0 + i} * t.dv_pad + c0 + c * lanes);
}

// O = O * alpha + P V over the real rows, rounded up to the micro-tile's 4.
void pv_tile(const RowsTiles& t, const float* v, int v_stride, int nk) {
  const int lanes = static_cast<int>(hn::Lanes(DF()));
  for (int r = 0; r < t.rows; r += 4) {
    int c = 0;
    for (; c + 4 * lanes <= t.dv_pad; c += 4 * lanes) pv_micro<4>(t, v, v_stride, nk, r, c);
    for (; c < t.dv_pad; c += lanes) pv_micro<1>(t, v, v_stride, nk, r, c);
  }
}

template <typename KvT>
UnitState attend_rows_t(const AttendParams& p, const UnitWork& u, float* scratch) {
  const RowsTiles t = carve(p, u.num_rows(), scratch);
  if (t.bf16) {
    pack_q_pairs(p, u, t);
  } else switch (p.q_dtype) {
    case DType::f32: pack_q<float>(p, u, t); break;
    case DType::bf16: pack_q<hwy::bfloat16_t>(p, u, t); break;
    case DType::f16: pack_q<hwy::float16_t>(p, u, t); break;
    default: throw Error("cpu: q dtype must be f32, f16 or bf16, got " + std::string(dtype_name(p.q_dtype)));
  }
  const int prefix = p.prefix_lens[u.request_idx];
  for (int r = 0; r < t.m_pad; ++r) {
    const int row = std::min(r, t.rows - 1);  // padding rows copy the last real one: no special case
    t.pos[r] = static_cast<float>(prefix + (u.row_begin + row) / u.rows_per_token);
    t.m[r] = kNegInf;
    t.l[r] = 0.0f;
  }
  for (int64_t i = 0; i < int64_t{t.m_pad} * t.dv_pad; ++i) t.o[i] = 0.0f;
  const float pos_lo = t.pos[0];
  const float pos_hi = t.pos[t.rows - 1];
  const uint8_t* mask = p.mask_of(u.request_idx);
  const KvT* k_pool = static_cast<const KvT*>(p.k_pool);
  const KvT* v_pool = static_cast<const KvT*>(p.v_pool);
  const bool mla = p.mla;
  const int dv = p.head_dim_vo;
  const int k_row_len = mla ? std::max(t.dk, dv) : t.dk;  // MLA: V is the front of the same latent

  for (int key0 = u.kv_begin; key0 < u.kv_end; key0 += p.kv_tile) {
    const int nk = std::min(p.kv_tile, u.kv_end - key0);
    const int key1 = key0 + nk - 1;
    // Whole tiles are skipped or taken without a mask whenever the rows' positions allow it.
    bool partial = true;
    if (mask != nullptr) {
      if (!mask_custom(p, u, t, mask, key0, nk, false)) continue;
    } else {
      const bool causal_hides = p.causal && key0 > pos_hi;
      const bool window_hides = p.window_left >= 0 && key1 + p.window_left < pos_lo;
      if (causal_hides || window_hides) continue;
      partial = (p.causal && key1 > pos_lo) || (p.window_left >= 0 && key0 + p.window_left < pos_hi);
    }
    // K and V tiles (f32, or bf16 pairs): the slot of each key comes from the page table. (The f32
    // path gained nothing from prefetching the next tile's rows: they come from L3 and it computes
    // long enough; the bf16 path, twice as fast, gains about 7%.)
    if (t.bf16) {
      const uint16_t* k_rows[256];  // read in place; kv_tile is 64 or 32 (plan.cc)
      const uint16_t* v_rows[256];
      const uint16_t* k_pool16 = reinterpret_cast<const uint16_t*>(k_pool);
      const uint16_t* v_pool16 = reinterpret_cast<const uint16_t*>(v_pool);
      for (int k = 0; k < nk; ++k) {
        const int64_t slot = p.slot(u.request_idx, key0 + k);
        k_rows[k] = k_pool16 + slot * p.k_slot_stride + int64_t{u.kv_head} * t.dk;
        v_rows[k] = v_pool16 + slot * p.v_slot_stride + u.kv_head * p.v_head_stride;
      }
      bf16_pack_v(v_rows, nk, dv, t.vp);
      // The next tile's rows into L2 while this one computes.
      const int next_nk = std::min(p.kv_tile, u.kv_end - (key0 + nk));
      for (int k = 0; k < next_nk; ++k) {
        const int64_t slot = p.slot(u.request_idx, key0 + nk + k);
        prefetch_row(k_pool16 + slot * p.k_slot_stride + int64_t{u.kv_head} * t.dk, t.dk);
        prefetch_row(v_pool16 + slot * p.v_slot_stride + u.kv_head * p.v_head_stride, dv);
      }
      bf16_qk_tile(t.qp, t.m_pad, t.dk, k_rows, nk, p.q_scale, t.st);  // S^T = K Q^T
    } else {
      for (int k = 0; k < nk; ++k) {
        const int64_t slot = p.slot(u.request_idx, key0 + k);
        if (p.fp8_blocked_latent) {  // each block of the latent through its own scale (kv_cache.h)
          float* row = t.kt + int64_t{k} * t.k_stride;
          decode_fp8_blocked_latent(reinterpret_cast<const uint8_t*>(k_pool + slot * p.k_slot_stride), t.dk, dv, row);
          for (int e = t.dk; e < t.k_stride; ++e) row[e] = 0.0f;
          continue;
        }
        convert_row(k_pool + slot * p.k_slot_stride + int64_t{u.kv_head} * t.dk, k_row_len, 1.0f,
                    t.kt + int64_t{k} * t.k_stride, t.k_stride);
        if (!mla) {
          convert_row(v_pool + slot * p.v_slot_stride + u.kv_head * p.v_head_stride, dv, 1.0f,
                      t.vt + int64_t{k} * t.dv_pad, t.dv_pad);
        }
      }
      qk_tile(t, nk);                                                         // S^T = K Q^T
    }
    if (p.logits_soft_cap > 0.0f) soft_cap_inplace(t.st, int64_t{nk} * t.m_pad, p.logits_soft_cap);
    if (mask != nullptr) {
      mask_custom(p, u, t, mask, key0, nk, true);
    } else if (partial) {
      mask_positions(p, t, key0, nk);
    }
    softmax_tile(t, nk);                                                        // P = exp(S - m)
    if (t.bf16) {
      bf16_pack_p(t.st, t.m_pad, nk, t.pp);
      bf16_pv_tile(t.pp, t.m_pad, t.rows, t.vp, dv, nk, t.alpha, t.o, t.dv_pad);
    } else {
      pv_tile(t, mla ? t.kt : t.vt, mla ? t.k_stride : t.dv_pad, nk);          // O = O alpha + P V
    }
  }
  return UnitState{t.o, t.m, t.l, t.dv_pad};
}

}  // namespace

size_t rows_scratch_floats(const AttendParams& p) {
  const int lanes = static_cast<int>(hn::Lanes(DF()));
  const int64_t max_m = round_up(kBlockRows, row_align());
  const int64_t k_stride = round_up(std::max(p.head_dim_qk, p.head_dim_vo), lanes);
  const int64_t dv_pad = round_up(p.head_dim_vo, lanes);
  const int64_t floats = p.head_dim_qk * max_m + p.kv_tile * k_stride + p.kv_tile * dv_pad + p.kv_tile * max_m +
                         max_m * dv_pad + 4 * max_m + k_stride + (p.kv_tile / 2 + 1) * max_m;
  return static_cast<size_t>(floats + 12 * 16);  // each piece rounded up to 16 floats
}

UnitState attend_rows(const AttendParams& p, const UnitWork& u, float* scratch) {
  switch (p.kv_dtype) {
    case DType::f32: return attend_rows_t<float>(p, u, scratch);
    case DType::bf16: return attend_rows_t<hwy::bfloat16_t>(p, u, scratch);
    case DType::f16: return attend_rows_t<hwy::float16_t>(p, u, scratch);
    case DType::e4m3: return attend_rows_t<E4m3>(p, u, scratch);
    default: throw Error("cpu: cache dtype must be f32, f16, bf16 or e4m3, got " + std::string(dtype_name(p.kv_dtype)));
  }
}

int simd_lanes_f32() { return static_cast<int>(hn::Lanes(DF())); }

}  // namespace attnkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnkit::cpu {

HWY_EXPORT(rows_scratch_floats);
HWY_EXPORT(attend_rows);
HWY_EXPORT(simd_lanes_f32);

size_t rows_scratch_floats(const AttendParams& p) { return HWY_DYNAMIC_DISPATCH(rows_scratch_floats)(p); }
UnitState attend_rows(const AttendParams& p, const UnitWork& u, float* scratch) {
  return HWY_DYNAMIC_DISPATCH(attend_rows)(p, u, scratch);
}
int simd_lanes_f32() { return HWY_DYNAMIC_DISPATCH(simd_lanes_f32)(); }

}  // namespace attnkit::cpu
#endif  // HWY_ONCE
