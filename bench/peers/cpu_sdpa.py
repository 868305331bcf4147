"""PyTorch's CPU scaled_dot_product_attention on attnkit's CPU decode shapes, beside `attnkit bench`.

Llama-3-8B heads (32 query heads, 8 KV heads, head_dim 128), one query token a request, the KV
history contiguous ([batch, 8, kv_len, 128], GQA through enable_gqa), the same threads as attnkit's
pool. torch: median of 20 calls after 3 warm-up calls; GB/s of KV read by attnkit's decode formula
(every request's K and V history read once). Each round times torch, then runs `attnkit bench` on the
same shape (the next round in the other order), and the ratio is attnkit's GB/s over torch's.

  python bench/peers/cpu_sdpa.py --attnkit build/tools/attnkit/attnkit --kv-dtype bf16 \
      --shapes 8x4096,1x32768 [--cpu-target avx2] [--rounds 2] [--json out.json]
"""
import argparse
import json
import statistics
import subprocess
import tempfile
import time

import torch
import torch.nn.functional as F

NUM_QO_HEADS, NUM_KV_HEADS, HEAD_DIM = 32, 8, 128
DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32, "f16": torch.float16}


def kv_bytes(batch: int, kv_len: int, dtype: torch.dtype) -> float:
    return float(batch) * kv_len * NUM_KV_HEADS * 2 * HEAD_DIM * torch.tensor([], dtype=dtype).element_size()


def torch_decode(batch: int, kv_len: int, dtype: torch.dtype, warmup: int = 3, repeats: int = 20) -> dict:
    q = torch.randn(batch, NUM_QO_HEADS, 1, HEAD_DIM, dtype=dtype)
    k = torch.randn(batch, NUM_KV_HEADS, kv_len, HEAD_DIM, dtype=dtype)
    v = torch.randn(batch, NUM_KV_HEADS, kv_len, HEAD_DIM, dtype=dtype)
    scale = HEAD_DIM ** -0.5
    with torch.inference_mode():
        for _ in range(warmup):
            F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True)
        ms = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True)
            ms.append((time.perf_counter() - t0) * 1e3)
    median_ms = statistics.median(ms)
    return {"median_ms": median_ms, "bytes_per_s": kv_bytes(batch, kv_len, dtype) / (median_ms * 1e-3)}


def attnkit_decode(exe: str, batch: int, kv_len: int, kv_dtype: str, cpu_target: str) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [exe, "bench", "--backend", "cpu", "--phase", "decode", "--batch", str(batch), "--kv-len", str(kv_len),
               "--dtype", kv_dtype, "--kv-dtype", kv_dtype, "--ceilings", "--json", out.name]
        if cpu_target:
            cmd += ["--cpu-target", cpu_target]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        r = json.load(open(out.name))["results"][0]
    return {k: r.get(k) for k in ("median_ms", "bytes_per_s", "fraction_of_ceiling", "read_beside_bytes_per_s",
                                  "cpu_target")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attnkit", default="build/tools/attnkit/attnkit")
    ap.add_argument("--shapes", default="8x4096,1x32768", help="BATCHxKV_LEN,...")
    ap.add_argument("--kv-dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--cpu-target", default="", help="attnkit's --cpu-target (default: the best)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for shape in args.shapes.split(","):
        batch, kv_len = (int(x) for x in shape.split("x"))
        for r in range(args.rounds):
            order = ["torch", "attnkit"] if r % 2 == 0 else ["attnkit", "torch"]
            got = {}
            for who in order:
                got[who] = (torch_decode(batch, kv_len, DTYPES[args.kv_dtype]) if who == "torch" else
                            attnkit_decode(args.attnkit, batch, kv_len, args.kv_dtype, args.cpu_target))
            ratio = got["attnkit"]["bytes_per_s"] / got["torch"]["bytes_per_s"]
            rows.append({"shape": shape, "kv_dtype": args.kv_dtype, "round": r, "order": order, "torch": got["torch"],
                         "attnkit": got["attnkit"], "ratio": ratio, "torch_version": torch.__version__,
                         "threads": args.threads})
            a, t = got["attnkit"], got["torch"]
            print(f"decode {shape} {args.kv_dtype}: attnkit ({a['cpu_target']}) {a['bytes_per_s'] / 1e9:.2f} GB/s "
                  f"({a['fraction_of_ceiling'] or 0:.3f} of the read beside, {a['median_ms']:.3f} ms), "
                  f"torch SDPA {t['bytes_per_s'] / 1e9:.2f} GB/s ({t['median_ms']:.3f} ms): ratio {ratio:.2f}",
                  flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
