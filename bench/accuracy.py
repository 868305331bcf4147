"""attnkit's error beside PyTorch SDPA's on the same inputs.

Each attnkit backend's output and SDPA's (the cuDNN kernel on a GPU, the math kernel on the CPU)
are compared with the same attention computed in float64 from the same bf16 inputs (q, k, v drawn
from N(0, 1), Llama-3-8B heads: 32 query heads over 8 KV heads of 128). attnkit reads K/V from a
paged cache with shuffled pages, as in serving. Printed per shape: each side's largest and RMS
error, and attnkit's over SDPA's. Exit status 1 where attnkit's error is more than `--bound` times
SDPA's (either measure), 2 where nothing could be compared.

    python3 bench/accuracy.py --device cuda --backends hopper planned --json out/accuracy.json
    python3 bench/accuracy.py --device cpu --backends cpu --tokens 512      # the same on a CPU
"""
import argparse
import json
import math
import sys

import torch

import attnkit

HEADS, KV_HEADS, HEAD_DIM, PAGE_SIZE = 32, 8, 128, 16


def exact(q, k, v, causal):
    """Attention in float64 of the given (bf16) values: the yardstick for both sides."""
    q, k, v = (t.double().transpose(0, 1) for t in (q, k, v))  # [heads, tokens, dim]
    k = k.repeat_interleave(HEADS // KV_HEADS, dim=0)
    v = v.repeat_interleave(HEADS // KV_HEADS, dim=0)
    s = (q @ k.transpose(1, 2)) / math.sqrt(HEAD_DIM)
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return (torch.softmax(s, dim=-1) @ v).transpose(0, 1)  # [tokens, heads, dim]


def sdpa(q, k, v, causal):
    """SDPA's output and its kernel's name: cuDNN on a GPU (flash where this torch's cuDNN kernel
    refuses the shape, said in the name), the math kernel on the CPU. K and V are repeated to the
    query heads first, which every kernel takes."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    group = HEADS // KV_HEADS
    args = [t.transpose(0, 1).unsqueeze(0) for t in (q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1))]
    kernels = [(SDPBackend.CUDNN_ATTENTION, "cuDNN"), (SDPBackend.FLASH_ATTENTION, "flash (cuDNN refused)")] \
        if q.is_cuda else [(SDPBackend.MATH, "SDPA math")]
    for kernel, name in kernels:
        try:
            with sdpa_kernel(kernel):
                out = torch.nn.functional.scaled_dot_product_attention(*args, is_causal=causal)
            return out.squeeze(0).transpose(0, 1), name
        except RuntimeError as e:
            print(f"SDPA {name}: {str(e).splitlines()[0][:200]}", file=sys.stderr)
    raise RuntimeError("no SDPA kernel ran")


def attnkit_forward(backend_name, q, k, v, causal, seed):
    """One fresh prompt through `backend_name`: K/V stored into shuffled pages, then attended."""
    tokens = q.shape[0]
    pages = -(-tokens // PAGE_SIZE)
    num_pages = 2 * pages
    gen = torch.Generator().manual_seed(seed)
    pool = torch.zeros(1, 2, num_pages, PAGE_SIZE, KV_HEADS, HEAD_DIM, dtype=q.dtype, device=q.device)
    spec = attnkit.AttentionSpec(HEADS, KV_HEADS, HEAD_DIM, causal=causal)
    backend = attnkit.Backend(backend_name, spec, attnkit.KvCache.from_pools(pool))
    as_i32 = lambda x: torch.tensor(x, dtype=torch.int32)
    batch = attnkit.Batch(as_i32([0, tokens]), as_i32([0, pages]),
                          torch.randperm(num_pages, generator=gen)[:pages].to(torch.int32),
                          as_i32([(tokens - 1) % PAGE_SIZE + 1]), page_size=PAGE_SIZE)
    backend.plan(batch)
    out = torch.full_like(q, float("nan"))
    backend.forward(0, q, k, v, out)
    return out


def errors(out, ref):
    d = (out.double() - ref).flatten()
    return {"max_abs": float(d.abs().max()), "rms": float(d.pow(2).mean().sqrt())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--backends", nargs="+", default=["hopper", "planned"])
    ap.add_argument("--tokens", type=int, nargs="+", default=[2048, 4096], help="prompt lengths")
    ap.add_argument("--bound", type=float, default=2.0, help="largest attnkit / SDPA error ratio that passes")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()

    rows, failed = [], False
    for tokens in args.tokens:
        for causal in (True, False):
            gen = torch.Generator().manual_seed(tokens + causal)
            q, k, v = (torch.randn(tokens, h, HEAD_DIM, generator=gen).to(torch.bfloat16).to(args.device)
                       for h in (HEADS, KV_HEADS, KV_HEADS))
            ref = exact(q, k, v, causal)
            peer_out, peer = sdpa(q, k, v, causal)
            peer_err = errors(peer_out, ref)
            for name in args.backends:
                shape = f"{'causal' if causal else 'full'} 1 x {tokens}"
                row = {"shape": shape, "backend": name, "peer": peer, "peer_error": peer_err}
                try:
                    row["error"] = errors(attnkit_forward(name, q, k, v, causal, tokens), ref)
                except attnkit.Error as e:
                    row["skipped"] = str(e)[:300]
                    print(f"{shape:18s} {name:8s} skipped: {row['skipped']}")
                    rows.append(row)
                    continue
                ratio = {m: row["error"][m] / peer_err[m] if peer_err[m] > 0 else math.inf for m in peer_err}
                row["ratio"] = ratio
                row["passed"] = all(r <= args.bound for r in ratio.values())
                failed = failed or not row["passed"]
                print(f"{shape:18s} {name:8s} max {row['error']['max_abs']:.3e} rms {row['error']['rms']:.3e}  "
                      f"{peer} max {peer_err['max_abs']:.3e} rms {peer_err['rms']:.3e}  "
                      f"ratio max {ratio['max_abs']:.2f} rms {ratio['rms']:.2f}  {'ok' if row['passed'] else 'OVER'}")
                rows.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "bound": args.bound, "rows": rows}, f, indent=1)
    compared = [r for r in rows if "passed" in r]
    print(f"accuracy: {sum(r['passed'] for r in compared)} of {len(compared)} within {args.bound}x {rows[0]['peer']}"
          if rows else "accuracy: nothing compared")
    if not compared:
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
