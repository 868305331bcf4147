"""attnkit: the attention layer of an LLM inference engine, from Python.

The engine hands attnkit one layer's q, k and v a step; attnkit stores the new k and v in a paged KV
cache (its own, or a view over the engine's tensors), plans the batch once for every layer and runs
the kernel that suits the phase and the hardware. Tensors pass zero copy through DLPack (torch,
NumPy, CuPy); errors are attnkit.Error (a ValueError) with the C++ library's message.

    import attnkit, torch
    spec = attnkit.AttentionSpec(32, 8, 128)
    cache = attnkit.KvCache(num_layers=2, num_pages=64, page_size=16, num_kv_heads=8, head_dim=128)
    backend = attnkit.Backend("auto", spec, cache)
    ...

See docs/python.md for the whole API, the FlashInfer-shaped wrappers and CUDA graphs.
"""
from ._attnkit import (
    AttentionSpec,
    Backend,
    Batch,
    Error,
    KvCache,
    ModelSpec,
    OutOfPagesError,
    built_with_cuda,
    cuda_available,
    cuda_device_name,
    list_backends,
    preset_names,
    select_backend,
    set_cpu_threads,
)
from .flashinfer import BatchDecodeWithPagedKVCacheWrapper, BatchPrefillWithPagedKVCacheWrapper
from .merge import merge_state, merge_states

__all__ = [
    "AttentionSpec",
    "Backend",
    "Batch",
    "BatchDecodeWithPagedKVCacheWrapper",
    "BatchPrefillWithPagedKVCacheWrapper",
    "Error",
    "KvCache",
    "ModelSpec",
    "OutOfPagesError",
    "built_with_cuda",
    "cuda_available",
    "cuda_device_name",
    "list_backends",
    "merge_state",
    "merge_states",
    "preset_names",
    "select_backend",
    "set_cpu_threads",
]
__version__ = "0.1.0"
