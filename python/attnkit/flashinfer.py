"""FlashInfer-shaped wrappers over attnkit backends, so an engine written against FlashInfer switches in
a few lines: the same constructors, plan(indptr, indices, last_page_len, ...) and run(q, paged_kv_cache).

What differs (docs/python.md has both side by side):
- paged_kv_cache is (k_cache, v_cache), each [num_pages, page_size, num_kv_heads, head_dim] (NHD), or one
  [2, num_pages, page_size, num_kv_heads, head_dim] tensor (K then V). FlashInfer's interleaved
  [num_pages, 2, ...] tensor leaves K's pages apart, which attnkit's pools are not.
- run(q, cache, k=..., v=...) stores this step's k and v itself (what append_paged_kv_cache did before
  FlashInfer's run); without them the new tokens' k and v must be in the cache already.
- One plan serves every layer: each distinct cache tensor run() sees becomes a layer of one attnkit
  cache view, so after the first step's pass over the layers nothing is re-planned per layer.
"""
from . import _attnkit

__all__ = ["BatchDecodeWithPagedKVCacheWrapper", "BatchPrefillWithPagedKVCacheWrapper"]


def _torch():
    import torch

    return torch


def _split_cache(paged_kv_cache):
    """(k_pool, v_pool) of one layer, each [num_pages, page_size, num_kv_heads, head_dim]."""
    if isinstance(paged_kv_cache, (tuple, list)):
        if len(paged_kv_cache) != 2:
            raise _attnkit.Error(
                "run: paged_kv_cache must be (k_cache, v_cache) or one [2, num_pages, page_size, num_kv_heads, "
                "head_dim] tensor, got a sequence of %d" % len(paged_kv_cache))
        return paged_kv_cache[0], paged_kv_cache[1]
    shape = tuple(paged_kv_cache.shape)
    if len(shape) == 5 and shape[0] == 2:
        return paged_kv_cache[0], paged_kv_cache[1]
    if len(shape) == 5 and shape[1] == 2:
        raise _attnkit.Error(
            "run: paged_kv_cache [num_pages, 2, page_size, num_kv_heads, head_dim] (K and V interleaved by page) "
            "is not an attnkit layout: pass (k_cache, v_cache) or a [2, num_pages, ...] tensor, got %s" % (shape,))
    raise _attnkit.Error(
        "run: paged_kv_cache must be (k_cache, v_cache) or one [2, num_pages, page_size, num_kv_heads, head_dim] "
        "tensor, got shape %s" % (shape,))


class _PagedWrapper:
    """What both wrappers share: the per-step Batch, the layer caches seen, the backend over them."""

    def __init__(self, float_workspace_buffer=None, kv_layout="NHD", *, backend="auto"):
        # The workspace is FlashInfer's; attnkit backends size and hold their own.
        if kv_layout != "NHD":
            raise _attnkit.Error("wrapper: kv_layout must be 'NHD' (slot [num_kv_heads, head_dim]), got '%s'" % kv_layout)
        self._backend_name = backend
        self._layers = {}  # (k data_ptr, v data_ptr) -> layer index in the cache view
        self._pools = []   # [(k_pool, v_pool)] in layer order
        self._cache = None
        self._backend = None
        self._spec = None
        self._batch = None
        self._planned = False   # whether self._backend has planned self._batch
        self._slots = None      # the new tokens' slots on the pools' device, for runs without k, v

    def _plan(self, qo_indptr, indptr, indices, last_page_len, page_size, spec, custom_mask=None, mask_indptr=None):
        if self._spec is not None and _spec_key(spec) != _spec_key(self._spec):
            self._backend = None  # another mechanism: a new backend over the same layers
        self._spec = spec
        self._batch = _attnkit.Batch(qo_indptr, indptr, indices, last_page_len, page_size=page_size,
                                     custom_mask=custom_mask, custom_mask_indptr=mask_indptr)
        self._planned = False
        self._slots = None

    def _layer_of(self, paged_kv_cache):
        k_pool, v_pool = _split_cache(paged_kv_cache)
        key = (k_pool.data_ptr(), v_pool.data_ptr())
        layer = self._layers.get(key)
        if layer is None:
            # A cache not seen before: one more layer in the view, and a backend over all of them.
            layer = len(self._pools)
            self._layers[key] = layer
            self._pools.append((k_pool, v_pool))
            self._cache = _attnkit.KvCache.from_pools(k_pools=[p[0] for p in self._pools],
                                                      v_pools=[p[1] for p in self._pools])
            self._backend = None
        if self._backend is None:
            self._backend = _attnkit.Backend(self._backend_name, self._spec, self._cache)
            self._planned = False
        return layer, k_pool, v_pool

    def run(self, q, paged_kv_cache, *, out=None, k=None, v=None, return_lse=False):
        """Attention of q [num_tokens, num_qo_heads, head_dim] over the planned page table of
        paged_kv_cache; k, v [num_tokens, num_kv_heads, head_dim] are stored at the new tokens' slots
        first where given. Returns out [num_tokens, num_qo_heads, head_dim_vo], and with return_lse
        (out, lse): lse f32 [num_tokens, num_qo_heads], natural log."""
        if self._batch is None:
            raise _attnkit.Error("run: plan() must be called before run()")
        layer, k_pool, v_pool = self._layer_of(paged_kv_cache)
        if not self._planned:
            self._backend.plan(self._batch)
            self._planned = True
        if (k is None) != (v is None):
            raise _attnkit.Error("run: give both k and v (this step's new tokens), or neither")
        if k is None:
            # The new tokens are in the cache already: read their rows back, so the store rewrites
            # them as they are (the new tokens only, not the history).
            torch = _torch()
            if self._slots is None:
                self._slots = torch.from_numpy(self._batch.out_cache_loc.copy()).to(k_pool.device)
            heads, dim_k, dim_v = k_pool.shape[-2], k_pool.shape[-1], v_pool.shape[-1]
            k = k_pool.reshape(-1, heads, dim_k).index_select(0, self._slots).to(q.dtype)
            v = v_pool.reshape(-1, heads, dim_v).index_select(0, self._slots).to(q.dtype)
        if out is None:
            torch = _torch()
            out = torch.empty((q.shape[0], q.shape[1], v_pool.shape[-1]), dtype=q.dtype, device=q.device)
        # With return_lse: (out, lse), where the backend writes the LSE (capabilities()["lse"]).
        return self._backend.forward(layer, q, k, v, out, return_lse=return_lse)

    forward = run

    @property
    def backend(self):
        """The attnkit.Backend the wrapper runs (None before the first run)."""
        return self._backend


def _spec(num_qo_heads, num_kv_heads, head_dim, head_dim_vo=None, causal=True, sm_scale=None, window_left=-1,
          logits_soft_cap=None):
    return _attnkit.AttentionSpec(num_qo_heads, num_kv_heads, head_dim, head_dim_vo=head_dim_vo,
                                  sm_scale=sm_scale or 0.0, causal=causal, window_left=window_left,
                                  logits_soft_cap=logits_soft_cap or 0.0)


def _spec_key(spec):
    return (spec.num_qo_heads, spec.num_kv_heads, spec.head_dim_qk, spec.head_dim_vo, spec.sm_scale, spec.causal,
            spec.window_left, spec.logits_soft_cap)


def _check_pos_encoding(pos_encoding_mode):
    if pos_encoding_mode != "NONE":
        raise _attnkit.Error("plan: pos_encoding_mode must be 'NONE' (apply RoPE to q and k before attnkit), got '%s'"
                             % pos_encoding_mode)


class BatchDecodeWithPagedKVCacheWrapper(_PagedWrapper):
    """flashinfer.BatchDecodeWithPagedKVCacheWrapper's shape: one new token a request."""

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
             pos_encoding_mode="NONE", window_left=-1, logits_soft_cap=None, q_data_type=None, kv_data_type=None,
             data_type=None, sm_scale=None, rope_scale=None, rope_theta=None, non_blocking=True, **unused):
        """indptr int32 [batch_size + 1], indices int32 [indptr[-1]], last_page_len int32 [batch_size]: each
        request's pages, this step's token included. Dtypes come from q and the cache at run()."""
        _check_pos_encoding(pos_encoding_mode)
        import numpy

        batch_size = len(last_page_len)
        qo_indptr = numpy.arange(batch_size + 1, dtype=numpy.int32)
        self._plan(qo_indptr, indptr, indices, last_page_len, page_size,
                   _spec(num_qo_heads, num_kv_heads, head_dim, causal=True, sm_scale=sm_scale,
                         window_left=window_left, logits_soft_cap=logits_soft_cap))

    begin_forward = plan


class BatchPrefillWithPagedKVCacheWrapper(_PagedWrapper):
    """flashinfer.BatchPrefillWithPagedKVCacheWrapper's shape: any number of new tokens a request."""

    def plan(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, num_qo_heads,
             num_kv_heads, head_dim_qk, page_size, head_dim_vo=None, custom_mask=None, packed_custom_mask=None,
             causal=False, pos_encoding_mode="NONE", use_fp16_qk_reduction=False, sm_scale=None, window_left=-1,
             logits_soft_cap=None, rope_scale=None, rope_theta=None, q_data_type=None, kv_data_type=None,
             **unused):
        """qo_indptr int32 [batch_size + 1] (request i's rows of q), the page table as for decode;
        custom_mask: bool, every request's [qo_len, kv_len] row-major, concatenated (causal is then
        ignored for requests with a mask). causal defaults to False, as in FlashInfer."""
        _check_pos_encoding(pos_encoding_mode)
        if packed_custom_mask is not None:
            raise _attnkit.Error("plan: packed_custom_mask (bit-packed) is not supported; pass custom_mask (bool)")
        mask_indptr = None
        if custom_mask is not None:
            import numpy

            qo = numpy.asarray(_host(qo_indptr), dtype=numpy.int64)
            kvp = numpy.asarray(_host(paged_kv_indptr), dtype=numpy.int64)
            last = numpy.asarray(_host(paged_kv_last_page_len), dtype=numpy.int64)
            pages = kvp[1:] - kvp[:-1]
            kv_len = numpy.where(pages > 0, (pages - 1) * page_size + last, 0)
            mask_indptr = numpy.concatenate([[0], numpy.cumsum((qo[1:] - qo[:-1]) * kv_len)]).astype(numpy.int64)
            custom_mask = _host(custom_mask).reshape(-1).astype(numpy.uint8)
        self._plan(qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, page_size,
                   _spec(num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo=head_dim_vo, causal=causal,
                         sm_scale=sm_scale, window_left=window_left, logits_soft_cap=logits_soft_cap),
                   custom_mask, mask_indptr)

    begin_forward = plan


def _host(x):
    """x as a NumPy array on the host (torch tensors are moved and converted; bool stays bool)."""
    import numpy

    if type(x).__module__.startswith("torch"):
        return x.detach().cpu().numpy()
    return numpy.asarray(x)
