"""The peers attnkit is measured against, each set up on one shape's data: PyTorch SDPA (flash and
cuDNN), FlexAttention (compiled) and FlashInfer's paged decode, paged prefill and ragged prefill
wrappers. A runner returns one callable per data copy; run_peers.py times them (timing.py)."""
import math
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F

from shapes import HEAD_DIM, NUM_KV_HEADS, NUM_QO_HEADS, PAGE_SIZE, Shape
from timing import rotation_count

DTYPE = torch.bfloat16
FI_WORKSPACE_BYTES = 128 << 20


class Skip(Exception):
    """The peer cannot run this shape (the message says why)."""


@dataclass
class ShapeData:
    """One shape's inputs, `copies` times over, in a paged pool whose pages are in shuffled order."""
    shape: Shape
    copies: int
    k_pool: torch.Tensor                      # [num_pages, PAGE_SIZE, NUM_KV_HEADS, HEAD_DIM]
    v_pool: torch.Tensor
    kv_indptr: torch.Tensor                   # [batch + 1] pages of each request (same for every copy)
    kv_indices: List[torch.Tensor]            # per copy: [num_pages_needed]
    last_page_len: torch.Tensor               # [batch]
    qo_indptr: torch.Tensor                   # [batch + 1]
    qs: List[torch.Tensor]                    # per copy: [total_q, NUM_QO_HEADS, HEAD_DIM]
    _contiguous: Dict[int, tuple] = field(default_factory=dict)

    def contiguous_kv(self, copy: int):
        """Per copy: k, v as [total_kv, heads, dim] (ragged) gathered from the pages."""
        if copy not in self._contiguous:
            ks, vs = [], []
            indptr = self.kv_indptr.tolist()
            for i, kv_len in enumerate(self.shape.kv_lens()):
                pages = self.kv_indices[copy][indptr[i]:indptr[i + 1]].long()
                ks.append(self.k_pool[pages].reshape(-1, NUM_KV_HEADS, HEAD_DIM)[:kv_len])
                vs.append(self.v_pool[pages].reshape(-1, NUM_KV_HEADS, HEAD_DIM)[:kv_len])
            self._contiguous[copy] = (torch.cat(ks), torch.cat(vs))
        return self._contiguous[copy]

    def dense(self, copy: int):
        """Per copy: q [B, H, qo, D], k and v [B, KVH, kv, D] for peers without ragged batches."""
        if not self.shape.uniform():
            raise Skip("no ragged batches: the lengths differ between requests")
        b = self.shape.batch_size
        qo, kv = self.shape.qo_lens()[0], self.shape.kv_lens()[0]
        k, v = self.contiguous_kv(copy)
        q = self.qs[copy].view(b, qo, NUM_QO_HEADS, HEAD_DIM).transpose(1, 2).contiguous()
        k = k.view(b, kv, NUM_KV_HEADS, HEAD_DIM).transpose(1, 2).contiguous()
        v = v.view(b, kv, NUM_KV_HEADS, HEAD_DIM).transpose(1, 2).contiguous()
        return q, k, v


def make_data(shape: Shape, seed: int = 0) -> ShapeData:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    pages_per_request = [math.ceil(n / PAGE_SIZE) for n in shape.kv_lens()]
    needed = sum(pages_per_request)
    copies = rotation_count(shape.kv_bytes())
    total = needed * copies
    pool_shape = (total, PAGE_SIZE, NUM_KV_HEADS, HEAD_DIM)
    k_pool = torch.randn(pool_shape, device="cuda", dtype=DTYPE, generator=gen)
    v_pool = torch.randn(pool_shape, device="cuda", dtype=DTYPE, generator=gen)
    perm = torch.randperm(total, device="cuda", generator=gen).to(torch.int32)
    kv_indptr = torch.tensor([0] + pages_per_request, dtype=torch.int32).cumsum(0, dtype=torch.int32).cuda()
    last = [n - (p - 1) * PAGE_SIZE for n, p in zip(shape.kv_lens(), pages_per_request)]
    qo_indptr = torch.tensor([0] + shape.qo_lens(), dtype=torch.int32).cumsum(0, dtype=torch.int32).cuda()
    total_q = sum(shape.qo_lens())
    qs = [torch.randn(total_q, NUM_QO_HEADS, HEAD_DIM, device="cuda", dtype=DTYPE, generator=gen)
          for _ in range(copies)]
    return ShapeData(shape, copies, k_pool, v_pool, kv_indptr,
                     [perm[c * needed:(c + 1) * needed].contiguous() for c in range(copies)],
                     torch.tensor(last, dtype=torch.int32).cuda(), qo_indptr, qs)


def to_ragged(out: torch.Tensor) -> torch.Tensor:
    """[B, H, qo, D] -> [B * qo, H, D], the layout FlashInfer returns."""
    return out.transpose(1, 2).reshape(-1, NUM_QO_HEADS, HEAD_DIM)


# --- PyTorch SDPA ------------------------------------------------------------------------------

def sdpa(backend_name: str):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend_name]

    def runner(d: ShapeData) -> List[Callable[[], torch.Tensor]]:
        s = d.shape
        prefix = s.requests[0][0]
        kwargs = {"enable_gqa": True}
        if s.phase == "prefill" and s.causal:
            if prefix == 0:
                kwargs["is_causal"] = True
            else:
                # SDPA's is_causal aligns the corner top-left; queries that follow a prefix need
                # the bottom-right alignment.
                from torch.nn.attention.bias import causal_lower_right
                kwargs["attn_mask"] = causal_lower_right(s.qo_lens()[0], s.kv_lens()[0])
        calls = []
        for c in range(d.copies):
            q, k, v = d.dense(c)

            def call(q=q, k=k, v=v):
                with sdpa_kernel(backend):
                    return to_ragged(F.scaled_dot_product_attention(q, k, v, **kwargs))
            calls.append(call)
        return calls
    return runner


# --- FlexAttention ---------------------------------------------------------------------------

_flex_compiled = None


def flex(d: ShapeData) -> List[Callable[[], torch.Tensor]]:
    global _flex_compiled
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    if _flex_compiled is None:
        _flex_compiled = torch.compile(flex_attention, dynamic=False)
    s = d.shape
    block_mask = None
    if s.causal and s.phase == "prefill":
        prefix = s.requests[0][0]

        def causal(b, h, q_idx, kv_idx):
            return q_idx + prefix >= kv_idx
        block_mask = create_block_mask(causal, None, None, s.qo_lens()[0], s.kv_lens()[0], device="cuda")
    calls = []
    for c in range(d.copies):
        q, k, v = d.dense(c)
        calls.append(lambda q=q, k=k, v=v: to_ragged(
            _flex_compiled(q, k, v, block_mask=block_mask, enable_gqa=True)))
    return calls


# --- FlashInfer ------------------------------------------------------------------------------

def _workspace() -> torch.Tensor:
    return torch.empty(FI_WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")


def fi_decode(use_tensor_cores: bool):
    def runner(d: ShapeData) -> List[Callable[[], torch.Tensor]]:
        import flashinfer
        if d.shape.phase != "decode":
            raise Skip("decode wrapper: one new token a request")
        calls = []
        for c in range(d.copies):
            w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(_workspace(), "NHD", use_tensor_cores=use_tensor_cores)
            w.plan(d.kv_indptr, d.kv_indices[c], d.last_page_len, NUM_QO_HEADS, NUM_KV_HEADS, HEAD_DIM, PAGE_SIZE,
                   pos_encoding_mode="NONE", q_data_type=DTYPE, kv_data_type=DTYPE)
            calls.append(lambda w=w, q=d.qs[c]: w.run(q, (d.k_pool, d.v_pool)))
        return calls
    return runner


def fi_prefill_paged(backend: str):
    def runner(d: ShapeData) -> List[Callable[[], torch.Tensor]]:
        import flashinfer
        calls = []
        for c in range(d.copies):
            w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(_workspace(), "NHD", backend=backend)
            w.plan(d.qo_indptr, d.kv_indptr, d.kv_indices[c], d.last_page_len, NUM_QO_HEADS, NUM_KV_HEADS,
                   HEAD_DIM, PAGE_SIZE, causal=d.shape.causal, q_data_type=DTYPE, kv_data_type=DTYPE)
            calls.append(lambda w=w, q=d.qs[c]: w.run(q, (d.k_pool, d.v_pool)))
        return calls
    return runner


def fi_prefill_ragged(backend: str):
    def runner(d: ShapeData) -> List[Callable[[], torch.Tensor]]:
        import flashinfer
        kv_indptr = torch.tensor([0] + d.shape.kv_lens(), dtype=torch.int32).cumsum(0, dtype=torch.int32).cuda()
        calls = []
        for c in range(d.copies):
            k, v = d.contiguous_kv(c)
            w = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(_workspace(), "NHD", backend=backend)
            w.plan(d.qo_indptr, kv_indptr, NUM_QO_HEADS, NUM_KV_HEADS, HEAD_DIM, causal=d.shape.causal,
                   q_data_type=DTYPE, kv_data_type=DTYPE)
            calls.append(lambda w=w, q=d.qs[c], k=k, v=v: w.run(q, k, v))
        return calls
    return runner


# name -> (runner, phases it applies to, is FlashInfer)
PEERS: Dict[str, tuple] = {
    "sdpa-flash": (sdpa("flash"), ("decode", "prefill"), False),
    "sdpa-cudnn": (sdpa("cudnn"), ("decode", "prefill"), False),
    "flex": (flex, ("decode", "prefill"), False),
    "flashinfer-decode-tc": (fi_decode(True), ("decode",), True),
    "flashinfer-decode": (fi_decode(False), ("decode",), True),
    "flashinfer-prefill-paged": (fi_prefill_paged("auto"), ("prefill",), True),
    "flashinfer-prefill-paged-fa2": (fi_prefill_paged("fa2"), ("prefill",), True),
    "flashinfer-prefill-ragged": (fi_prefill_ragged("auto"), ("prefill",), True),
    # FlashInfer's sm90 path (its port of FlashAttention 3), named so it is never a fallback.
    "flashinfer-prefill-paged-fa3": (fi_prefill_paged("fa3"), ("prefill",), True),
    "flashinfer-prefill-ragged-fa3": (fi_prefill_ragged("fa3"), ("prefill",), True),
}


def applies(peer: str, shape: Shape) -> bool:
    return shape.phase in PEERS[peer][1]


def flashinfer_version() -> Optional[str]:
    try:
        import flashinfer
        return flashinfer.__version__
    except Exception as e:  # noqa: BLE001 - any import failure is reported, not fatal
        return f"unavailable: {type(e).__name__}: {e}"
