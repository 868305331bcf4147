"""The peers attnkit is measured against, each set up on one shape's data: PyTorch SDPA (flash and
cuDNN), FlexAttention (compiled, with the shape's variant as score_mod / mask_mod), FlashInfer's
paged decode, paged prefill and ragged prefill wrappers, and SGLang's Triton decode and extend
kernels (sglang_triton.py loads them). A runner returns one callable per data copy; run_peers.py
times them (timing.py)."""
import math
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F

from shapes import NUM_KV_HEADS, NUM_QO_HEADS, Shape
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
    k_pool: torch.Tensor                      # [num_pages, page_size, NUM_KV_HEADS, head_dim] (the shape's)
    v_pool: torch.Tensor
    kv_indptr: torch.Tensor                   # [batch + 1] pages of each request (same for every copy)
    kv_indices: List[torch.Tensor]            # per copy: [num_pages_needed]
    last_page_len: torch.Tensor               # [batch]
    qo_indptr: torch.Tensor                   # [batch + 1]
    qs: List[torch.Tensor]                    # per copy: [total_q, NUM_QO_HEADS, head_dim]
    _contiguous: Dict[int, tuple] = field(default_factory=dict)

    def contiguous_kv(self, copy: int):
        """Per copy: k, v as [total_kv, heads, dim] (ragged) gathered from the pages."""
        if copy not in self._contiguous:
            ks, vs = [], []
            indptr = self.kv_indptr.tolist()
            for i, kv_len in enumerate(self.shape.kv_lens()):
                pages = self.kv_indices[copy][indptr[i]:indptr[i + 1]].long()
                ks.append(self.k_pool[pages].reshape(-1, NUM_KV_HEADS, self.shape.head_dim)[:kv_len])
                vs.append(self.v_pool[pages].reshape(-1, NUM_KV_HEADS, self.shape.head_dim)[:kv_len])
            self._contiguous[copy] = (torch.cat(ks), torch.cat(vs))
        return self._contiguous[copy]

    def dense(self, copy: int):
        """Per copy: q [B, H, qo, D], k and v [B, KVH, kv, D] for peers without ragged batches."""
        if not self.shape.uniform():
            raise Skip("no ragged batches: the lengths differ between requests")
        b = self.shape.batch_size
        qo, kv = self.shape.qo_lens()[0], self.shape.kv_lens()[0]
        k, v = self.contiguous_kv(copy)
        q = self.qs[copy].view(b, qo, NUM_QO_HEADS, self.shape.head_dim).transpose(1, 2).contiguous()
        k = k.view(b, kv, NUM_KV_HEADS, self.shape.head_dim).transpose(1, 2).contiguous()
        v = v.view(b, kv, NUM_KV_HEADS, self.shape.head_dim).transpose(1, 2).contiguous()
        return q, k, v


def make_data(shape: Shape, seed: int = 0, device: str = "cuda", copies: Optional[int] = None) -> ShapeData:
    """The shape's inputs on `device`, rotated among `copies` copies (default: enough to exceed the L2)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    pages_per_request = [math.ceil(n / shape.page_size) for n in shape.kv_lens()]
    needed = sum(pages_per_request)
    copies = copies or rotation_count(shape.kv_bytes())
    total = needed * copies
    pool_shape = (total, shape.page_size, NUM_KV_HEADS, shape.head_dim)
    k_pool = torch.randn(pool_shape, device=device, dtype=DTYPE, generator=gen)
    v_pool = torch.randn(pool_shape, device=device, dtype=DTYPE, generator=gen)
    perm = torch.randperm(total, device=device, generator=gen).to(torch.int32)
    kv_indptr = torch.tensor([0] + pages_per_request, dtype=torch.int32).cumsum(0, dtype=torch.int32).to(device)
    last = [n - (p - 1) * shape.page_size for n, p in zip(shape.kv_lens(), pages_per_request)]
    qo_indptr = torch.tensor([0] + shape.qo_lens(), dtype=torch.int32).cumsum(0, dtype=torch.int32).to(device)
    total_q = sum(shape.qo_lens())
    qs = [torch.randn(total_q, NUM_QO_HEADS, shape.head_dim, device=device, dtype=DTYPE, generator=gen)
          for _ in range(copies)]
    return ShapeData(shape, copies, k_pool, v_pool, kv_indptr,
                     [perm[c * needed:(c + 1) * needed].contiguous() for c in range(copies)],
                     torch.tensor(last, dtype=torch.int32).to(device), qo_indptr, qs)


def to_ragged(out: torch.Tensor) -> torch.Tensor:
    """[B, H, qo, D] -> [B * qo, H, D], the layout FlashInfer returns."""
    return out.transpose(1, 2).reshape(-1, NUM_QO_HEADS, out.shape[-1])


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


def flex_mods(s: Shape, device="cuda"):
    """FlexAttention's (score_mod, mask_mod) for the shape: causal and the variant, with query
    positions counted from the start of the request (q_idx + prefix, as attnkit's q_pos)."""
    prefix = s.requests[0][0]
    causal = s.causal and s.phase == "prefill"
    score_mod = mask_mod = None
    if s.variant == "alibi":
        slopes = torch.tensor(s.alibi_slopes(), dtype=torch.float32, device=device)

        def score_mod(score, b, h, q_idx, kv_idx):
            return score + slopes[h] * (kv_idx - (q_idx + prefix))
    elif s.variant == "softcap":
        cap = float(s.variant_arg)

        def score_mod(score, b, h, q_idx, kv_idx):
            return cap * torch.tanh(score / cap)
    if s.variant == "document":
        doc = s.variant_arg

        def mask_mod(b, h, q_idx, kv_idx):
            same = (q_idx + prefix) // doc == kv_idx // doc
            return same & (q_idx + prefix >= kv_idx) if causal else same
    elif causal:
        def mask_mod(b, h, q_idx, kv_idx):
            return q_idx + prefix >= kv_idx
    return score_mod, mask_mod


def flex(d: ShapeData) -> List[Callable[[], torch.Tensor]]:
    global _flex_compiled
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    if _flex_compiled is None:
        _flex_compiled = torch.compile(flex_attention, dynamic=False)
    s = d.shape
    score_mod, mask_mod = flex_mods(s)
    block_mask = None
    if mask_mod is not None:
        block_mask = create_block_mask(mask_mod, None, None, s.qo_lens()[0], s.kv_lens()[0], device="cuda")
    calls = []
    for c in range(d.copies):
        q, k, v = d.dense(c)
        calls.append(lambda q=q, k=k, v=v: to_ragged(
            _flex_compiled(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=True)))
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
            w.plan(d.kv_indptr, d.kv_indices[c], d.last_page_len, NUM_QO_HEADS, NUM_KV_HEADS, d.shape.head_dim,
                   d.shape.page_size,
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
                   d.shape.head_dim, d.shape.page_size, causal=d.shape.causal, q_data_type=DTYPE, kv_data_type=DTYPE)
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
            w.plan(d.qo_indptr, kv_indptr, NUM_QO_HEADS, NUM_KV_HEADS, d.shape.head_dim, causal=d.shape.causal,
                   q_data_type=DTYPE, kv_data_type=DTYPE)
            calls.append(lambda w=w, q=d.qs[c], k=k, v=v: w.run(q, k, v))
        return calls
    return runner


# --- SGLang's Triton kernels ---------------------------------------------------------------------
# They read a token-level pool: K and V as [slots, kv heads, dim] with kv_indptr / kv_indices over
# token slots (SGLang's req_to_token). Our pages are that pool seen 16 slots at a time, so slot =
# page * page_size + offset indexes the same shuffled pages every other paged peer reads.

SGLANG_MAX_KV_SPLITS = 8      # SGLang's --triton-attention-num-kv-splits default (CUDA, non-MLA)


def _sglang_kernels():
    import sglang_triton
    try:
        return sglang_triton.load()
    except sglang_triton.Unavailable as e:
        raise Skip(str(e)) from None


def _accepted(fn, **kwargs):
    """The keyword arguments `fn` takes (the signatures grow between SGLang releases)."""
    import inspect
    params = inspect.signature(fn).parameters
    return {k: v for k, v in kwargs.items() if k in params}


def token_slots(d: ShapeData, copy: int, keep) -> torch.Tensor:
    """int32 token slots of each request's first keep(i, kv_len) tokens, request after request."""
    indptr, out = d.kv_indptr.tolist(), []
    offsets = torch.arange(d.shape.page_size, device=d.k_pool.device, dtype=torch.int64)
    for i, kv_len in enumerate(d.shape.kv_lens()):
        pages = d.kv_indices[copy][indptr[i]:indptr[i + 1]].long()
        out.append((pages[:, None] * d.shape.page_size + offsets).reshape(-1)[:keep(i, kv_len)])
    return torch.cat(out).to(torch.int32)


def _indptr(lens: List[int], device) -> torch.Tensor:
    return torch.tensor([0] + lens, dtype=torch.int32).cumsum(0, dtype=torch.int32).to(device)


def sglang_decode(d: ShapeData) -> List[Callable[[], torch.Tensor]]:
    """decode_attention_fwd with SGLang's triton backend's buffers: attn_logits [B, H, splits, Dv]
    and attn_lse [B, H, splits] in fp32, max_kv_splits 8, num_kv_splits per request from SGLang's
    own heuristic (metadata.get_num_kv_splits_triton with the SM count)."""
    s = d.shape
    if s.phase != "decode":
        raise Skip("decode kernel: one new token a request")
    m = _sglang_kernels()
    b, splits, dev = s.batch_size, SGLANG_MAX_KV_SPLITS, d.k_pool.device
    seq_lens = torch.tensor(s.kv_lens(), dtype=torch.int32, device=dev)
    num_kv_splits = torch.full((b,), splits, dtype=torch.int32, device=dev)
    uneven = torch.zeros((1,), dtype=torch.int32, device=dev)
    # Without a GPU (Triton's interpreter) SGLang's core count is 0 and every request takes max splits.
    sms = torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else 0
    if sms and m.metadata is not None and hasattr(m.metadata, "get_num_kv_splits_triton"):
        fn = m.metadata.get_num_kv_splits_triton
        extra = {"uneven_batch_ptr": uneven} if "uneven_batch_ptr" in fn.arg_names else {}
        fn[(1,)](num_kv_splits, seq_lens, b, 1, NUM_QO_HEADS, NUM_KV_HEADS, splits, sms,
                 MAX_NUM_SEQ=256 if b < 256 else 1 << (b - 1).bit_length(), **extra)
    attn_logits = torch.empty((b, NUM_QO_HEADS, splits, d.shape.head_dim), dtype=torch.float32, device=dev)
    attn_lse = torch.empty((b, NUM_QO_HEADS, splits), dtype=torch.float32, device=dev)
    k_buf, v_buf = (p.view(-1, NUM_KV_HEADS, d.shape.head_dim) for p in (d.k_pool, d.v_pool))
    kv_indptr = _indptr(s.kv_lens(), dev)
    fwd = m.decode.decode_attention_fwd
    common = _accepted(fwd, k_buffer=k_buf, v_buffer=v_buf, kv_indptr=kv_indptr, attn_logits=attn_logits,
                       attn_lse=attn_lse, num_kv_splits=num_kv_splits, max_kv_splits=splits,
                       sm_scale=d.shape.head_dim ** -0.5, k_scale=1.0, v_scale=1.0,
                       logit_cap=float(s.variant_arg) if s.variant == "softcap" else 0.0,
                       use_pdl=dev.type == "cuda" and torch.cuda.get_device_capability(dev)[0] >= 9,
                       page_size=1, uneven_batch=uneven)
    kws = [dict(common, q=d.qs[c], o=torch.empty_like(d.qs[c]), kv_indices=token_slots(d, c, lambda i, n: n))
           for c in range(d.copies)]
    if kws[0].get("use_pdl"):
        # Programmatic dependent launch between the two stages, SGLang's choice on sm90+, where this
        # Triton can; else plain launches (a real error then shows in the timed calls).
        try:
            fwd(**kws[0])
        except Exception:  # noqa: BLE001
            for kw in kws:
                kw["use_pdl"] = False
    return [lambda kw=kw: (fwd(**kw), kw["o"])[1] for kw in kws]


def sglang_extend(d: ShapeData) -> List[Callable[[], torch.Tensor]]:
    """extend_attention_fwd as SGLang's triton backend calls it for a prefill: the new tokens' q, k
    and v contiguous ([tokens, heads, dim]), the prefix read from the pool through token slots,
    is_causal as the shape says (it masks the new tokens among themselves; the prefix is fully
    visible), no custom mask."""
    s = d.shape
    if s.phase != "prefill":
        raise Skip("extend kernel: prefill shapes")
    m = _sglang_kernels()
    prefixes, news = [p for p, _ in s.requests], s.qo_lens()
    kv_starts = [0] + list(torch.tensor(s.kv_lens()).cumsum(0).tolist())
    k_buf, v_buf = (p.view(-1, NUM_KV_HEADS, d.shape.head_dim) for p in (d.k_pool, d.v_pool))
    fwd = m.extend.extend_attention_fwd
    common = _accepted(fwd, k_buffer=k_buf, v_buffer=v_buf, qo_indptr=d.qo_indptr,
                       kv_indptr=_indptr(prefixes, d.k_pool.device),
                       custom_mask=None, is_causal=s.causal, mask_indptr=None, max_len_extend=max(news),
                       k_scale=1.0, v_scale=1.0, sm_scale=d.shape.head_dim ** -0.5,
                       logit_cap=float(s.variant_arg) if s.variant == "softcap" else 0.0,
                       page_size=1, extend_seq_lens_cpu=news)
    calls = []
    for c in range(d.copies):
        k, v = d.contiguous_kv(c)
        rows = torch.cat([torch.arange(kv_starts[i] + p, kv_starts[i + 1], device=k.device)
                          for i, p in enumerate(prefixes)])
        q, o = d.qs[c], torch.empty_like(d.qs[c])
        kw = dict(common, q_extend=q, k_extend=k[rows].contiguous(), v_extend=v[rows].contiguous(), o_extend=o,
                  kv_indices=token_slots(d, c, lambda i, n: prefixes[i]))
        calls.append(lambda kw=kw, o=o: (fwd(**kw), o)[1])
    return calls


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
    "sglang-triton-decode": (sglang_decode, ("decode",), False),
    "sglang-triton-extend": (sglang_extend, ("prefill",), False),
}

# The variants each peer can express (shapes.VARIANTS); the others run plain attention only.
PEER_VARIANTS: Dict[str, tuple] = {
    "flex": (None, "alibi", "document", "softcap"),
    "sglang-triton-decode": (None, "softcap"),      # logit_cap: cap * tanh(score / cap)
    "sglang-triton-extend": (None, "softcap"),
}


def applies(peer: str, shape: Shape) -> bool:
    return (shape.phase in PEERS[peer][1] and shape.variant in PEER_VARIANTS.get(peer, (None,)) and
            shape.kv_dtype == "bf16")


def flashinfer_version() -> Optional[str]:
    try:
        import flashinfer
        return flashinfer.__version__
    except Exception as e:  # noqa: BLE001 - any import failure is reported, not fatal
        return f"unavailable: {type(e).__name__}: {e}"
