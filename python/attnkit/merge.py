"""Merging partial attention states (split-KV chunks, a shared prefix and its suffixes, ranks of a
context-parallel group): o = sum_i exp(lse_i - lse) o_i, lse = log sum_i exp(lse_i), natural log."""
from . import _attnkit


def _empty_like(x, shape, dtype=None):
    """An uninitialised array of `shape` of x's framework and device (x's dtype, or `dtype` by name)."""
    if type(x).__module__.startswith("torch"):
        import torch

        return torch.empty(shape, dtype=getattr(torch, dtype) if dtype else x.dtype, device=x.device)
    import numpy

    return numpy.empty(shape, dtype=dtype or x.dtype)


def merge_states(parts, out=None, out_lse=None):
    """Merges [(o, lse), ...] with o [num_tokens, num_heads, head_dim] and lse [num_tokens, num_heads],
    float32 on the CPU; returns (o, lse), written into out and out_lse where given."""
    parts = [tuple(p) for p in parts]
    if not parts:
        raise _attnkit.Error("merge_states: parts must hold at least one (o, lse) pair")
    o0, lse0 = parts[0]
    if out is None:
        out = _empty_like(o0, tuple(o0.shape))
    if out_lse is None:
        out_lse = _empty_like(lse0, tuple(lse0.shape))
    _attnkit._merge_states(parts, out, out_lse)
    return out, out_lse


def merge_state(v_a, s_a, v_b, s_b):
    """FlashInfer's merge_state(v_a, s_a, v_b, s_b) -> (v, s): two states merged. attnkit's LSE is the
    natural log (an empty state has -inf)."""
    return merge_states([(v_a, s_a), (v_b, s_b)])
