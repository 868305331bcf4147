"""The shapes attnkit is measured on and the figures derived from them (KV bytes, unmasked FLOPs).

One table shared by the peers (run_peers.py) and the device check's attnkit runs, so both time the
same work; the peers themselves are in peers.py.
"""
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

# Llama-3-8B attention: 32 query heads, 8 KV heads, head_dim 128, bf16, pages of 16 tokens.
NUM_QO_HEADS = 32
NUM_KV_HEADS = 8
HEAD_DIM = 128
PAGE_SIZE = 16
DTYPE_BYTES = 2
# What a variant shape adds to plain attention: ALiBi biases (slope_h * (kv_pos - q_pos), the standard
# slopes 2^(-8 (h + 1) / H)), a block-diagonal document mask on top of causal, or a tanh soft-cap.
VARIANTS = (None, "alibi", "document", "softcap")
AZURE_CONV_16 = [1316, 1342, 5776, 398, 200, 123, 399, 1118, 2322, 398, 378, 402, 1004, 401, 1884, 1313]


@dataclass
class Shape:
    name: str
    phase: str                          # "decode" or "prefill"
    requests: List[Tuple[int, int]]     # (prefix_len, num_new_tokens) per request
    causal: bool = True
    tags: List[str] = field(default_factory=list)
    variant: Optional[str] = None       # one of VARIANTS
    variant_arg: int = 0                # "softcap": the cap; "document": the tokens of each document
    head_dim: int = HEAD_DIM
    page_size: int = PAGE_SIZE
    kv_dtype: str = "bf16"              # the cache; "e4m3" (scales 1) is timed on attnkit alone

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise ValueError(f"{self.name}: variant {self.variant!r} is not one of {VARIANTS}")
        if self.variant in ("softcap", "document") and self.variant_arg <= 0:
            raise ValueError(f"{self.name}: {self.variant} needs variant_arg > 0")

    @property
    def batch_size(self) -> int:
        return len(self.requests)

    def kv_lens(self) -> List[int]:
        return [p + n for p, n in self.requests]

    def qo_lens(self) -> List[int]:
        return [n for _, n in self.requests]

    def uniform(self) -> bool:
        return len(set(self.requests)) == 1

    def kv_bytes(self) -> float:
        """Bytes of K and V read once: the floor of a decode step's memory traffic."""
        return float(sum(self.kv_lens())) * NUM_KV_HEADS * self.head_dim * 2 * DTYPE_BYTES

    def visible_pairs(self) -> float:
        """(query, key) pairs the mask leaves visible; causal queries sit at the end of their request."""
        total = 0.0
        for prefix, n in self.requests:
            if self.variant == "document":
                total += self._document_pairs(prefix, n)
            elif self.causal:
                total += n * prefix + n * (n + 1) / 2
            else:
                total += n * (prefix + n)
        return total

    def _document_pairs(self, prefix: int, n: int) -> float:
        """Visible pairs of one request under the document mask: a query sees the keys of its own
        document (kv_pos / L == q_pos / L), up to itself where causal."""
        doc, kv_len, total = self.variant_arg, prefix + n, 0
        for q_pos in range(prefix, kv_len):
            start = q_pos // doc * doc
            total += (q_pos + 1 if self.causal else min(start + doc, kv_len)) - start
        return float(total)

    def alibi_slopes(self) -> List[float]:
        """ALiBi's slope of each query head: 2^(-8 (h + 1) / H)."""
        return [2.0 ** (-8.0 * (h + 1) / NUM_QO_HEADS) for h in range(NUM_QO_HEADS)]

    def flops(self) -> float:
        """Unmasked FLOPs: Q K^T and P V, 2 FLOPs a multiply-add each (causal counts only the visible part)."""
        return 4.0 * self.visible_pairs() * NUM_QO_HEADS * self.head_dim

    def metric(self) -> str:
        return "TB/s" if self.phase == "decode" else "TFLOP/s"

    def figure(self, ms: float) -> float:
        """TB/s of KV read (decode) or TFLOP/s (prefill) for one call of `ms` milliseconds."""
        work = self.kv_bytes() if self.phase == "decode" else self.flops()
        return work / (ms * 1e-3) / 1e12

    def requests_arg(self) -> str:
        """The requests as "PREFIX+NEW[xCOUNT],...": runs of equal requests folded."""
        runs: List[Tuple[Tuple[int, int], int]] = []
        for r in self.requests:
            if runs and runs[-1][0] == r:
                runs[-1] = (r, runs[-1][1] + 1)
            else:
                runs.append((r, 1))
        return ",".join(f"{p}+{n}" + (f"x{c}" if c > 1 else "") for (p, n), c in runs)

    def attnkit_variant_args(self) -> List[str]:
        """The variant as `attnkit bench` options: ALiBi and the document mask as --score-mod /
        --mask-mod expressions (the language of src/core/variant_expr.h: score is the scaled logit,
        q_pos and kv_pos positions in the request, head the query head), which only backends with
        user variants (jit, reference) run, the others refusing the shape; soft-cap as --soft-cap;
        [] for plain attention.

        The document mask is written from positions (kv_pos / L == q_pos / L, int division), which
        holds for documents of equal length L laid end to end in one request: the expressions read
        no per-token document ids. Causal stays the shape's own, beneath the mask."""
        if self.variant == "alibi":
            # -8 / H is exact in float for H = 32 (-0.25): the slope is the same number as the peers'.
            return ["--score-mod", f"score + exp2f({-8.0 / NUM_QO_HEADS!r}f * (head + 1)) * (kv_pos - q_pos)"]
        if self.variant == "softcap":
            # The built-in soft-cap (cap * tanh(scaled logit / cap)), which every backend with the
            # feature runs, rather than the same formula as a score_mod, which only jit and reference do.
            return ["--soft-cap", str(self.variant_arg)]
        if self.variant == "document":
            return ["--mask-mod", f"kv_pos / {self.variant_arg} == q_pos / {self.variant_arg}"]
        return []

    def attnkit_bench_args(self, tool_has_requests: bool = False) -> Optional[List[str]]:
        """`attnkit bench` options for this shape (its page size and, where not 128, head dim
        included), or None where the tool has no way to say it (uniform batches only, unless the
        tool takes --requests and --non-causal); a variant's expressions (attnkit_variant_args)
        come last."""
        args = self._attnkit_shape_args(tool_has_requests)
        if args is None:
            return None
        dims = [] if self.head_dim == HEAD_DIM else ["--head-dim", str(self.head_dim)]
        cache = [] if self.kv_dtype == "bf16" else ["--kv-dtype", self.kv_dtype]
        return args + ["--page-size", str(self.page_size)] + dims + cache + self.attnkit_variant_args()

    def _attnkit_shape_args(self, tool_has_requests: bool) -> Optional[List[str]]:
        if tool_has_requests:
            phase = "decode" if self.phase == "decode" else "prefill"
            return (["--phase", phase, "--requests", self.requests_arg()] +
                    ([] if self.causal else ["--non-causal"]))
        if not self.uniform():
            return None
        prefix, n = self.requests[0]
        if self.phase == "decode":
            return ["--phase", "decode", "--batch", str(self.batch_size), "--kv-len", str(prefix + n)]
        if prefix == 0 and self.causal:
            return ["--phase", "prefill", "--batch", str(self.batch_size), "--kv-len", str(n)]
        return None


def decode(batch: int, kv_len: int) -> Shape:
    return Shape(f"decode {batch}x{kv_len}", "decode", [(kv_len - 1, 1)] * batch)


SHAPES: List[Shape] = [
    decode(64, 16384),
    decode(128, 8192),
    decode(64, 4096),
    decode(16, 8192),
    decode(1, 32768),
    Shape("decode skewed 32x128+32x8192", "decode", [(127, 1)] * 32 + [(8191, 1)] * 32),
    Shape("prefill causal 1x8192", "prefill", [(0, 8192)], causal=True),
    Shape("prefill full 1x8192", "prefill", [(0, 8192)], causal=False),
    Shape("chunked prefill 2048 on 30720", "prefill", [(30720, 2048)], causal=True),
    Shape("prefill causal 1x16384", "prefill", [(0, 16384)], causal=True),
    Shape("prefill full 1x16384", "prefill", [(0, 16384)], causal=False),
    Shape("prefill varlen causal 4x4096", "prefill", [(0, 4096)] * 4, causal=True),
    Shape("prefill varlen full 4x4096", "prefill", [(0, 4096)] * 4, causal=False),
    # Pages of 64 slots (one TMA box a page where the kernel takes them whole), and head dims 64 / 256.
    Shape("prefill causal 1x8192 page 64", "prefill", [(0, 8192)], causal=True, page_size=64),
    Shape("prefill full 1x8192 page 64", "prefill", [(0, 8192)], causal=False, page_size=64),
    Shape("prefill varlen causal 4x4096 page 64", "prefill", [(0, 4096)] * 4, causal=True, page_size=64),
    Shape("prefill varlen full 4x4096 page 64", "prefill", [(0, 4096)] * 4, causal=False, page_size=64),
    Shape("chunked prefill 2048 on 30720 page 64", "prefill", [(30720, 2048)], causal=True, page_size=64),
    Shape("prefill causal 1x16384 page 64", "prefill", [(0, 16384)], causal=True, page_size=64),
    Shape("prefill full 1x16384 page 64", "prefill", [(0, 16384)], causal=False, page_size=64),
    Shape("prefill full 1x8192 d64 page 64", "prefill", [(0, 8192)], causal=False, head_dim=64, page_size=64),
    Shape("prefill full 1x8192 d256 page 64", "prefill", [(0, 8192)], causal=False, head_dim=256, page_size=64),
    # Pages of one slot (SGLang's token pool: rows gathered one by one) and an e4m3 cache.
    Shape("prefill causal 1x8192 page 1", "prefill", [(0, 8192)], causal=True, page_size=1),
    Shape("chunked prefill 2048 on 30720 page 1", "prefill", [(30720, 2048)], causal=True, page_size=1),
    Shape("prefill causal 1x8192 e4m3 cache", "prefill", [(0, 8192)], causal=True, kv_dtype="e4m3"),
    # The fp8 target's shape (bf16 beside it: "prefill full 1x8192 page 64"); `hopper` multiplies it on
    # e4m3 tensor cores with --hopper-fp8-products (scripts/device-ab.sh AB_BENCH_ARGS_B).
    Shape("prefill full 1x8192 page 64 e4m3 cache", "prefill", [(0, 8192)], causal=False, page_size=64,
          kv_dtype="e4m3"),
    Shape("prefill full 1x8192 d64", "prefill", [(0, 8192)], causal=False, head_dim=64),
    Shape("prefill full 1x8192 d256", "prefill", [(0, 8192)], causal=False, head_dim=256),
    # 16 prompts drawn from the Azure LLM 2023 conversation trace's ContextTokens
    # (random.Random(16).sample(rows, 16)), and one prompt of their total length to compare with.
    Shape("prefill azure 16 prompts", "prefill", [(0, n) for n in AZURE_CONV_16], causal=True),
    Shape(f"prefill causal 1x{sum(AZURE_CONV_16)}", "prefill", [(0, sum(AZURE_CONV_16))], causal=True),
    Shape("prefill azure 16 prompts page 64", "prefill", [(0, n) for n in AZURE_CONV_16], causal=True, page_size=64),
    Shape(f"prefill causal 1x{sum(AZURE_CONV_16)} page 64", "prefill", [(0, sum(AZURE_CONV_16))], causal=True,
          page_size=64),
    # Variants: FlexAttention's score_mod / mask_mod against attnkit's jit backend.
    Shape("decode 16x8192 alibi", "decode", [(8191, 1)] * 16, variant="alibi"),
    Shape("prefill causal 1x8192 alibi", "prefill", [(0, 8192)], causal=True, variant="alibi"),
    Shape("prefill causal 1x8192 softcap 30", "prefill", [(0, 8192)], causal=True, variant="softcap",
          variant_arg=30),
    # One 8192-token sequence of 4 documents of 2048 tokens each: causal within a document.
    Shape("prefill document 4x2048 in 8192", "prefill", [(0, 8192)], causal=True, variant="document",
          variant_arg=2048),
]


def by_name(names: Optional[List[str]]) -> List[Shape]:
    if not names:
        return list(SHAPES)
    known = {s.name: s for s in SHAPES}
    missing = [n for n in names if n not in known]
    if missing:
        raise SystemExit(f"unknown shape(s) {missing}; known: {list(known)}")
    return [known[n] for n in names]


if __name__ == "__main__":
    # For the device scripts: `shapes.py names [PHASE]` prints the shape names, one a line;
    # `shapes.py bench-args NAME` prints `attnkit bench`'s options for that shape (a variant's
    # expressions quoted for the shell).
    import shlex
    import sys

    if len(sys.argv) >= 2 and sys.argv[1] == "names":
        print("\n".join(s.name for s in SHAPES if len(sys.argv) < 3 or s.phase == sys.argv[2]))
    elif len(sys.argv) == 3 and sys.argv[1] == "bench-args":
        print(shlex.join(by_name([sys.argv[2]])[0].attnkit_bench_args(True)))
    else:
        raise SystemExit("usage: shapes.py names [decode|prefill] | shapes.py bench-args NAME")
