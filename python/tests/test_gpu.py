"""On a CUDA device (skipped elsewhere): planned against reference through torch CUDA tensors, work on
torch's current stream, and a decode step captured with torch.cuda.graph replaying later batches."""
import pytest
import torch

import attnkit
from conftest import fake_capsule, page_table, qkv, reference_step, requires_cuda

pytestmark = requires_cuda
SPEC = attnkit.AttentionSpec(16, 4, 128)
NUM_PAGES, PAGE_SIZE = 512, 16


def pools():
    return torch.randn(1, 2, NUM_PAGES, PAGE_SIZE, 4, 128, device="cuda").to(torch.bfloat16)


def check_step(backend, kv, batch, q, k, v, out):
    ref_pools = [(kv[0, 0].float().cpu(), kv[0, 1].float().cpu())]
    expected = reference_step(SPEC, None, ref_pools, batch, 0, q.float().cpu(), k.float().cpu(), v.float().cpu())
    torch.testing.assert_close(out.float().cpu(), expected, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("prefix_lens,qo_lens", [([0, 100], [37, 5]), ([900, 3, 0], [1, 1, 1])],
                         ids=["extend", "decode"])
def test_planned_matches_reference_on_torch_cuda_tensors(prefix_lens, qo_lens):
    kv = pools()
    backend = attnkit.Backend("planned", SPEC, attnkit.KvCache.from_pools(kv))
    batch = attnkit.Batch(*page_table(prefix_lens, qo_lens, PAGE_SIZE, NUM_PAGES), page_size=PAGE_SIZE)
    backend.plan(batch)
    q, k, v = qkv(batch.num_tokens, SPEC, torch.bfloat16, device="cuda")
    before = kv.clone()
    out = torch.empty_like(q)
    backend.forward(0, q, k, v, out)
    torch.cuda.synchronize()
    # The reference reads the pools as they were plus this step's k, v (stored again by its forward).
    check_step(backend, before, batch, q, k, v, out)


def test_work_follows_torchs_current_stream():
    kv = pools()
    backend = attnkit.Backend("planned", SPEC, attnkit.KvCache.from_pools(kv))
    batch = attnkit.Batch(*page_table([500, 20], [1, 1], PAGE_SIZE, NUM_PAGES), page_size=PAGE_SIZE)
    before = kv.clone()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        backend.plan(batch)
        q, k, v = qkv(2, SPEC, torch.bfloat16, device="cuda")
        q = q * 1.0  # queued on the side stream just before the forward reads it
        out = torch.empty_like(q)
        backend.forward(0, q, k, v, out)
        result = out.clone()  # on the side stream: ordered after attnkit's kernels only by the join
    stream.synchronize()
    check_step(backend, before, batch, q, k, v, result)


def test_decode_captured_in_a_torch_cuda_graph_replays_new_batches():
    kv = pools()
    backend = attnkit.Backend("planned", SPEC, attnkit.KvCache.from_pools(kv))
    backend.init_cuda_graph_state(max_batch_size=4, max_num_pages=NUM_PAGES)
    q = torch.empty(4, 16, 128, dtype=torch.bfloat16, device="cuda")
    k = torch.empty(4, 4, 128, dtype=torch.bfloat16, device="cuda")
    v = torch.empty_like(k)
    out = torch.empty_like(q)
    first = attnkit.Batch(*page_table([10, 100, 31, 64], [1] * 4, PAGE_SIZE, NUM_PAGES, seed=1), page_size=PAGE_SIZE)
    backend.plan(first)
    for t, seed in ((q, 1), (k, 2), (v, 3)):
        t.copy_(torch.randn(t.shape, generator=torch.Generator().manual_seed(seed)))
    backend.forward_decode(0, q, k, v, out)  # warm-up outside the graph
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        backend.forward_decode(0, q, k, v, out)
    # Later: other requests, lengths (one long enough to split) and pages, and new inputs in place.
    second = attnkit.Batch(*page_table([3000, 7, 500, 1], [1] * 4, PAGE_SIZE, NUM_PAGES, seed=2), page_size=PAGE_SIZE)
    backend.plan(second)
    for t, seed in ((q, 4), (k, 5), (v, 6)):
        t.copy_(torch.randn(t.shape, generator=torch.Generator().manual_seed(seed)))
    out.fill_(float("nan"))
    graph.replay()
    replayed = out.clone()
    backend.forward_decode(0, q, k, v, out)
    torch.cuda.synchronize()
    assert torch.equal(replayed, out), "the replay differs from a fresh run of the same batch"
    assert not torch.isnan(out).any()


def test_tensors_on_another_gpu_or_the_host_are_refused():
    backend = attnkit.Backend("planned", SPEC, attnkit.KvCache.from_pools(pools()))
    backend.plan(attnkit.Batch(*page_table([5], [1], PAGE_SIZE, NUM_PAGES), page_size=PAGE_SIZE))
    q, k, v = qkv(1, SPEC, torch.bfloat16, device="cuda")
    out = torch.empty_like(q)
    with pytest.raises(attnkit.Error) as e:
        backend.forward(0, fake_capsule((1, 16, 128), dtype=(4, 16), device_id=1), k, v, out)
    assert str(e.value) == "planned forward: q is on cuda:1, the cache on cuda:0"
    with pytest.raises(attnkit.Error) as e:
        backend.forward(0, q.cpu(), k, v, out)
    assert str(e.value) == "planned forward_decode: q must be on cuda, got cpu"
