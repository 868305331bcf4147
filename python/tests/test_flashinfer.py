"""The FlashInfer-shaped wrappers against the reference backend on the CPU: decode and prefill over
(k_cache, v_cache) per layer, one plan for all layers, k and v stored by run or already in the cache."""
import pytest
import torch

import attnkit
from conftest import page_table, qkv, reference_step

NUM_PAGES, PAGE_SIZE = 32, 4


def layer_caches(num_layers, spec, seed=7):
    g = torch.Generator().manual_seed(seed)
    shape = (NUM_PAGES, PAGE_SIZE, spec.num_kv_heads, spec.head_dim_qk)
    return [(torch.randn(shape, generator=g), torch.randn(shape, generator=g)) for _ in range(num_layers)]


def test_decode_wrapper_matches_reference_on_every_layer():
    spec = attnkit.AttentionSpec(8, 2, 32)
    caches = layer_caches(3, spec)
    qo, kv_indptr, indices, last = page_table([9, 0, 22], [1, 1, 1], PAGE_SIZE, NUM_PAGES)
    wrapper = attnkit.BatchDecodeWithPagedKVCacheWrapper(torch.empty(1), "NHD", backend="cpu")
    wrapper.plan(kv_indptr, indices, last, 8, 2, 32, PAGE_SIZE)
    batch = attnkit.Batch(qo, kv_indptr, indices, last, page_size=PAGE_SIZE)
    for layer, cache in enumerate(caches):
        q, k, v = qkv(3, spec, seed=layer)
        out = wrapper.run(q, cache, k=k, v=v)
        expected = reference_step(spec, None, [cache], batch, 0, q, k, v)
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    # One backend over the three layers' tensors, planned once for the step.
    assert wrapper.backend.name == "cpu" and len(wrapper._pools) == 3


def test_decode_wrapper_reads_tokens_already_in_the_cache():
    spec = attnkit.AttentionSpec(4, 4, 16)
    cache = layer_caches(1, spec)[0]
    qo, kv_indptr, indices, last = page_table([5, 13], [1, 1], PAGE_SIZE, NUM_PAGES, seed=2)
    wrapper = attnkit.BatchDecodeWithPagedKVCacheWrapper(None, backend="cpu")
    wrapper.plan(kv_indptr, indices, last, 4, 4, 16, PAGE_SIZE)
    q = torch.randn(2, 4, 16)
    before = cache[0].clone()
    out = wrapper.run(q, cache)  # as after flashinfer.page.append_paged_kv_cache: no k, v given
    assert torch.equal(cache[0], before)
    batch = attnkit.Batch(qo, kv_indptr, indices, last, page_size=PAGE_SIZE)
    slots = torch.from_numpy(batch.out_cache_loc.copy())
    k = cache[0].reshape(-1, 4, 16)[slots]
    v = cache[1].reshape(-1, 4, 16)[slots]
    torch.testing.assert_close(out, reference_step(spec, None, [cache], batch, 0, q, k, v), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal", [True, False])
def test_prefill_wrapper_matches_reference(causal):
    spec = attnkit.AttentionSpec(4, 2, 32, causal=causal, window_left=6)
    cache = torch.randn(2, NUM_PAGES, PAGE_SIZE, 2, 32)  # one [2, num_pages, ...] tensor: K then V
    qo, kv_indptr, indices, last = page_table([3, 0], [7, 5], PAGE_SIZE, NUM_PAGES, seed=4)
    wrapper = attnkit.BatchPrefillWithPagedKVCacheWrapper(torch.empty(1), "NHD", backend="cpu")
    wrapper.plan(qo, kv_indptr, indices, last, 4, 2, 32, PAGE_SIZE, causal=causal, window_left=6)
    q, k, v = qkv(12, spec, seed=9)
    out = torch.empty(12, 4, 32)
    assert wrapper.run(q, cache, out=out, k=k, v=v) is out
    batch = attnkit.Batch(qo, kv_indptr, indices, last, page_size=PAGE_SIZE)
    torch.testing.assert_close(out, reference_step(spec, None, [(cache[0], cache[1])], batch, 0, q, k, v),
                               rtol=1e-4, atol=1e-5)


def test_a_new_spec_at_plan_gets_a_new_backend():
    spec = attnkit.AttentionSpec(2, 1, 16, sm_scale=0.5)
    cache = layer_caches(1, spec)[0]
    qo, kv_indptr, indices, last = page_table([4], [1], PAGE_SIZE, NUM_PAGES, seed=6)
    wrapper = attnkit.BatchDecodeWithPagedKVCacheWrapper(None, backend="cpu")
    q, k, v = qkv(1, spec, seed=2)
    outs = []
    for scale in (0.5, 0.25):
        wrapper.plan(kv_indptr, indices, last, 2, 1, 16, PAGE_SIZE, sm_scale=scale)
        outs.append(wrapper.run(q, cache, k=k, v=v))
    batch = attnkit.Batch(qo, kv_indptr, indices, last, page_size=PAGE_SIZE)
    expected = reference_step(attnkit.AttentionSpec(2, 1, 16, sm_scale=0.25), None, [cache], batch, 0, q, k, v)
    torch.testing.assert_close(outs[1], expected, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(outs[0], outs[1])


def test_prefill_wrapper_custom_mask():
    spec = attnkit.AttentionSpec(2, 1, 16, causal=False)
    cache = layer_caches(1, spec)[0]
    qo, kv_indptr, indices, last = page_table([2, 1], [3, 2], PAGE_SIZE, NUM_PAGES, seed=5)
    g = torch.Generator().manual_seed(1)
    mask = torch.rand(3 * 5 + 2 * 3, generator=g) > 0.4
    mask[0] = mask[15] = True  # every row sees something is not needed, but keep one visible key
    wrapper = attnkit.BatchPrefillWithPagedKVCacheWrapper(None, backend="cpu")
    wrapper.plan(qo, kv_indptr, indices, last, 2, 1, 16, PAGE_SIZE, custom_mask=mask)
    q, k, v = qkv(5, spec, seed=3)
    out = wrapper.run(q, cache, k=k, v=v)
    ref_wrapper = attnkit.BatchPrefillWithPagedKVCacheWrapper(None, backend="reference")
    ref_wrapper.plan(qo, kv_indptr, indices, last, 2, 1, 16, PAGE_SIZE, custom_mask=mask)
    copy = (cache[0].clone(), cache[1].clone())
    torch.testing.assert_close(out, ref_wrapper.run(q, copy, k=k, v=v), rtol=1e-4, atol=1e-5)


def test_wrapper_refusals():
    wrapper = attnkit.BatchDecodeWithPagedKVCacheWrapper(None, backend="cpu")
    with pytest.raises(attnkit.Error, match=r"^run: plan\(\) must be called before run\(\)$"):
        wrapper.run(torch.zeros(1, 2, 16), (torch.zeros(4, 4, 1, 16), torch.zeros(4, 4, 1, 16)))
    with pytest.raises(attnkit.Error, match="^wrapper: kv_layout must be 'NHD'"):
        attnkit.BatchDecodeWithPagedKVCacheWrapper(None, "HND")
    with pytest.raises(attnkit.Error, match="^plan: pos_encoding_mode must be 'NONE'"):
        wrapper.plan(torch.tensor([0, 1]), torch.tensor([0]), torch.tensor([1]), 2, 1, 16, 4,
                     pos_encoding_mode="ROPE_LLAMA")
    wrapper.plan(torch.tensor([0, 1]), torch.tensor([0]), torch.tensor([1]), 2, 1, 16, 4)
    with pytest.raises(attnkit.Error, match=r"K and V interleaved by page\) is not an attnkit layout"):
        wrapper.run(torch.zeros(1, 2, 16), torch.zeros(4, 2, 4, 1, 16))


def test_return_lse_where_the_backend_writes_it():
    spec = attnkit.AttentionSpec(2, 1, 16)
    k_cache, v_cache = layer_caches(1, spec)[0]
    qo, kv_indptr, indices, last = page_table([6], [3], PAGE_SIZE, NUM_PAGES, seed=8)
    wrapper = attnkit.BatchPrefillWithPagedKVCacheWrapper(None, backend="reference")
    wrapper.plan(qo, kv_indptr, indices, last, 2, 1, 16, PAGE_SIZE, causal=True)
    q, k, v = qkv(3, spec, seed=1)
    out, lse = wrapper.run(q, (k_cache, v_cache), k=k, v=v, return_lse=True)
    # The same from the formula: request 0's 9 keys, the new 3 rows at positions 6, 7, 8, causal.
    keys = k_cache.reshape(-1, 1, 16)[torch.tensor(
        [indices[p // PAGE_SIZE] * PAGE_SIZE + p % PAGE_SIZE for p in range(9)])][:, 0]
    scores = torch.einsum("thd,sd->ths", q, keys) / 4.0
    visible = torch.arange(9)[None, :] <= torch.arange(6, 9)[:, None]
    expected = torch.logsumexp(scores.masked_fill(~visible[:, None, :], float("-inf")), dim=-1)
    torch.testing.assert_close(lse, expected, rtol=1e-5, atol=1e-5)
    assert out.shape == (3, 2, 16)


def test_merge_state():
    g = torch.Generator().manual_seed(0)
    v_a, v_b = torch.randn(3, 2, 8, generator=g), torch.randn(3, 2, 8, generator=g)
    s_a, s_b = torch.randn(3, 2, generator=g), torch.randn(3, 2, generator=g)
    s_b[0, 0] = float("-inf")  # an empty part contributes nothing
    v, s = attnkit.merge_state(v_a, s_a, v_b, s_b)
    lse = torch.logaddexp(s_a, s_b)
    expected = v_a * torch.exp(s_a - lse)[..., None] + v_b * torch.exp(s_b - lse)[..., None]
    torch.testing.assert_close(v, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(s, lse)
    torch.testing.assert_close(v[0, 0], v_a[0, 0])
    with pytest.raises(attnkit.Error, match=r"^merge_states: parts\[1\] must match out's shape"):
        attnkit.merge_states([(v_a, s_a), (v_b[:2], s_b[:2])])
