"""Backend from Python on the CPU: plan + forward against the reference backend, every mode, the
cache's own page tables and the engine's; what list_backends and select_backend say."""
import pytest
import torch

import attnkit
from conftest import page_table, qkv, reference_step


def make(spec, num_layers=2, num_pages=64, page_size=16, dtype="f32"):
    cache = attnkit.KvCache(num_layers, num_pages, page_size, spec.num_kv_heads, spec.head_dim_qk, dtype=dtype)
    return cache, [(torch.from_dlpack(cache.k_pool(l)), torch.from_dlpack(cache.v_pool(l))) for l in range(num_layers)]


@pytest.mark.parametrize("name", ["cpu", "reference"])
@pytest.mark.parametrize("prefix_lens,qo_lens", [([0, 0], [17, 5]), ([33, 1, 0], [1, 1, 1]), ([40, 0], [1, 9])],
                         ids=["extend", "decode", "mixed"])
def test_forward_matches_reference(name, prefix_lens, qo_lens):
    spec = attnkit.AttentionSpec(8, 2, 64, logits_soft_cap=30.0)
    cache, pools = make(spec, page_size=4)
    for k_pool, v_pool in pools:
        k_pool.normal_()
        v_pool.normal_()
    batch = attnkit.Batch(*page_table(prefix_lens, qo_lens, page_size=4, num_pages=64, seed=1), page_size=4)
    assert batch.mode == {1: "decode"}.get(max(qo_lens), "mixed" if 1 in qo_lens else "extend")
    backend = attnkit.Backend(name, spec, cache)
    backend.plan(batch)
    q, k, v = qkv(batch.num_tokens, spec, seed=2)
    expected = reference_step(spec, None, pools, batch, 1, q, k, v)
    out = torch.full_like(expected, float("nan"))
    assert backend.forward(1, q, k, v, out) is out
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    # The store went into the pools the caller sees: the new tokens' k at their slots.
    slots = torch.from_numpy(batch.out_cache_loc.copy())
    torch.testing.assert_close(pools[1][0].reshape(-1, 2, 64)[slots], k)


def test_bf16_with_the_caches_own_page_tables():
    spec = attnkit.AttentionSpec(4, 4, 128)
    cache = attnkit.KvCache(1, 32, 16, 4, 128, dtype=torch.bfloat16)
    backend = attnkit.Backend("cpu", spec, cache)
    prefill = attnkit.Batch.build(cache, [20, 3])
    backend.plan(prefill)
    q, k, v = qkv(23, spec, torch.bfloat16)
    out = torch.empty_like(q)
    backend.forward_extend(0, q, k, v, out)
    decode = attnkit.Batch.build(cache, [1, 1], prefill.request_ids)
    assert decode.mode == "decode" and decode.kv_lens == [21, 4] and decode.prefix_lens == [20, 3]
    backend.plan(decode)
    q, k, v = qkv(2, spec, torch.bfloat16, seed=5)
    out = torch.empty_like(q)
    backend.forward_decode(0, q, k, v, out)
    pools = [(torch.from_dlpack(cache.k_pool(0)).float(), torch.from_dlpack(cache.v_pool(0)).float())]
    expected = reference_step(spec, None, pools, decode, 0, q.float(), k.float(), v.float())
    torch.testing.assert_close(out.float(), expected, rtol=2e-2, atol=2e-2)
    cache.free_request(decode.request_ids[0])
    assert cache.num_free_pages == 32 - 1


def test_numpy_arrays_pass_too():
    np = pytest.importorskip("numpy")
    spec = attnkit.AttentionSpec(2, 1, 16)
    cache = attnkit.KvCache(1, 8, 4, 1, 16, dtype="f32")
    backend = attnkit.Backend("cpu", spec, cache)
    backend.plan(attnkit.Batch(np.array([0, 3]), np.array([0, 1]), np.array([5]), np.array([3]), page_size=4))
    q, k, v = (np.ones((3, h, 16), np.float32) for h in (2, 1, 1))
    out = np.zeros((3, 2, 16), np.float32)
    backend.forward(0, q, k, v, out)
    assert np.allclose(out, 1.0)


def test_auto_and_list_backends():
    spec = attnkit.AttentionSpec(8, 2, 64)
    cache = attnkit.KvCache(1, 8, 16, 2, 64)
    name, reason = attnkit.select_backend(spec, cache)
    assert name in {"cpu", "planned"} and reason
    backends = {b["name"]: b for b in attnkit.list_backends()}
    assert backends["reference"]["available"] and backends["reference"]["why_unavailable"] == ""
    assert backends["cpu"]["capabilities"]["kv_dtypes"] == ["f32", "f16", "bf16", "e4m3"]
    for b in backends.values():
        assert b["available"] == (b["why_unavailable"] == "")
    assert attnkit.Backend("auto", spec, cache).name.startswith("auto")


def test_unavailable_backend_says_why():
    cache = attnkit.KvCache(1, 8, 16, 2, 64)
    with pytest.raises(attnkit.Error) as e:
        attnkit.Backend("no-such", attnkit.AttentionSpec(8, 2, 64), cache)
    assert "no-such" in str(e.value) and "reference" in str(e.value)
    assert isinstance(e.value, ValueError)


def test_forward_before_plan_and_a_batch_of_another_page_size():
    spec = attnkit.AttentionSpec(2, 1, 16)
    cache = attnkit.KvCache(1, 8, 4, 1, 16, dtype="f32")
    backend = attnkit.Backend("cpu", spec, cache)
    q, k, v = qkv(1, spec)
    with pytest.raises(attnkit.Error, match="^cpu: init_forward_metadata must be called before forward$"):
        backend.forward(0, q, k, v, torch.empty_like(q))
    with pytest.raises(attnkit.Error, match=r"^batch: page_size must match the cache's \(4\), got 8$"):
        backend.plan(attnkit.Batch(*page_table([0], [1], 8, 8), page_size=8))


def test_the_spec_is_checked():
    with pytest.raises(attnkit.Error, match="num_qo_heads"):
        attnkit.AttentionSpec(6, 4, 64)


def test_variants_are_parsed_with_the_spec():
    spec = attnkit.AttentionSpec(4, 2, 64, score_mod="score - 0.0625f * (q_pos - kv_pos)", mask_mod="kv_pos < 512")
    assert spec.score_mod == "score - 0.0625f * (q_pos - kv_pos)" and spec.mask_mod == "kv_pos < 512"
    with pytest.raises(attnkit.Error, match=r"^spec: score_mod: unknown name 'qpos' .* at column 9 of 'score - qpos'$"):
        attnkit.AttentionSpec(4, 2, 64, score_mod="score - qpos")


def test_presets():
    model = attnkit.ModelSpec.preset("qwen3-0.6b", num_layers=2)
    assert model.num_layers == 2 and model.layer(0).num_qo_heads == 16 and model.layer(0).head_dim_qk == 128
    assert "llama3-8b" in attnkit.preset_names()
