#!/usr/bin/env python3
"""Times attnkit's `mla` backend (or, with --backend jit, jit's latent kernels) and FlashInfer's MLA
wrapper (BatchMLAPagedAttentionWrapper) in one run over the same DeepSeek absorbed shapes (576 / 512,
bf16 latent cache, page 64), and writes a markdown table with the ratios and a JSON of every figure.
The fp8 rows time attnkit's fp8_blocked latent cache (656 bytes a token) alone (FlashInfer's MLA
wrapper has no such cache); their ratio is tokens/s against attnkit's bf16 row of the same batch.

    python3 bench/peers/mla.py --tool dist/attnkit --json out/mla.json --markdown out/mla.md

Decode figures are TB/s of the latent cache read plus q and out; verify and extend figures are
TFLOP/s, 2 x (576 + 512) FLOP per query row and visible token. attnkit's figure comes from
`attnkit bench` (CUDA events, median); FlashInfer's from CUDA events over its run() call, median
of 30 after 5 warm-up calls, on a cache rotated so that the data exceeds the L2.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

RANK, ROPE, PAGE = 512, 64, 64
FP8_SLOT_BYTES = RANK + 4 * 4 + ROPE * 2  # e4m3 values, four fp32 block scales, bf16 RoPE
SM_SCALE = 1.0 / (192 ** 0.5)

# (name, heads, [(prefix, new tokens, count), ...], metric)
SHAPES = [
    ("decode h16 128x4096", 16, [(4095, 1, 128)], "TB/s"),
    ("decode h16 128x8192", 16, [(8191, 1, 128)], "TB/s"),
    ("decode h16 skewed 64x256+64x16384", 16, [(255, 1, 64), (16383, 1, 64)], "TB/s"),
    ("decode h128 128x4096", 128, [(4095, 1, 128)], "TFLOP/s"),
    ("decode h128 128x8192", 128, [(8191, 1, 128)], "TFLOP/s"),
    ("verify2 h128 64x8192", 128, [(8190, 2, 64)], "TFLOP/s"),
    ("extend h128 1x4096", 128, [(0, 4096, 1)], "TFLOP/s"),
    ("decode h16 128x4096 fp8", 16, [(4095, 1, 128)], "TB/s"),
    ("decode h16 128x8192 fp8", 16, [(8191, 1, 128)], "TB/s"),
]


def is_fp8(name):
    return name.endswith(" fp8")


def requests_of(groups):
    out = []
    for prefix, new, count in groups:
        out += [(prefix, new)] * count
    return out


def work(heads, groups, fp8=False):
    """(bytes, flops) of one call: causal rows see their own position and everything before."""
    nbytes = flops = 0.0
    slot_bytes = FP8_SLOT_BYTES if fp8 else (RANK + ROPE) * 2
    for prefix, new in requests_of(groups):
        kv = prefix + new
        nbytes += kv * slot_bytes + new * heads * (RANK + ROPE + RANK) * 2
        visible = sum(prefix + t + 1 for t in range(new))
        flops += heads * visible * 2.0 * (RANK + ROPE + RANK)
    return nbytes, flops


def figure(metric, ms, heads, groups, fp8=False):
    nbytes, flops = work(heads, groups, fp8)
    return (nbytes if metric == "TB/s" else flops) / (ms * 1e-3) / 1e12


def attnkit_ms(tool, backend, heads, groups, fp8=False):
    spec = ",".join(f"{p}+{n}x{c}" for p, n, c in groups)
    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        cmd = [tool, "bench", "--backend", backend, "--preset", "deepseek-v3", "--heads", str(heads), "--requests",
               spec, "--page-size", str(PAGE), "--max-seconds", "10", "--json", tmp.name]
        if fp8:
            cmd += ["--kv-dtype", "e4m3", "--latent", "fp8-blocked"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        if proc.returncode != 0:
            raise RuntimeError(f"attnkit bench exit {proc.returncode}: {proc.stderr.strip()[-400:]}")
        r = json.load(open(tmp.name))["results"][0]
        if r.get("skipped"):
            raise RuntimeError(r["skipped"])
        return r["median_ms"]


def flashinfer_ms(heads, groups):
    import torch
    import flashinfer
    import timing

    reqs = requests_of(groups)
    kv_lens = [p + n for p, n in reqs]
    pages = [(k + PAGE - 1) // PAGE for k in kv_lens]
    num_pages = sum(pages)
    tokens = sum(n for _, n in reqs)
    dev = "cuda"
    cache_bytes = num_pages * PAGE * (RANK + ROPE) * 2
    copies = timing.rotation_count(cache_bytes, max_copies=4)
    ckv = [torch.randn(num_pages, PAGE, RANK, dtype=torch.bfloat16, device=dev) for _ in range(copies)]
    kpe = [torch.randn(num_pages, PAGE, ROPE, dtype=torch.bfloat16, device=dev) for _ in range(copies)]
    q_nope = torch.randn(tokens, heads, RANK, dtype=torch.bfloat16, device=dev)
    q_pe = torch.randn(tokens, heads, ROPE, dtype=torch.bfloat16, device=dev)
    qo_indptr = torch.tensor([0] + list(__import__("itertools").accumulate(n for _, n in reqs)), dtype=torch.int32, device=dev)
    kv_indptr = torch.tensor([0] + list(__import__("itertools").accumulate(pages)), dtype=torch.int32, device=dev)
    kv_indices = torch.randperm(num_pages, dtype=torch.int32, device=dev)
    kv_len_arr = torch.tensor(kv_lens, dtype=torch.int32, device=dev)
    workspace = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    wrapper = flashinfer.mla.BatchMLAPagedAttentionWrapper(workspace, backend="auto")
    wrapper.plan(qo_indptr, kv_indptr, kv_indices, kv_len_arr, heads, RANK, ROPE, PAGE, True, SM_SCALE,
                 torch.bfloat16, torch.bfloat16)
    out = torch.empty(tokens, heads, RANK, dtype=torch.bfloat16, device=dev)
    calls = [lambda i=i: wrapper.run(q_nope, q_pe, ckv[i], kpe[i], out=out) for i in range(copies)]
    ms = timing.median_ms(calls)
    del ckv, kpe, workspace
    torch.cuda.empty_cache()
    return ms


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", default="dist/attnkit")
    ap.add_argument("--json", required=True)
    ap.add_argument("--markdown", required=True)
    ap.add_argument("--shapes", nargs="*", help="names to run (default: all)")
    ap.add_argument("--no-peer", action="store_true", help="attnkit only")
    ap.add_argument("--backend", default="mla", help="the attnkit backend timed (mla, or jit's latent kernels)")
    args = ap.parse_args()
    rows = []
    for name, heads, groups, metric in SHAPES:
        if args.shapes and name not in args.shapes:
            continue
        fp8 = is_fp8(name)
        row = {"shape": name, "heads": heads, "requests": groups, "metric": metric}
        peer = None if args.no_peer or fp8 else lambda: flashinfer_ms(heads, groups)
        ours = lambda: attnkit_ms(args.tool, args.backend, heads, groups, fp8)  # noqa: E731
        for who, fn in [("attnkit", ours), ("flashinfer", peer)]:
            if fn is None:
                continue
            try:
                ms = fn()
                row[who] = {"ms": ms, "value": figure(metric, ms, heads, groups, fp8)}
            except Exception as e:  # noqa: BLE001 - reported in the table
                row[who] = {"error": f"{type(e).__name__}: {e}"}
                traceback.print_exc()
        print(json.dumps(row), flush=True)
        rows.append(row)
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    lines = [f"| shape | metric | attnkit `{args.backend}` | FlashInfer MLA | ratio |", "|---|---|---|---|---|"]
    by_name = {r["shape"]: r for r in rows}
    for r in rows:
        a, f = r.get("attnkit", {}), r.get("flashinfer", {})
        av = f"{a['value']:.3f} ({a['ms']:.3f} ms)" if "value" in a else a.get("error", "-")[:80]
        fv = f"{f['value']:.3f} ({f['ms']:.3f} ms)" if "value" in f else f.get("error", "-")[:80]
        ratio = f"{a['value'] / f['value']:.2f}" if "value" in a and "value" in f else "-"
        bf16 = by_name.get(r["shape"][: -len(" fp8")], {}).get("attnkit", {}) if is_fp8(r["shape"]) else {}
        if "ms" in a and "ms" in bf16:
            fv = "(no fp8 cache)"
            ratio = f"{bf16['ms'] / a['ms']:.2f}x bf16 tokens/s"
        lines.append(f"| {r['shape']} | {r['metric']} | {av} | {fv} | {ratio} |")
    open(args.markdown, "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
