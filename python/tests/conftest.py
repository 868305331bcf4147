"""Helpers of the Python tests: random paged batches, the reference backend's answer, and a DLPack
capsule that claims any device (so refusals of device and dtype are tested without a GPU)."""
import ctypes

import numpy as np
import pytest
import torch

import attnkit

requires_cuda = pytest.mark.skipif(not (torch.cuda.is_available() and attnkit.cuda_available()[0]),
                                   reason="needs a CUDA device and attnkit built with CUDA")


def page_table(prefix_lens, qo_lens, page_size, num_pages, seed=0):
    """(qo_indptr, kv_page_indptr, kv_page_indices, kv_last_page_len) as int32 torch tensors, pages
    drawn in shuffled order from num_pages, each request holding prefix + new tokens."""
    rng = np.random.default_rng(seed)
    free = list(rng.permutation(num_pages))
    qo_indptr, kv_indptr, indices, last = [0], [0], [], []
    for prefix, qo in zip(prefix_lens, qo_lens):
        kv = prefix + qo
        pages = -(-kv // page_size)
        indices += [free.pop() for _ in range(pages)]
        qo_indptr.append(qo_indptr[-1] + qo)
        kv_indptr.append(len(indices))
        last.append(0 if kv == 0 else (kv - 1) % page_size + 1)
    as_i32 = lambda x: torch.tensor(x, dtype=torch.int32)
    return as_i32(qo_indptr), as_i32(kv_indptr), as_i32(indices), as_i32(last)


def qkv(num_tokens, spec, dtype=torch.float32, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(num_tokens, spec.num_qo_heads, spec.head_dim_qk, generator=g).to(dtype)
    k = torch.randn(num_tokens, spec.num_kv_heads, spec.head_dim_qk, generator=g).to(dtype)
    v = torch.randn(num_tokens, spec.num_kv_heads, spec.head_dim_vo, generator=g).to(dtype)
    return q.to(device), k.to(device), v.to(device)


def reference_step(spec, cache_config, pools, batch, layer, q, k, v):
    """The reference backend's output for one layer of `batch`, over a copy of the pools (f32 CPU)."""
    k_pools = [p[0].detach().cpu().clone() for p in pools]
    v_pools = [p[1].detach().cpu().clone() for p in pools]
    cache = attnkit.KvCache.from_pools(k_pools=k_pools, v_pools=v_pools)
    ref = attnkit.Backend("reference", spec, cache)
    ref.plan(batch)
    out = torch.empty(q.shape[0], spec.num_qo_heads, spec.head_dim_vo, dtype=q.dtype)
    ref.forward(layer, q.cpu(), k.cpu(), v.cpu(), out)
    return out


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_keep = []  # the structs a fake capsule points at live as long as the test session


def fake_capsule(shape, device_type=2, dtype=(2, 32), device_id=0):
    """A DLPack capsule of `shape` on DLPack device `device_type` (2: CUDA) whose memory is never
    touched: what a refusal must stop before reading. dtype: (DLPack code, bits)."""
    shape_arr = (ctypes.c_int64 * len(shape))(*shape)
    t = _DLManagedTensor()
    t.dl_tensor.data = 0x1000
    t.dl_tensor.device = _DLDevice(device_type, device_id)
    t.dl_tensor.ndim = len(shape)
    t.dl_tensor.dtype = _DLDataType(dtype[0], dtype[1], 1)
    t.dl_tensor.shape = shape_arr
    t.dl_tensor.strides = None
    _keep.extend([shape_arr, t])
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new_capsule(ctypes.addressof(t), b"dltensor", None)
