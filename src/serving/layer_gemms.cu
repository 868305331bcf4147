// cuBLAS bf16 matrix products of one transformer layer (qkv, o, MLP gate/up/down) with a small
// SiLU-and-multiply kernel between them, and the GPU event set used to time attention's share.
#include "serving/layer_gemms.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "attnkit/error.h"

// A failed CUDA or cuBLAS call throws attnkit::Error naming the call (the expression) and the error.
#define SERVING_CUDA_CHECK(expr) ::attnkit::serving::cuda_ok((expr), #expr)
#define SERVING_CUBLAS_CHECK(expr) ::attnkit::serving::cublas_ok((expr), #expr)

namespace attnkit::serving {

namespace {

void cuda_ok(cudaError_t err, const char* call) {
  if (err != cudaSuccess) throw Error(detail::concat("CUDA error in ", call, ": ", cudaGetErrorString(err)));
}

void cublas_ok(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw Error(detail::concat("cuBLAS error in ", call, ": ", cublasGetStatusString(status)));
  }
}

// After a kernel launch: `kernel` names it and its size.
void launch_ok(const std::string& kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw Error(detail::concat("CUDA launch failed: ", kernel, ": ", cudaGetErrorString(err)));
}

// Small values with no structure (a hash of the index): matrix products on zeros can run faster
// than on real data, and large values would overflow bf16 across 28k-wide sums.
__global__ void fill_kernel(__nv_bfloat16* g_out, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B1u ^ seed;
    h ^= h >> 15;
    h *= 0x85EBCA77u;
    h ^= h >> 13;
    const float u = static_cast<float>(h & 0xFFFFu) / 65536.0f - 0.5f;
    g_out[i] = __float2bfloat16(u * scale);
  }
}

// act[t, j] = silu(gate[t, j]) * up[t, j], with gate|up side by side in one [T, 2 * inter] row.
__global__ void silu_mul_kernel(const __nv_bfloat16* g_gate_up, __nv_bfloat16* g_act, int num_tokens, int inter) {
  const size_t n = size_t(num_tokens) * inter;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const size_t t = i / inter, j = i % inter;
    const float g = __bfloat162float(g_gate_up[t * 2 * inter + j]);
    const float u = __bfloat162float(g_gate_up[t * 2 * inter + inter + j]);
    g_act[i] = __float2bfloat16(g / (1.0f + __expf(-g)) * u);
  }
}

constexpr int kFillThreads = 256;
constexpr int kFillBlocks = 1024;

__nv_bfloat16* alloc_filled(size_t n, uint32_t seed, float scale) {
  __nv_bfloat16* p = nullptr;
  SERVING_CUDA_CHECK(cudaMalloc(&p, n * sizeof(__nv_bfloat16)));
  fill_kernel<<<kFillBlocks, kFillThreads>>>(p, n, seed, scale);
  launch_ok(detail::concat("serving fill_kernel n=", n));
  return p;
}

}  // namespace

GemmShapes gemm_shapes(const ModelSpec& model) {
  const AttentionSpec& s = model.layer(0);
  GemmShapes g;
  g.hidden = model.hidden_size;
  // MLA runs in the absorbed form: the queries [num_qo_heads, rank + rope] and one latent row per
  // token come out of the projection; the real model's low-rank factors are folded into these widths.
  g.qkv = s.is_mla() ? s.num_qo_heads * s.head_dim_qk + s.head_dim_qk
                     : s.num_qo_heads * s.head_dim_qk + s.num_kv_heads * (s.head_dim_qk + s.head_dim_vo);
  g.attn_out = s.num_qo_heads * s.head_dim_vo;
  g.intermediate = model.intermediate_size;
  return g;
}

struct LayerGemms::Impl {
  GemmShapes shape;
  int max_tokens = 0;
  cublasHandle_t handle = nullptr;
  // Weights, row-major [in, out]: w_qkv [hidden, qkv], w_o [attn_out, hidden],
  // w_gate_up [hidden, 2 * inter], w_down [inter, hidden].
  __nv_bfloat16 *w_qkv = nullptr, *w_o = nullptr, *w_gate_up = nullptr, *w_down = nullptr;
  // Activations: x [max_tokens, hidden], qkv [max_tokens, qkv], gate_up [max_tokens, 2 * inter],
  // act [max_tokens, inter].
  __nv_bfloat16 *x = nullptr, *qkv = nullptr, *gate_up = nullptr, *act = nullptr;

  // y [T, out] = a [T, in] * w [in, out], all row-major: in cuBLAS's column-major terms
  // y^T [out, T] = w^T [out, in] * a^T [in, T], so w goes first and nothing is transposed.
  void gemm(const __nv_bfloat16* a, const __nv_bfloat16* w, __nv_bfloat16* y, int num_tokens, int in, int out) {
    const float alpha = 1.0f, beta = 0.0f;
    SERVING_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, out, num_tokens, in, &alpha, w, CUDA_R_16BF,
                                      out, a, CUDA_R_16BF, in, &beta, y, CUDA_R_16BF, out, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
  }
};

LayerGemms::LayerGemms(const ModelSpec& model, int max_tokens) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.shape = gemm_shapes(model);
  m.max_tokens = max_tokens;
  ATTNKIT_CHECK(m.shape.hidden > 0 && m.shape.intermediate > 0, "layer gemms: model ", model.name,
                " needs hidden_size and intermediate_size, got ", m.shape.hidden, " and ", m.shape.intermediate);
  SERVING_CUBLAS_CHECK(cublasCreate(&m.handle));
  // The backends launch on the per-thread default stream (attnkit is built with
  // --default-stream=per-thread); cuBLAS's own default would be the legacy stream.
  SERVING_CUBLAS_CHECK(cublasSetStream(m.handle, cudaStreamPerThread));
  const size_t h = m.shape.hidden, q = m.shape.qkv, o = m.shape.attn_out, i = m.shape.intermediate;
  const size_t t = static_cast<size_t>(max_tokens);
  const float w_scale = 0.04f;  // ~1/sqrt(hidden) for hidden in the thousands keeps outputs near 1
  m.w_qkv = alloc_filled(h * q, 1, w_scale);
  m.w_o = alloc_filled(o * h, 2, w_scale);
  m.w_gate_up = alloc_filled(h * 2 * i, 3, w_scale);
  m.w_down = alloc_filled(i * h, 4, w_scale);
  m.x = alloc_filled(t * h, 5, 1.0f);
  m.qkv = alloc_filled(t * q, 6, 1.0f);
  m.gate_up = alloc_filled(t * 2 * i, 7, 1.0f);
  m.act = alloc_filled(t * i, 8, 1.0f);
  SERVING_CUDA_CHECK(cudaDeviceSynchronize());
}

LayerGemms::~LayerGemms() {
  Impl& m = *impl_;
  for (__nv_bfloat16* p : {m.w_qkv, m.w_o, m.w_gate_up, m.w_down, m.x, m.qkv, m.gate_up, m.act}) cudaFree(p);
  if (m.handle) cublasDestroy(m.handle);
}

void LayerGemms::before_attention(int num_tokens) {
  Impl& m = *impl_;
  m.gemm(m.x, m.w_qkv, m.qkv, num_tokens, m.shape.hidden, m.shape.qkv);
}

void LayerGemms::after_attention(int num_tokens, const void* attn_out) {
  Impl& m = *impl_;
  const auto* a = static_cast<const __nv_bfloat16*>(attn_out);
  m.gemm(a, m.w_o, m.x, num_tokens, m.shape.attn_out, m.shape.hidden);
  m.gemm(m.x, m.w_gate_up, m.gate_up, num_tokens, m.shape.hidden, 2 * m.shape.intermediate);
  silu_mul_kernel<<<kFillBlocks, kFillThreads>>>(m.gate_up, m.act, num_tokens, m.shape.intermediate);
  launch_ok(detail::concat("serving silu_mul_kernel tokens=", num_tokens));
  m.gemm(m.act, m.w_down, m.x, num_tokens, m.shape.intermediate, m.shape.hidden);
}

size_t LayerGemms::weight_bytes() const {
  const GemmShapes& s = impl_->shape;
  return sizeof(__nv_bfloat16) * (size_t(s.hidden) * s.qkv + size_t(s.attn_out) * s.hidden +
                                  size_t(s.hidden) * 3 * s.intermediate);
}

size_t LayerGemms::activation_bytes() const {
  const GemmShapes& s = impl_->shape;
  return sizeof(__nv_bfloat16) * size_t(impl_->max_tokens) * (s.hidden + s.qkv + 3 * size_t(s.intermediate));
}

struct GpuEvents::Impl {
  std::vector<cudaEvent_t> events;
};

GpuEvents::GpuEvents(int count) : impl_(std::make_unique<Impl>()) {
  impl_->events.resize(static_cast<size_t>(count));
  for (cudaEvent_t& e : impl_->events) SERVING_CUDA_CHECK(cudaEventCreate(&e));
}

GpuEvents::~GpuEvents() {
  for (cudaEvent_t e : impl_->events) cudaEventDestroy(e);
}

void GpuEvents::record(int idx) { SERVING_CUDA_CHECK(cudaEventRecord(impl_->events.at(static_cast<size_t>(idx)))); }

void GpuEvents::synchronize(int idx) {
  SERVING_CUDA_CHECK(cudaEventSynchronize(impl_->events.at(static_cast<size_t>(idx))));
}

float GpuEvents::elapsed_ms(int from, int to) const {
  float ms = 0.0f;
  SERVING_CUDA_CHECK(cudaEventElapsedTime(&ms, impl_->events.at(static_cast<size_t>(from)),
                                          impl_->events.at(static_cast<size_t>(to))));
  return ms;
}

}  // namespace attnkit::serving
