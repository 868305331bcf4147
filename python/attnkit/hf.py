"""Hugging Face transformers models with their attention through attnkit: an attention function
registered as "attnkit", and PagedKvCache, the engine side an inference server keeps (one KV pool
tensor, a page allocator, each request's page table) that builds and plans each step's batch.

A step packs every running request's new tokens into one sequence (prefills and decodes together):

    cache = PagedKvCache.for_config(model.config, num_pages=256, page_size=16, dtype=torch.float32)
    attnkit.hf.register()
    model.set_attn_implementation("attnkit")
    positions = cache.schedule({req_a: 17, req_b: 1})    # request -> its new tokens this step
    with cache.step():
        logits = model(input_ids=tokens[None], position_ids=positions[None]).logits

The model's own KV cache stays off (use_cache=False): attnkit stores k and v in the pool.
"""
import contextlib

import torch

import attnkit

ATTENTION_NAME = "attnkit"
_active = []  # the PagedKvCache whose step is running (a stack: steps do not nest in practice)


class PagedKvCache:
    """The KV pool as one tensor [num_layers, 2, num_pages, page_size, num_kv_heads, head_dim] (the engine
    allocates it; attnkit views it zero copy), free pages, and per request its pages and length."""

    def __init__(self, num_layers, num_qo_heads, num_kv_heads, head_dim, *, num_pages, page_size, dtype,
                 device="cpu", backend="auto", sm_scale=None, window_left=-1):
        self.pool = torch.zeros((num_layers, 2, num_pages, page_size, num_kv_heads, head_dim), dtype=dtype,
                                device=device)
        self.page_size = page_size
        self.spec = attnkit.AttentionSpec(num_qo_heads, num_kv_heads, head_dim, sm_scale=sm_scale or 0.0,
                                          window_left=window_left)
        self.cache = attnkit.KvCache.from_pools(self.pool)
        self.backend = attnkit.Backend(backend, self.spec, self.cache)
        self._free = list(range(num_pages - 1, -1, -1))
        self._pages = {}    # request -> [page]
        self._lengths = {}  # request -> tokens cached after the scheduled step
        self.batch = None

    @classmethod
    def for_config(cls, config, **kwargs):
        """The cache for a transformers config of the Llama / Qwen3 family."""
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        window = getattr(config, "sliding_window", None) if getattr(config, "use_sliding_window", False) else None
        return cls(config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads, head_dim,
                   window_left=(window - 1) if window else -1, **kwargs)

    @property
    def num_free_pages(self):
        return len(self._free)

    def schedule(self, new_tokens):
        """Grows each request by its new tokens (a request not seen before starts empty), builds and plans
        the step's batch in the dict's order, and returns every new token's position (int64 [num_tokens])."""
        need = sum(max(0, -(-(self._lengths.get(r, 0) + n) // self.page_size) - len(self._pages.get(r, [])))
                   for r, n in new_tokens.items())
        if need > len(self._free):
            raise attnkit.OutOfPagesError("KV cache out of pages: the step needs %d, %d free" % (need, len(self._free)))
        qo_indptr, kv_indptr, indices, last, positions = [0], [0], [], [], []
        for r, n in new_tokens.items():
            start = self._lengths.get(r, 0)
            length = start + n
            pages = self._pages.setdefault(r, [])
            while len(pages) * self.page_size < length:
                pages.append(self._free.pop())
            self._lengths[r] = length
            positions.extend(range(start, length))
            qo_indptr.append(qo_indptr[-1] + n)
            indices.extend(pages)
            kv_indptr.append(len(indices))
            last.append((length - 1) % self.page_size + 1 if length else 0)
        as_i32 = lambda x: torch.tensor(x, dtype=torch.int32)
        self.batch = attnkit.Batch(as_i32(qo_indptr), as_i32(kv_indptr), as_i32(indices), as_i32(last),
                                   page_size=self.page_size)
        self.backend.plan(self.batch)
        return torch.tensor(positions, dtype=torch.int64)

    def release(self, request):
        """The request leaves: its pages go back to the free list."""
        self._free.extend(reversed(self._pages.pop(request, [])))
        self._lengths.pop(request, None)

    @contextlib.contextmanager
    def step(self):
        """Model forwards inside run their attention through this cache's planned batch."""
        _active.append(self)
        try:
            yield self
        finally:
            _active.pop()


def attnkit_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention-function signature over the packed step: query [1, num_qo_heads, num_tokens,
    head_dim] (after RoPE), key and value [1, num_kv_heads, num_tokens, head_dim]; returns
    ([1, num_tokens, num_qo_heads, head_dim], None). k and v go into the paged pool at the step's slots."""
    if not _active:
        raise attnkit.Error("attnkit attention: the forward must run inside PagedKvCache.step()")
    cache = _active[-1]
    if scaling is not None and abs(scaling - cache.spec.scale) > 1e-6 * cache.spec.scale:
        raise attnkit.Error("attnkit attention: the model scales logits by %g, the cache's spec by %g"
                            % (scaling, cache.spec.scale))
    if query.shape[0] != 1:
        raise attnkit.Error("attnkit attention: a step is one packed sequence (batch dimension 1), got %d"
                            % query.shape[0])
    q = query[0].transpose(0, 1).contiguous()
    k = key[0].transpose(0, 1).contiguous()
    v = value[0].transpose(0, 1).contiguous()
    out = torch.empty_like(q)
    cache.backend.forward(module.layer_idx, q, k, v, out)
    return out.unsqueeze(0), None


def register():
    """Registers attnkit_attention as transformers' attention implementation "attnkit"."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, attnkit_attention)
