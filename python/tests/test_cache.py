"""KvCache over the engine's own tensors: the layouts SGLang and vLLM allocate, zero copy, kept alive,
and the checks on them."""
import pytest
import torch

import attnkit
from conftest import page_table, qkv, reference_step

SPEC = attnkit.AttentionSpec(4, 2, 32)


def run_step(cache, pools, layer=1):
    """One extend step through `cache`, compared with the reference over the same pools."""
    batch = attnkit.Batch(*page_table([6, 0], [3, 5], cache.page_size, cache.num_pages, seed=3),
                          page_size=cache.page_size)
    backend = attnkit.Backend("cpu", SPEC, cache)
    backend.plan(batch)
    q, k, v = qkv(batch.num_tokens, SPEC, seed=4)
    out = torch.empty_like(q)
    backend.forward(layer, q, k, v, out)
    torch.testing.assert_close(out, reference_step(SPEC, None, pools, batch, layer, q, k, v), rtol=1e-4, atol=1e-5)
    slots = torch.from_numpy(batch.out_cache_loc.copy())
    torch.testing.assert_close(pools[layer][1].reshape(-1, 2, 32)[slots], v)


def test_one_tensor_for_all_layers():
    kv = torch.randn(3, 2, 16, 4, 2, 32)  # [num_layers, 2, num_pages, page_size, num_kv_heads, head_dim]
    cache = attnkit.KvCache.from_pools(kv)
    assert (cache.num_layers, cache.num_pages, cache.page_size, cache.dtype) == (3, 16, 4, "f32")
    assert not cache.owns_pools
    assert torch.from_dlpack(cache.v_pool(2)).data_ptr() == kv[2, 1].data_ptr()
    run_step(cache, [(kv[l, 0], kv[l, 1]) for l in range(3)])


def test_one_tensor_a_layer_as_vllm():
    layers = [torch.randn(2, 16, 4, 2, 32) for _ in range(2)]  # [2, num_blocks, block_size, heads, dim]
    cache = attnkit.KvCache.from_pools(layers)
    run_step(cache, [(t[0], t[1]) for t in layers])


def test_k_and_v_buffers_as_sglang():
    # SGLang's token pools: [num_slots, heads, dim] per layer, with the page size beside them.
    k = [torch.randn(64, 2, 32) for _ in range(2)]
    v = [torch.randn(64, 2, 32) for _ in range(2)]
    cache = attnkit.KvCache.from_pools(k_pools=k, v_pools=v, page_size=4)
    assert cache.num_pages == 16
    run_step(cache, [(a.view(16, 4, 2, 32), b.view(16, 4, 2, 32)) for a, b in zip(k, v)])


def test_the_pools_live_as_long_as_the_cache():
    kv = torch.zeros(1, 2, 4, 4, 2, 32)
    ptr = kv.data_ptr()
    cache = attnkit.KvCache.from_pools(kv)
    del kv  # the engine drops its name; the cache still holds the tensor
    pool = torch.from_dlpack(cache.k_pool(0))
    assert pool.data_ptr() == ptr and float(pool.abs().sum()) == 0.0


def test_pool_checks():
    with pytest.raises(attnkit.Error) as e:
        attnkit.KvCache.from_pools(torch.zeros(2, 16, 2, 4, 2, 32))
    assert str(e.value) == ("KvCache.from_pools: kv_pool must be [num_layers, 2, num_pages, page_size, num_kv_heads, "
                            "head_dim], got [2, 16, 2, 4, 2, 32] float32 cpu, strides [8192, 512, 256, 64, 32, 1]")
    with pytest.raises(attnkit.Error) as e:
        attnkit.KvCache.from_pools(torch.zeros(4, 2, 1, 8, 2, 32).transpose(0, 2))
    assert str(e.value) == ("KvCache.from_pools: kv_pool must be contiguous, got [1, 2, 4, 8, 2, 32] float32 cpu, "
                            "strides [512, 512, 1024, 64, 32, 1]")
    with pytest.raises(attnkit.Error) as e:
        attnkit.KvCache.from_pools(k_pools=[torch.zeros(4, 4, 2, 32)], v_pools=[torch.zeros(4, 4, 2, 32).half()])
    assert str(e.value) == "KvCache.from_pools: v_pools[0] must have the shape, dtype and device of k_pools[0]"
    with pytest.raises(attnkit.Error) as e:
        attnkit.KvCache.from_pools(k_pools=[torch.zeros(64, 2, 32)], v_pools=[torch.zeros(64, 2, 32)])
    assert str(e.value) == ("KvCache.from_pools: k_pools[0] must be [num_pages, page_size, num_kv_heads, head_dim], "
                            "or [num_slots, num_kv_heads, head_dim] with page_size given, got [64, 2, 32] float32 cpu, "
                            "strides [64, 32, 1]")
    with pytest.raises(attnkit.Error) as e:
        attnkit.KvCache.from_pools(k_pools=[torch.zeros(4, 4, 2, 32)])
    assert str(e.value) == "KvCache.from_pools: v_pools must be given with k_pools (one V pool a layer)"
    with pytest.raises(attnkit.Error) as e:
        attnkit.KvCache.from_pools(torch.zeros(1, 2, 4, 4, 2, 32, dtype=torch.int32))
    assert str(e.value) == "cache: dtype must be f32, f16, bf16 or e4m3, got i32"


def test_own_cache_arguments_are_checked():
    with pytest.raises(attnkit.Error) as e:
        attnkit.KvCache(1, 4, 300, 2, 32)
    assert str(e.value) == "cache: page_size must be in 1..256, got 300"
    with pytest.raises(attnkit.Error) as e:
        attnkit.KvCache(1, 4, 16, 2, 32, dtype="int8")
    assert str(e.value) == "KvCache: dtype must be one of f32, f16, bf16, e4m3, got 'int8'"


def test_an_fp8_blocked_latent_cache_exports_its_slot_bytes():
    cache = attnkit.KvCache(1, 2, 64, 1, 576, head_dim_v=512, dtype="e4m3", mla=True, latent_format="fp8_blocked")
    assert cache.latent_format == "fp8_blocked"
    pool = torch.from_dlpack(cache.k_pool(0))
    assert pool.shape == (2, 64, 656) and pool.dtype == torch.uint8
    with pytest.raises(attnkit.Error) as e:
        attnkit.KvCache(1, 2, 64, 1, 576, head_dim_v=512, dtype="e4m3", mla=True, latent_format="fp8")
    assert str(e.value) == "KvCache: latent_format must be 'plain' or 'fp8_blocked', got 'fp8'"
    with pytest.raises(attnkit.Error) as e:
        attnkit.KvCache(1, 2, 64, 1, 576, head_dim_v=512, dtype="bf16", mla=True, latent_format="fp8_blocked")
    assert "fp8_blocked stores e4m3, so dtype must be e4m3, got bf16" in str(e.value)
