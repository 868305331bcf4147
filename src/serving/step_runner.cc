// StepRunner: the layer loop of a replay step. On the GPU each layer is qkv GEMM -> attention ->
// o GEMM -> MLP, with events around attention; on the CPU attention alone, timed by the host clock.
#include "serving/step_runner.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include "attnkit/error.h"
#include "serving/layer_gemms.h"

namespace attnkit::serving {

#ifndef ATTNKIT_WITH_CUDA
// Without CUDA there is no GPU work; these exist only so StepRunner's (always empty) members can be
// destroyed.
struct LayerGemms::Impl {};
LayerGemms::~LayerGemms() = default;
struct GpuEvents::Impl {};
GpuEvents::~GpuEvents() = default;
#endif

namespace {

using Clock = std::chrono::steady_clock;

// A random block of a prime number of elements, repeated: fast to make at any size, and no two rows
// of a head start at the same place in it.
constexpr int64_t kRandomBlock = 1000003;

void fill_host(StepRows& s, DType dtype, uint64_t seed) {
  const int64_t block = std::min(kRandomBlock, s.numel());
  const size_t esize = dtype_size(dtype);
  auto* base = static_cast<uint8_t*>(s.host_data());
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (int64_t i = 0; i < block; ++i) store_from_float(base, dtype, i, uniform(rng));
  for (int64_t off = block; off < s.numel(); off += block) {
    const int64_t len = std::min(block, s.numel() - off);
    std::memcpy(base + off * esize, base, static_cast<size_t>(len) * esize);
  }
  s.upload();
}

}  // namespace

StepRows::StepRows(Device device, DType dtype, int64_t num_rows, int heads, int dim)
    : dtype_(dtype), heads_(heads), dim_(dim), numel_(num_rows * heads * dim) {
  const size_t nbytes = static_cast<size_t>(numel_) * dtype_size(dtype);
  host_ = Buffer(Device::cpu, nbytes);
  if (device != Device::cpu) dev_ = Buffer(device, nbytes);
}

TensorView StepRows::rows(bool host, int64_t first, int num_tokens) const {
  const Buffer& b = host || dev_.data() == nullptr ? host_ : dev_;
  auto* data = static_cast<uint8_t*>(b.data()) + first * heads_ * dim_ * static_cast<int64_t>(dtype_size(dtype_));
  return TensorView(data, dtype_, b.device(), {num_tokens, heads_, dim_});
}

void StepRows::upload() {
  if (dev_.data()) dev_.copy_from_host(host_.data(), host_.nbytes());
}

void StepRows::download() {
  if (dev_.data()) dev_.copy_to_host(host_.data(), host_.nbytes());
}

StepRunner::StepRunner(const ModelSpec& model, LayerAttention& attention, Device device, DType dtype,
                       int max_tokens, bool gemms, uint64_t seed)
    : model_(model), attention_(attention), device_(device), max_tokens_(max_tokens) {
  const AttentionSpec& s = model.layer(0);
  mla_ = s.is_mla();
  num_qo_heads_ = s.num_qo_heads;
  num_kv_heads_ = s.num_kv_heads;
  head_dim_qk_ = s.head_dim_qk;
  head_dim_vo_ = s.head_dim_vo;
  const int64_t rows = 2 * int64_t{max_tokens};
  q_ = std::make_unique<StepRows>(device, dtype, rows, num_qo_heads_, head_dim_qk_);
  k_ = std::make_unique<StepRows>(device, dtype, rows, num_kv_heads_, head_dim_qk_);
  fill_host(*q_, dtype, seed * 3 + 1);
  fill_host(*k_, dtype, seed * 3 + 2);
  if (!mla_) {
    v_ = std::make_unique<StepRows>(device, dtype, rows, num_kv_heads_, head_dim_vo_);
    fill_host(*v_, dtype, seed * 3 + 3);
  }
  out_ = std::make_unique<StepRows>(device, dtype, max_tokens, num_qo_heads_, head_dim_vo_);
  check_ = std::make_unique<StepRows>(device, dtype, max_tokens, num_qo_heads_, head_dim_vo_);
#ifdef ATTNKIT_WITH_CUDA
  if (device == Device::cuda) {
    ATTNKIT_CHECK(!gemms || dtype == DType::bf16, "replay: the layer GEMMs run in bf16, so --dtype must be bf16, got ",
                  dtype_name(dtype));
    if (gemms) gemms_ = std::make_unique<LayerGemms>(model, max_tokens);
    events_ = std::make_unique<GpuEvents>(2 * model.num_layers() + 2);
  }
#else
  (void)gemms;
#endif
}

StepRunner::~StepRunner() = default;

size_t StepRunner::weight_bytes() const {
#ifdef ATTNKIT_WITH_CUDA
  if (gemms_) return gemms_->weight_bytes();
#endif
  return 0;
}

int64_t StepRunner::row_offset(int64_t step, int layer) const {
  // Any window of max_tokens rows fits in the 2 * max_tokens rows; 7919 and 104729 are primes.
  return (step * 7919 + int64_t{layer} * 104729) % max_tokens_;
}

TensorView StepRunner::q_host(int64_t step, int layer, int n) const {
  return q_->rows(true, row_offset(step, layer), n);
}
TensorView StepRunner::k_host(int64_t step, int layer, int n) const {
  return k_->rows(true, row_offset(step, layer), n);
}
TensorView StepRunner::v_host(int64_t step, int layer, int n) const {
  return mla_ ? TensorView() : v_->rows(true, row_offset(step, layer), n);
}

TensorView StepRunner::check_out(int n) {
  check_->download();
  return check_->rows(true, 0, n);
}

void StepRunner::run(const ForwardBatch& batch, int64_t step, int check_layer, StepRecord& record) {
  const int n = batch.num_tokens();
  ATTNKIT_CHECK(n <= max_tokens_, "replay: a step of ", n, " tokens exceeds the token budget ", max_tokens_);
  const int num_layers = model_.num_layers();
  double cpu_attn_ms = 0.0;
#ifdef ATTNKIT_WITH_CUDA
  const bool on_gpu = device_ == Device::cuda;
  if (on_gpu) events_->record(0);
#endif
  for (int layer = 0; layer < num_layers; ++layer) {
    const int64_t off = row_offset(step, layer);
    const TensorView q = q_->rows(false, off, n);
    const TensorView k = k_->rows(false, off, n);
    const TensorView v = mla_ ? TensorView() : v_->rows(false, off, n);
    const TensorView out = (layer == check_layer ? *check_ : *out_).rows(false, 0, n);
#ifdef ATTNKIT_WITH_CUDA
    if (on_gpu) {
      if (gemms_) gemms_->before_attention(n);
      events_->record(2 * layer + 1);
      attention_.forward(layer, q, k, v, out);
      events_->record(2 * layer + 2);
      if (gemms_) gemms_->after_attention(n, out.data);
      continue;
    }
#endif
    const auto t0 = Clock::now();
    attention_.forward(layer, q, k, v, out);
    attention_.synchronize();
    cpu_attn_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }
#ifdef ATTNKIT_WITH_CUDA
  if (on_gpu) {
    const int last = 2 * num_layers + 1;
    events_->record(last);
    events_->synchronize(last);
    float attn = 0.0f;
    for (int layer = 0; layer < num_layers; ++layer) attn += events_->elapsed_ms(2 * layer + 1, 2 * layer + 2);
    record.attn_ms = attn;
    record.gemm_ms = events_->elapsed_ms(0, last) - attn;
    return;
  }
#endif
  record.attn_ms = static_cast<float>(cpu_attn_ms);
  record.gemm_ms = 0.0f;
}

}  // namespace attnkit::serving
