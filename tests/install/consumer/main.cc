// An outside project's use of attnkit: the backends listed, compare() and copy() on small arrays,
// a preset, a cpu KvCache, the `cpu` backend's forward once, every output finite. Where attnkit has CUDA, its CUDA backends must be
// listed, and with a GPU present cuda-naive and (CONSUMER_WITH_CUDA) a kernel of this project run too.
#include <attnkit/attnkit.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#ifdef CONSUMER_WITH_CUDA
bool device_roundtrip();  // device.cu
#endif

namespace {

// One forward of layer 0 of a two-request batch; true when every output value is finite.
bool forward_is_finite(const std::string& backend_name, attnkit::Device device) {
  using attnkit::DType;
  const attnkit::ModelSpec model = attnkit::make_preset("llama3-8b", 1);
  const attnkit::AttentionSpec& spec = model.layer(0);
  attnkit::KvCacheConfig cfg = attnkit::KvCacheConfig::for_spec(spec, 1);
  cfg.num_pages = 8;
  cfg.page_size = 16;
  cfg.dtype = DType::bf16;
  cfg.device = device;
  attnkit::KvCache cache(cfg);
  auto backend = attnkit::create_backend(backend_name, {&model, &cache});
  const attnkit::ForwardBatch batch =
      attnkit::build_batch(cache, {{.prefix_len = 0, .num_new_tokens = 20}, {.prefix_len = 0, .num_new_tokens = 3}});
  backend->init_forward_metadata(batch);

  const int64_t n = batch.num_tokens();
  const int64_t q_elems = n * spec.num_qo_heads * spec.head_dim_qk, kv_elems = n * spec.num_kv_heads * spec.head_dim_qk;
  std::vector<uint16_t> q(static_cast<size_t>(q_elems)), kv(static_cast<size_t>(kv_elems));
  for (int64_t i = 0; i < q_elems; ++i) attnkit::store_from_float(q.data(), DType::bf16, i, std::sin(0.1f * i));
  for (int64_t i = 0; i < kv_elems; ++i) attnkit::store_from_float(kv.data(), DType::bf16, i, std::cos(0.3f * i));
  attnkit::Buffer q_buf(device, q.size() * 2), k_buf(device, kv.size() * 2), v_buf(device, kv.size() * 2),
      out_buf(device, q.size() * 2);
  q_buf.copy_from_host(q.data(), q.size() * 2);
  k_buf.copy_from_host(kv.data(), kv.size() * 2);
  v_buf.copy_from_host(kv.data(), kv.size() * 2);
  out_buf.fill_bytes(0xFF);  // NaN: an output never written is not finite
  const attnkit::TensorView out = out_buf.view(DType::bf16, {n, spec.num_qo_heads, spec.head_dim_vo});
  backend->forward(0, q_buf.view(DType::bf16, {n, spec.num_qo_heads, spec.head_dim_qk}),
                   k_buf.view(DType::bf16, {n, spec.num_kv_heads, spec.head_dim_qk}),
                   v_buf.view(DType::bf16, {n, spec.num_kv_heads, spec.head_dim_vo}), out);
  backend->synchronize();

  std::vector<uint16_t> host(static_cast<size_t>(out.numel()));
  attnkit::copy(attnkit::TensorView(host.data(), DType::bf16, attnkit::Device::cpu, {out.numel()}), out);
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (!std::isfinite(attnkit::load_as_float(host.data(), DType::bf16, i))) {
      std::printf("%s: output %lld is not finite\n", backend_name.c_str(), static_cast<long long>(i));
      return false;
    }
  }
  std::printf("%s on %s: %lld outputs, all finite\n", backend_name.c_str(), attnkit::device_name(device).data(),
              static_cast<long long>(out.numel()));
  return true;
}

// compare() finds the worst element; copy() refuses views of different sizes, naming both.
bool compare_and_copy_checks() {
  using attnkit::DType;
  using attnkit::TensorView;
  float got[3] = {1.0f, 2.0f, 3.5f}, want[3] = {1.0f, 2.0f, 3.0f};
  const attnkit::Comparison c = attnkit::compare(TensorView(got, DType::f32, attnkit::Device::cpu, {3}),
                                                 TensorView(want, DType::f32, attnkit::Device::cpu, {3}));
  if (c.worst != 2 || c.max_abs_err != 0.5 || c.within(0.1) || !c.within(0.2)) {
    std::printf("compare: worst %lld, max_abs_err %g, rel_err %g\n", static_cast<long long>(c.worst), c.max_abs_err,
                c.rel_err);
    return false;
  }
  try {
    attnkit::copy(TensorView(got, DType::f32, attnkit::Device::cpu, {3}),
                  TensorView(want, DType::f32, attnkit::Device::cpu, {2}));
  } catch (const attnkit::Error& e) {
    if (std::strstr(e.what(), "elements") != nullptr) return true;
    std::printf("copy: unexpected error: %s\n", e.what());
    return false;
  }
  std::printf("copy: views of 3 and 2 elements were copied\n");
  return false;
}

}  // namespace

int main() {
  try {
    std::printf("backends:");
    for (const std::string& name : attnkit::Registry::global().names()) std::printf(" %s", name.c_str());
    std::printf("\n");
    if (!compare_and_copy_checks()) return 1;
    if (!forward_is_finite("cpu", attnkit::Device::cpu)) return 1;
#ifdef ATTNKIT_WITH_CUDA
    attnkit::Registry::global().get("cuda-naive");  // throws where the CUDA backends are missing
    std::string why;
    if (!attnkit::cuda_available(&why)) {
      std::printf("skipping the GPU run: %s\n", why.c_str());
      return 0;
    }
    if (!forward_is_finite("cuda-naive", attnkit::Device::cuda)) return 1;
#ifdef CONSUMER_WITH_CUDA
    if (!device_roundtrip()) return 1;
#endif
#endif
    return 0;
  } catch (const attnkit::Error& e) {
    std::printf("attnkit error: %s\n", e.what());
    return 1;
  }
}
