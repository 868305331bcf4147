// CpuBackend: capabilities, one plan per layer shape and batch, and the run: store this step's
// K/V, run every unit on the pool (longest first), then merge the split-KV partials.
#include "backends/cpu/backend.h"

#include <algorithm>

#include "attnkit/registry.h"
#include "backends/cpu/kernels/bf16_dot.h"
#include "backends/cpu/kernels/epilogue.h"
#include "backends/cpu/kernels/kernels.h"
#include "hwy/aligned_allocator.h"

namespace attnkit {

namespace cpu {
struct AlignedFloats {
  hwy::AlignedFreeUniquePtr<float[]> data;
  size_t size = 0;
};
}  // namespace cpu

CpuBackend::CpuBackend(const BackendContext& context, cpu::ThreadPool* pool)
    : AttentionBackend(context), pool_(pool != nullptr ? *pool : cpu::ThreadPool::global()),
      simd_lanes_(cpu::simd_lanes_f32()) {
  for (int l = 0; l < model().num_layers(); ++l) {
    const cpu::PlanShape shape = cpu::plan_shape(model().layer(l));
    auto it = std::find(shapes_.begin(), shapes_.end(), shape);
    if (it == shapes_.end()) it = shapes_.insert(shapes_.end(), shape);
    layer_shape_.push_back(static_cast<int>(it - shapes_.begin()));
  }
  // Scratch is sized once, for the widest layer shape and either kernel, and reused by every call.
  size_t floats = 0;
  for (int l = 0; l < model().num_layers(); ++l) {
    const AttentionSpec& spec = model().layer(l);
    cpu::AttendParams p;
    static_cast<LayerParams&>(p) = layer_params(l);
    p.group_size = spec.group_size();
    p.kv_tile = cpu::rows_kv_tile(spec.head_dim_qk);
    const size_t merge = size_t(std::max(cpu::kBlockRows, spec.num_qo_heads)) * (spec.head_dim_vo + 1);
    floats = std::max({floats, cpu::rows_scratch_floats(p), cpu::heads_scratch_floats(p), merge});
  }
  for (int t = 0; t < pool_.num_threads(); ++t) {
    auto s = std::make_unique<cpu::AlignedFloats>();
    s->data = hwy::AllocateAligned<float>(floats);
    s->size = floats;
    scratch_.push_back(std::move(s));
  }
}

CpuBackend::~CpuBackend() = default;

size_t CpuBackend::workspace_bytes() const {
  size_t bytes = (partial_o_.capacity() + partial_lse_.capacity()) * sizeof(float);
  for (const auto& s : scratch_) bytes += s->size * sizeof(float);
  return bytes;
}

const cpu::Plan& CpuBackend::layer_plan(int layer) const {
  ATTNKIT_CHECK(layer >= 0 && layer < static_cast<int>(layer_shape_.size()) && !plans_.empty(),
                "cpu: no plan for layer ", layer, " (call init_forward_metadata first)");
  return plans_[static_cast<size_t>(layer_shape_[static_cast<size_t>(layer)])];
}

void CpuBackend::plan(const ForwardBatch& batch) {
  plans_.clear();
  int64_t partial_floats = 0;
  int64_t partial_rows = 0;
  for (const cpu::PlanShape& shape : shapes_) {
    plans_.push_back(cpu::make_plan(batch, shape, simd_lanes_));
    partial_rows = std::max(partial_rows, plans_.back().partial_rows);
    partial_floats = std::max(partial_floats, plans_.back().partial_rows * shape.head_dim_vo);
  }
  // Grow only: a serving loop alternates batch shapes, and the buffers stay warm.
  if (partial_o_.size() < static_cast<size_t>(partial_floats)) partial_o_.resize(static_cast<size_t>(partial_floats));
  if (partial_lse_.size() < static_cast<size_t>(partial_rows)) partial_lse_.resize(static_cast<size_t>(partial_rows));
}

cpu::AttendParams CpuBackend::params(int layer, const cpu::Plan& plan, const TensorView& q,
                                     const TensorView& out) const {
  const AttentionSpec& spec = model().layer(layer);
  const KvCacheConfig& c = cache().config();
  const ForwardBatch& b = batch();
  cpu::AttendParams p;
  static_cast<LayerParams&>(p) = layer_params(layer);
  p.q = q.data;
  p.q_dtype = q.dtype;
  p.out = out.data;
  p.out_dtype = out.dtype;
  p.lse = lse_output().empty() ? nullptr : lse_output().as<float>();
  p.k_pool = cache().k_pool(layer);
  p.v_pool = p.mla ? p.k_pool : cache().v_pool(layer);
  p.fp8_blocked_latent = c.latent_format == LatentFormat::fp8_blocked;
  p.k_slot_stride = p.fp8_blocked_latent ? static_cast<int64_t>(c.k_slot_bytes()) : int64_t{c.num_kv_heads} * c.head_dim_k;
  p.v_slot_stride = p.fp8_blocked_latent ? p.k_slot_stride : p.mla ? c.head_dim_k : int64_t{c.num_kv_heads} * c.head_dim_v;
  p.v_head_stride = p.mla ? 0 : c.head_dim_v;
  p.group_size = spec.group_size();
  p.q_scale = p.sm_scale * p.k_scale;
  p.sinks = spec.sinks.empty() ? nullptr : spec.sinks.data();
  p.kv_tile = plan.kv_tile;
  // vdpbf16ps where the CPU has it, unless the caller asked for the f32 products (both paths on one machine).
  p.bf16_dot = options().cpu_bf16_dot && cpu::bf16_dot_available();
  p.qo_indptr = b.qo_indptr.data();
  p.kv_page_indptr = b.kv_page_indptr.data();
  p.kv_page_indices = b.kv_page_indices.data();
  p.prefix_lens = b.prefix_lens.data();
  if (!b.custom_mask.empty()) {
    p.custom_mask = b.custom_mask.data();
    p.custom_mask_indptr = b.custom_mask_indptr.data();
  }
  return p;
}

void CpuBackend::run_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                            const TensorView& out) {
  store_new_kv(layer, k, v, host_out_cache_loc());
  const cpu::Plan& plan = layer_plan(layer);
  const cpu::AttendParams p = params(layer, plan, q, out);
  const int dv = p.head_dim_vo;
  pool_.run(static_cast<int64_t>(plan.units.size()), [&](int64_t idx, int thread) {
    const cpu::PlannedUnit& unit = plan.units[static_cast<size_t>(idx)];
    float* scratch = scratch_[static_cast<size_t>(thread)]->data.get();
    const cpu::UnitState state = plan.kernel == cpu::KernelKind::heads ? cpu::attend_heads(p, unit.work, scratch)
                                                                       : cpu::attend_rows(p, unit.work, scratch);
    if (unit.partial_row < 0) {
      cpu::write_rows(p, unit.work, state);
    } else {
      cpu::write_partial(p, unit.work, state, partial_o_.data() + unit.partial_row * dv,
                         partial_lse_.data() + unit.partial_row);
    }
  });
  pool_.run(static_cast<int64_t>(plan.merges.size()), [&](int64_t idx, int thread) {
    const cpu::MergeGroup& g = plan.merges[static_cast<size_t>(idx)];
    cpu::merge_partials(p, g.rows, g.num_parts, g.part_stride_rows, partial_o_.data() + g.first_partial_row * dv,
                        partial_lse_.data() + g.first_partial_row, scratch_[static_cast<size_t>(thread)]->data.get());
  });
}

void register_cpu_backend(Registry& registry) {
  registry.add({.name = "cpu",
                .description = "tiling + online softmax from the paged cache, split-KV decode, threads, SIMD",
                .device = Device::cpu,
                .capabilities = cpu::capabilities,
                .why_unavailable = {},
                .create = [](const BackendContext& ctx) -> std::unique_ptr<AttentionBackend> {
                  return std::make_unique<CpuBackend>(ctx);
                }});
}

}  // namespace attnkit
