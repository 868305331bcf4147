"""DLPack in and out: zero-copy round trips, and the refusals (dtype, device, strides, a consumed
capsule, not a tensor), each with its exact message, before any memory is touched."""
import numpy as np
import pytest
import torch

import attnkit
from conftest import fake_capsule, page_table, qkv


@pytest.fixture
def step():
    spec = attnkit.AttentionSpec(4, 2, 32)
    cache = attnkit.KvCache(1, 16, 8, 2, 32, dtype="f32")
    backend = attnkit.Backend("cpu", spec, cache)
    backend.plan(attnkit.Batch(*page_table([5, 0], [1, 2], 8, 16), page_size=8))
    q, k, v = qkv(3, spec)
    return backend, q, k, v, torch.empty_like(q)


def test_pools_are_the_caches_memory():
    cache = attnkit.KvCache(2, 4, 8, 2, 16, dtype="f16")
    k0 = torch.from_dlpack(cache.k_pool(0))
    assert k0.shape == (4, 8, 2, 16) and k0.dtype == torch.float16
    k0.fill_(2.0)
    again = np.from_dlpack(cache.k_pool(0))
    assert again.dtype == np.float16 and (again == 2.0).all()
    assert torch.from_dlpack(cache.k_pool(0)).data_ptr() == k0.data_ptr()


def test_pool_views_keep_the_cache_alive():
    cache = attnkit.KvCache(1, 4, 8, 2, 16, dtype="f32")
    pool = torch.from_dlpack(cache.v_pool(0))
    del cache
    pool.fill_(1.0)  # the cache lives on as the view's owner
    assert float(pool.sum()) == 4 * 8 * 2 * 16


def test_out_is_written_in_place(step):
    backend, q, k, v, out = step
    ptr = out.data_ptr()
    backend.forward(0, q, k, v, out)
    assert out.data_ptr() == ptr and torch.isfinite(out).all()


def test_wrong_dtype(step):
    backend, q, k, v, out = step
    with pytest.raises(attnkit.Error) as e:
        backend.forward(0, q, k.half(), v, out)
    assert str(e.value) == "cpu forward_extend: k dtype must match q (f32), got f16"
    with pytest.raises(attnkit.Error) as e:
        backend.forward(0, q.double(), k, v, out)
    assert str(e.value) == ("cpu forward: q dtype must be float32, float16, bfloat16, float8_e4m3fn, int32, int64 "
                            "or uint8, got float64")


def test_wrong_device(step):
    backend, q, k, v, out = step
    with pytest.raises(attnkit.Error) as e:
        backend.forward(0, fake_capsule((3, 4, 32)), k, v, out)
    assert str(e.value) == "cpu forward_extend: q must be on cpu, got cuda"
    with pytest.raises(attnkit.Error) as e:
        backend.forward(0, fake_capsule((3, 4, 32), device_type=8), k, v, out)  # DLPack's Metal
    assert str(e.value) == ("cpu forward: q must be on the CPU or a CUDA device, got [3, 4, 32] float32 "
                            "dlpack device 8, strides [128, 32, 1]")


def test_bad_strides(step):
    backend, q, k, v, out = step
    qkv_packed = torch.randn(3, (4 + 2 + 2) * 32)
    q_slice = qkv_packed[:, : 4 * 32].view(3, 4, 32)  # rows 256 apart: a slice of a packed qkv
    with pytest.raises(attnkit.Error) as e:
        backend.forward(0, q_slice, k, v, out)
    assert str(e.value) == ("cpu forward: q must be contiguous (row-major, dense): the kernels read whole rows, got "
                            "[3, 4, 32] float32 cpu, strides [256, 32, 1]; a slice of a packed qkv tensor needs "
                            ".contiguous() first")
    backend.forward(0, q_slice.contiguous(), k, v, out)
    # A dimension of one element has no stride to speak of.
    one = torch.randn(1, 4, 32).as_strided((1, 4, 32), (999, 32, 1))
    assert one.shape == (1, 4, 32)


def test_shape_is_checked(step):
    backend, q, k, v, out = step
    with pytest.raises(attnkit.Error) as e:
        backend.forward(0, q[:2].contiguous(), k, v, out)
    assert str(e.value) == "cpu forward_extend: q must be [3, 4, 32], got [2, 4, 32] f32 cpu"


def test_consumed_capsule_and_not_a_tensor(step):
    backend, q, k, v, out = step
    capsule = torch.utils.dlpack.to_dlpack(q)
    torch.from_dlpack(capsule)  # consumes it: the tensor behind it may be gone
    with pytest.raises(attnkit.Error) as e:
        backend.forward(0, capsule, k, v, out)
    assert str(e.value) == "cpu forward: q is a DLPack capsule that was already consumed (a capsule can be read once)"
    with pytest.raises(attnkit.Error) as e:
        backend.forward(0, [[1.0]], k, v, out)
    assert str(e.value) == "cpu forward: q must be a tensor (torch, NumPy, CuPy: anything with __dlpack__), got list"


def test_a_fresh_capsule_is_read_zero_copy(step):
    backend, q, k, v, out = step
    backend.forward(0, torch.utils.dlpack.to_dlpack(q), k, v, out)
    expected = out.clone()
    backend.forward(0, q, k, v, out)
    torch.testing.assert_close(out, expected)


def test_batch_arrays_are_checked():
    with pytest.raises(attnkit.Error) as e:
        attnkit.Batch(torch.tensor([0, 1.0]), torch.tensor([0, 1]), torch.tensor([0]), torch.tensor([1]), page_size=4)
    assert str(e.value) == "Batch: qo_indptr must be a 1-D int32 array, got [2] float32 cpu, strides [1]"
    with pytest.raises(attnkit.Error) as e:
        attnkit.Batch(*page_table([0], [3], 4, 4)[:3], torch.tensor([2], dtype=torch.int32), page_size=4)
    assert str(e.value) == ("Batch: request 0 has 3 new tokens (qo_indptr) but kv_len 2 (kv_page_indptr, "
                            "kv_last_page_len): the page table must hold the new tokens too")
    with pytest.raises(attnkit.Error) as e:
        attnkit.Batch(torch.tensor([0, 1]), torch.tensor([0, 2]), torch.tensor([1]), torch.tensor([1]), page_size=4)
    assert str(e.value) == "batch: kv_page_indices must have kv_page_indptr.back() (2) entries, got 1"
    with pytest.raises(attnkit.Error) as e:
        attnkit.Batch(torch.tensor([0, 1]), torch.tensor([0, 1]), torch.tensor([2**40]), torch.tensor([1]),
                      page_size=4)
    assert str(e.value) == "Batch: kv_page_indices[0] = 1099511627776 does not fit in int32"


def test_out_of_pages_is_its_own_error():
    cache = attnkit.KvCache(1, 2, 4, 1, 16)
    with pytest.raises(attnkit.OutOfPagesError) as e:
        attnkit.Batch.build(cache, [9])
    assert str(e.value) == "KV cache out of pages: the batch needs 3, 2 of 2 free"
    assert isinstance(e.value, attnkit.Error) and cache.num_free_pages == 2
