// The README's two library examples (readme_cpu.cc, readme_gpu.cc) as one program, compiled and run
// by the test suite: one model, one paged cache, `auto`, one plan for a batch, every layer's forward,
// on the GPU when there is one, else on the CPU.
#include <attnkit/attnkit.h>

#include <cstdio>
#include <vector>

int main() {
  const attnkit::Device device = attnkit::cuda_available() ? attnkit::Device::cuda : attnkit::Device::cpu;
  attnkit::ModelSpec model = attnkit::make_preset("llama3-8b", /*num_layers=*/2);
  attnkit::KvCache cache({.num_layers = 2, .num_pages = 64, .page_size = 16, .num_kv_heads = 8, .head_dim_k = 128,
                          .head_dim_v = 128, .dtype = attnkit::DType::bf16, .device = device});
  auto backend = attnkit::create_backend("auto", {&model, &cache});
  attnkit::ForwardBatch batch = attnkit::build_batch(cache, {{.prefix_len = 0, .num_new_tokens = 100}});
  backend->init_forward_metadata(batch);  // once per batch

  // q, k, v and out for the batch's 100 new tokens (bf16 bits; 0x3f80 is 1.0).
  const int64_t n = batch.num_tokens();
  std::vector<uint16_t> q(n * 32 * 128, 0x3f80), kv(n * 8 * 128, 0x3f80), out(n * 32 * 128);
  attnkit::Buffer q_buf(device, q.size() * 2), k_buf(device, kv.size() * 2), v_buf(device, kv.size() * 2),
      out_buf(device, out.size() * 2);
  q_buf.copy_from_host(q.data(), q.size() * 2);
  k_buf.copy_from_host(kv.data(), kv.size() * 2);
  v_buf.copy_from_host(kv.data(), kv.size() * 2);
  for (int layer = 0; layer < 2; ++layer) {
    backend->forward(layer, q_buf.view(attnkit::DType::bf16, {n, 32, 128}), k_buf.view(attnkit::DType::bf16, {n, 8, 128}),
                     v_buf.view(attnkit::DType::bf16, {n, 8, 128}), out_buf.view(attnkit::DType::bf16, {n, 32, 128}));
  }
  backend->synchronize();
  out_buf.copy_to_host(out.data(), out.size() * 2);
  // Every value of V is 1, so every output is 1.
  std::printf("%s on %s: out[0] = %g\n", backend->name().c_str(), attnkit::device_name(device).data(),
              attnkit::bf16_bits_to_float(out[0]));
  return attnkit::bf16_bits_to_float(out[0]) == 1.0f ? 0 : 1;
}
