#include "backends/jit/source.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <initializer_list>
#include <string_view>
#include <vector>

#include "attnkit/error.h"
#include "attnkit/jit.h"
#include "attnkit/registry.h"
#include "backends/jit/config.h"
#include "backends/jit/kernels/mma_ptx.h"
#include "backends/jit/kernels/mma_tile.h"
#include "backends/jit/kernels/tile_common.h"
#include "backends/jit/kernels/variants.h"
#include "backends/jit/kernels/warp_row.h"
#include "backends/jit/kernels/wgmma_tile.h"
#include "core/variant_expr.h"

namespace attnkit::jit {

namespace {

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) s.replace(pos, from.size(), to);
}

// A condition source.cc resolves when it renders (`#if NAME`, with an optional `#else`), not the compiler.
struct RenderFlag {
  std::string_view name;
  bool on;
};

// Resolves the template's `#if LATENT` and `#if PDL` blocks (conditionals inside are kept as
// written) for the key and the architecture: a non-latent key's source holds no trace of the latent
// one, and a source for an architecture before sm_90 none of programmatic dependent launch, so
// their text, and the disk cache's hash of it, is what it was before either.
std::string resolve_flags(const std::string& s, std::initializer_list<RenderFlag> flags) {
  struct Frame {
    const RenderFlag* flag;  // one of `flags`, resolved here; else the compiler's
    bool keep;               // the lines of its current branch are kept
  };
  std::vector<Frame> frames;
  const auto keeping = [&] { return std::all_of(frames.begin(), frames.end(), [](const Frame& f) { return f.keep; }); };
  const auto starts = [](std::string_view code, std::string_view word) {
    return code.substr(0, word.size()) == word && (code.size() == word.size() || std::isspace(static_cast<unsigned char>(code[word.size()])));
  };
  const auto flag_of = [&](std::string_view code) -> const RenderFlag* {
    if (!starts(code, "#if")) return nullptr;
    const std::string_view rest = code.substr(std::min(code.size(), code.find_first_not_of(" \t", 3)));
    for (const RenderFlag& f : flags) {
      if (starts(rest, f.name)) return &f;
    }
    return nullptr;
  };
  std::string out;
  for (size_t pos = 0; pos < s.size();) {
    const size_t newline = s.find('\n', pos), end = newline == std::string::npos ? s.size() : newline + 1;
    const std::string_view line(s.data() + pos, end - pos);
    pos = end;
    const std::string_view code = line.substr(std::min(line.size(), line.find_first_not_of(" \t")));
    bool emit = false;
    if (const RenderFlag* f = flag_of(code)) {
      frames.push_back({f, f->on});
    } else if (starts(code, "#if") || starts(code, "#ifdef") || starts(code, "#ifndef")) {
      emit = keeping();
      frames.push_back({nullptr, true});
    } else if (starts(code, "#else") && !frames.empty() && frames.back().flag != nullptr) {
      frames.back().keep = !frames.back().flag->on;
    } else if (starts(code, "#endif") && !frames.empty()) {
      const bool resolved = frames.back().flag != nullptr;
      frames.pop_back();
      emit = !resolved && keeping();
    } else {
      emit = keeping();
    }
    if (emit) out += line;
  }
  ATTNKIT_CHECK(frames.empty(), "jit: a template's #if has no #endif");
  return out;
}

// The variants' functions, rendered into `s` (a template with $VARIANT_FUNCTIONS).
void render_variants(std::string& s, const KernelKey& key) {
  replace_all(s, "$VARIANT_FUNCTIONS", kVariantFunctions);
  replace_all(s, "$SCORE_MOD", key.score_mod.empty() ? "score" : key.score_mod);
  replace_all(s, "$HAS_MASK_MOD", key.mask_mod.empty() ? "0" : "1");
  replace_all(s, "$MASK_MOD", key.mask_mod.empty() ? "true" : key.mask_mod);
}

// What both tile templates name alike: the shared pieces (tile_common.h, mma_ptx.h), the key's
// shape and dtype, the tile's keys and stages, and the variants.
void render_tile_common(std::string& s, const KernelKey& key) {
  replace_all(s, "$TILE_COMMON", kTileCommon);
  replace_all(s, "$TILE_ISSUE", kTileIssue);
  replace_all(s, "$ATTEND_PARAMS", kAttendParams);
  replace_all(s, "$WORK_ITEM", kWorkItem);
  replace_all(s, "$PTX_FUNCTIONS", kMmaPtxFunctions);  // before $BF16: the functions use it
  replace_all(s, "$HEAD_DIM_QK", std::to_string(key.head_dim_qk));
  replace_all(s, "$HEAD_DIM_VO", std::to_string(key.head_dim_vo));
  replace_all(s, "$GROUP", std::to_string(key.group));
  replace_all(s, "$PAGE_SIZE", std::to_string(key.page_size));
  replace_all(s, "$BF16", key.dtype == DType::bf16 ? "1" : "0");
  replace_all(s, "$BLOCK_N", std::to_string(key.tile.block_n));
  replace_all(s, "$STAGES", std::to_string(key.tile.stages));
  replace_all(s, "$ELEM", std::string(dtype_name(key.dtype)));
  replace_all(s, "$CONFIG", key.tile.describe());
  render_variants(s, key);
}

}  // namespace

std::string TileConfig::describe() const {
  return detail::concat("n", block_n, " w", warps_m, "x", warps_n, " m", m_tiles, " s", stages, wgmma ? " wgmma" : "");
}

std::optional<TileConfig> TileConfig::parse(const std::string& text) {
  TileConfig t;
  std::string body = text;
  constexpr const char* kWgmma = " wgmma";
  if (body.size() > 6 && body.compare(body.size() - 6, 6, kWgmma) == 0) {
    t.wgmma = true;
    body.resize(body.size() - 6);
  }
  char tail = 0;
  if (std::sscanf(body.c_str(), "n%d w%dx%d m%d s%d%c", &t.block_n, &t.warps_m, &t.warps_n, &t.m_tiles, &t.stages,
                  &tail) != 5) {
    return {};
  }
  if (t.block_n <= 0 || t.warps_m <= 0 || t.warps_n <= 0 || t.m_tiles < 1 || t.m_tiles > 2 || t.stages < 2) return {};
  // The wgmma template's tiles: whole warpgroups of one row tile a warp, keys in 64-key steps.
  if (t.wgmma && (t.warps_m % 4 != 0 || t.warps_n != 1 || t.m_tiles != 1 || t.block_n % 64 != 0)) return {};
  return t;
}

std::string KernelKey::describe() const {
  std::string s = detail::concat(!tensor_cores() ? "warp_row d" : tile.wgmma ? "wgmma_tile d" : "mma_tile d", head_dim_qk, "/", head_dim_vo, " g", group, " p", page_size, " ",
                                 dtype_name(dtype), " kv ", dtype_name(kv_dtype));
  if (latent) s += " latent";
  if (tensor_cores()) s += detail::concat(" ", tile.describe());
  if (!score_mod.empty()) s += " score_mod " + score_mod;
  if (!mask_mod.empty()) s += " mask_mod " + mask_mod;
  return s;
}

std::string render_warp_row(const KernelKey& key) {
  for (DType d : {key.dtype, key.kv_dtype}) {
    ATTNKIT_CHECK(d == DType::bf16 || d == DType::f16, "jit: the warp-row kernel reads bf16 or f16, got ", dtype_name(d));
  }
  std::string s = kWarpRowTemplate;
  // Longer names first: $HEAD_DIM_QK before a shorter name that prefixes it (none today, kept so).
  replace_all(s, "$HEAD_DIM_QK", std::to_string(key.head_dim_qk));
  replace_all(s, "$HEAD_DIM_VO", std::to_string(key.head_dim_vo));
  replace_all(s, "$GROUP", std::to_string(key.group));
  replace_all(s, "$PAGE_SIZE", std::to_string(key.page_size));
  replace_all(s, "$WARPS", std::to_string(kWarpRowThreads / 32));
  replace_all(s, "$Q_BF16", key.dtype == DType::bf16 ? "1" : "0");
  replace_all(s, "$KV_BF16", key.kv_dtype == DType::bf16 ? "1" : "0");
  replace_all(s, "$ELEM", std::string(dtype_name(key.dtype)) + ", cache " + std::string(dtype_name(key.kv_dtype)));
  render_variants(s, key);
  return resolve_flags(s, {{"LATENT", key.latent}});
}

size_t mma_tile_smem_bytes(const KernelKey& key) {
  const size_t dqk = (key.head_dim_qk + 15) / 16 * 16, dvo = (key.head_dim_vo / key.vo_passes() + 15) / 16 * 16;
  const size_t q = key.tile.block_m() * (dqk + 8) * 2;
  // A latent key's V is the front of its K tile's rows: no V tile.
  const size_t stage = key.tile.block_n * (dqk + 8 + (key.latent ? 0 : dvo + 8)) * 2;
  const size_t epilogue = key.tile.warps_n * key.tile.block_m() * (dvo + 2) * 4;  // one pass's columns
  return std::max(q + key.tile.stages * stage, epilogue);
}

std::string render_mma_tile(const KernelKey& key, bool pdl) {
  ATTNKIT_CHECK(key.tensor_cores() && (key.dtype == DType::bf16 || key.dtype == DType::f16),
                "jit: the mma_tile kernel reads q and cache of one dtype, bf16 or f16; got ", dtype_name(key.dtype),
                " over ", dtype_name(key.kv_dtype));
  const TileConfig& t = key.tile;
  ATTNKIT_CHECK(t.block_n % (16 * t.warps_n) == 0, "jit: tile ", t.describe(),
                ": block_n must be a multiple of 16 x warps_n");
  ATTNKIT_CHECK(!key.latent || key.head_dim_vo % (16 * key.vo_passes()) == 0, "jit: a latent key's head_dim_vo must be a multiple of ",
                16 * key.vo_passes(), " (its ", key.vo_passes(), " passes of 16-column steps), got ", key.head_dim_vo);
  std::string s = kMmaTileTemplate;
  render_tile_common(s, key);
  replace_all(s, "$WARPS_M", std::to_string(t.warps_m));
  replace_all(s, "$WARPS_N", std::to_string(t.warps_n));
  replace_all(s, "$M_TILES", std::to_string(t.m_tiles));
  replace_all(s, "$SMEM_BYTES", std::to_string(mma_tile_smem_bytes(key)));
  // Decode tiles: the CTAs an SM holds by shared memory (sm_90: 228 KiB, 1 KiB reserved a CTA), at
  // most as many as leave a thread 168 registers; ptxas fits its registers to that many (n64 s2: 3
  // CTAs at 166 registers, where unbounded it took 228 and 2). Prefill tiles keep their
  // accumulators (no bound: a bound spills them).
  constexpr size_t kSmemPerSm = 228 * 1024, kSmemReservedPerCta = 1024, kRegsPerSm = 65536, kMinRegsPerThread = 168;
  const size_t by_smem = kSmemPerSm / (mma_tile_smem_bytes(key) + kSmemReservedPerCta);
  const size_t by_regs = kRegsPerSm / (kMinRegsPerThread * static_cast<size_t>(t.threads()));
  const size_t min_ctas = t.warps_m == 1 ? std::max<size_t>(1, std::min(by_smem, by_regs)) : 1;
  replace_all(s, "$MIN_CTAS", std::to_string(min_ctas));
  replace_all(s, "$VO_PASSES", std::to_string(key.vo_passes()));
  return resolve_flags(s, {{"LATENT", key.latent}, {"PDL", pdl}});
}

namespace {

// The wgmma instructions the template issues, for its shapes: S = Q K^T as m64n`ss_n`k16 (both
// operands K-major in shared memory, scale_d 0 overwrites), O += P V as m64n`rs_n`k16 (P from
// registers, V MN-major in shared memory), written out operand by operand.
std::string wgmma_functions(int ss_n, int rs_n, bool bf16) {
  const char* type = bf16 ? "bf16" : "f16";
  auto regs = [](int first, int count) {
    std::string r = "{";
    for (int i = 0; i < count; ++i) r += detail::concat(i ? ", %" : "%", first + i);
    return r + "}";
  };
  auto outputs = [](int count) {
    std::string r;
    for (int i = 0; i < count; ++i) r += detail::concat(i ? ", " : "", "\"+f\"(d[", i, "])");
    return r;
  };
  const int ss = ss_n / 2, rs = rs_n / 2;
  return detail::concat(
      "__device__ __forceinline__ void wgmma_ss(float* d, unsigned long long desc_a, unsigned long long desc_b, int scale_d) {\n"
      "  asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %", ss + 2, ", 0;\\nwgmma.mma_async.sync.aligned.m64n", ss_n,
      "k16.f32.", type, ".", type, " ", regs(0, ss), ", %", ss, ", %", ss + 1, ", p, 1, 1, 0, 0;\\n}\\n\"\n"
      "               : ", outputs(ss), "\n"
      "               : \"l\"(desc_a), \"l\"(desc_b), \"r\"(scale_d));\n}\n\n"
      "__device__ __forceinline__ void wgmma_rs(float* d, const unsigned* a, unsigned long long desc_b) {\n"
      "  asm volatile(\"{\\n.reg .pred p;\\nsetp.eq.u32 p, 1, 1;\\nwgmma.mma_async.sync.aligned.m64n", rs_n,
      "k16.f32.", type, ".", type, " ", regs(0, rs), ", ", regs(rs, 4), ", %", rs + 4, ", p, 1, 1, 1;\\n}\\n\"\n"
      "               : ", outputs(rs), "\n"
      "               : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(desc_b));\n}\n");
}

}  // namespace

size_t wgmma_tile_smem_bytes(const KernelKey& key) {
  const size_t block_m = static_cast<size_t>(key.tile.block_m()), block_n = static_cast<size_t>(key.tile.block_n);
  // Rows of whole 128-byte column blocks: S's k steps over the qk dim rounded up to 16, P V's N.
  const size_t qk_blocks = ((key.head_dim_qk + 15) / 16 * 16 + 63) / 64, vo_blocks = (key.head_dim_vo + 63) / 64;
  const size_t q = block_m * qk_blocks * 128, stage = block_n * (qk_blocks + vo_blocks) * 128;
  return q + key.tile.stages * stage + 1024;  // 1024: the swizzle's alignment, found at run time
}

size_t tile_smem_bytes(const KernelKey& key) {
  return key.tile.wgmma ? wgmma_tile_smem_bytes(key) : mma_tile_smem_bytes(key);
}

bool tile_fits_shared_memory(const KernelKey& key) {
  return tile_smem_bytes(key) + (key.mask_mod.empty() ? 0 : kMaskStaticSmemBytes) <= kMaxSharedBytes;
}

bool wgmma_serves(const KernelKey& key, const std::string& arch) {
  return (arch == "sm_90" || arch == "sm_90a") && key.tensor_cores() && !key.latent && key.head_dim_qk % 8 == 0 &&
         key.head_dim_vo % 8 == 0 && key.head_dim_vo <= 256 && (key.dtype == DType::bf16 || key.dtype == DType::f16);
}

std::string compile_arch(const KernelKey& key, const std::string& arch) {
  return key.tensor_cores() && key.tile.wgmma && arch == "sm_90" ? "sm_90a" : arch;
}

std::string render_wgmma_tile(const KernelKey& key, bool pdl) {
  ATTNKIT_CHECK(key.tensor_cores() && (key.dtype == DType::bf16 || key.dtype == DType::f16),
                "jit: the wgmma_tile kernel reads q and cache of one dtype, bf16 or f16; got ", dtype_name(key.dtype),
                " over ", dtype_name(key.kv_dtype));
  const TileConfig& t = key.tile;
  ATTNKIT_CHECK(t.wgmma && t.warps_m % 4 == 0 && t.warps_n == 1 && t.m_tiles == 1 && t.block_n % 64 == 0,
                "jit: tile ", t.describe(), " is not one of the wgmma template's (warpgroups of 64 rows, 64-key steps)");
  ATTNKIT_CHECK(key.head_dim_qk % 8 == 0 && key.head_dim_vo % 8 == 0 && key.head_dim_vo <= 256,
                "jit: the wgmma_tile kernel takes head dims that are multiples of 8, vo up to 256, got ",
                key.head_dim_qk, "/", key.head_dim_vo);
  std::string s = kWgmmaTileTemplate;
  replace_all(s, "$WGMMA_FUNCTIONS", wgmma_functions(t.block_n, key.head_dim_vo, key.dtype == DType::bf16));
  render_tile_common(s, key);
  replace_all(s, "$WGS", std::to_string(t.warps_m / 4));
  replace_all(s, "$SMEM_BYTES", std::to_string(wgmma_tile_smem_bytes(key)));
  replace_all(s, "$MIN_CTAS", "1");
  return resolve_flags(s, {{"PDL", pdl}});
}

bool pdl_arch(const std::string& arch) {
  int major_minor = 0;
  return std::sscanf(arch.c_str(), "sm_%d", &major_minor) == 1 && major_minor >= 90;
}

std::string render(const KernelKey& key, const std::string& arch) {
  if (!key.tensor_cores()) return render_warp_row(key);
  const bool pdl = pdl_arch(arch);
  return key.tile.wgmma ? render_wgmma_tile(key, pdl) : render_mma_tile(key, pdl);
}

}  // namespace attnkit::jit

namespace attnkit {

jit::KernelKey jit::kernel_key_for(const AttentionSpec& spec, const KvCacheConfig& cache, DType q_dtype) {
  spec.validate();
  KvCacheConfig on_gpu = cache;
  on_gpu.device = Device::cuda;  // the key, not the memory: rendering needs no GPU
  const std::string why = why_unsupported(jit::capabilities(), spec, on_gpu, nullptr, q_dtype);
  ATTNKIT_CHECK(why.empty(), "jit: ", why);
  KernelKey key;
  key.head_dim_qk = spec.head_dim_qk;
  key.head_dim_vo = spec.head_dim_vo;
  key.group = spec.group_size();
  key.page_size = cache.page_size;
  key.dtype = q_dtype;
  key.kv_dtype = cache.dtype;
  // why_unsupported above leaves only a plain 16-bit latent of the dims capabilities() names.
  key.latent = spec.is_mla();
  if (!spec.score_mod.empty()) key.score_mod = VariantExpr::parse(spec.score_mod, "score_mod").cuda_source();
  if (!spec.mask_mod.empty()) key.mask_mod = VariantExpr::parse(spec.mask_mod, "mask_mod").cuda_source();
  return key;
}

std::string jit_kernel_source(const AttentionSpec& spec, const KvCacheConfig& cache, DType q_dtype,
                              const std::string& tile) {
  jit::KernelKey key = jit::kernel_key_for(spec, cache, q_dtype);
  if (tile.empty()) {
    if (key.tensor_cores()) key.tile = jit::tile_candidates(key, false, "").front();
  } else {
    const std::optional<jit::TileConfig> t = jit::TileConfig::parse(tile);
    ATTNKIT_CHECK(t.has_value(), "jit: tile '", tile, "' is not one; expected e.g. \"n32 w4x1 m2 s3\"");
    key.tile = *t;
  }
  return jit::render(key);
}

#ifndef ATTNKIT_WITH_CUDA
// Without CUDA there is no NVRTC to compile with (module_cache.cc has the real ones).
std::vector<JitWarmup> jit_warmup(const ModelSpec&, const KvCacheConfig&, DType, const std::string&,
                                  const std::function<void(const JitWarmup&, int, int)>&) {
  throw Error("jit warmup: this attnkit is built without CUDA, so it has no NVRTC");
}
std::string jit_cache_dir() { return {}; }
void jit_restart_caches(const std::string&) {}
#endif

}  // namespace attnkit
