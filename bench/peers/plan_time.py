"""Host time to plan one decode batch: attnkit `planned` against FlashInfer's decode wrapper, same batch.

Run on the device (FlashInfer importable, attnkit's tool built). The batch: 256 requests with KV
lengths drawn uniformly from [128, MAX] (seeded), Llama-3-8B heads, pages of 16. attnkit's figure
is `attnkit bench`'s plan column: `init_forward_metadata` whole (the host scheduler and the enqueued
upload of the plan and the batch's arrays), median of 21 a process, then the median over five
processes (with the lowest and highest); and its next-step column: the same for the 21 decode steps
after it, each history one position longer (a plan the backend may derive from the last one).
FlashInfer's (one process: the script's own): `plan()` of
BatchDecodeWithPagedKVCacheWrapper with tensor cores (the decode peer timed beside `planned`), its
index arrays on the host as its documentation recommends, median of 51 after 5 untimed calls.

    python3 bench/peers/plan_time.py --tool dist/attnkit [--json FILE] [--mla]
"""
import argparse
import json
import random
import statistics
import subprocess
import sys
import time

from shapes import HEAD_DIM, NUM_KV_HEADS, NUM_QO_HEADS, PAGE_SIZE

NUM_REQUESTS = 256
MAX_LENS = (4096, 16384)


def kv_lens(max_len: int, seed: int = 1):
    rng = random.Random(seed)
    return [rng.randint(128, max_len) for _ in range(NUM_REQUESTS)]


def attnkit_plan_us(tool: str, lens, processes: int, model=("planned", "llama3-8b", PAGE_SIZE, 0)) -> tuple:
    """Medians over `processes` processes of each process's medians (full plan, next step), and
    the full plan's lowest and highest process: on the GPU machines' hosts the same binary planned
    up to 1.6x apart from one process to the next (the core it was given), so one process is not
    the host's figure."""
    backend, preset, page_size, heads = model
    requests = ",".join(f"{n - 1}+1" for n in lens)
    out = "/tmp/plan_time_attnkit.json"
    full, step = [], []
    for _ in range(processes):
        subprocess.run([tool, "bench", "--backend", backend, "--preset", preset, "--phase", "decode",
                        "--page-size", str(page_size), "--requests", requests, "--warmup", "1", "--repeats", "3",
                        "--json", out, *(["--heads", str(heads)] if heads else [])],
                       check=True, capture_output=True, text=True)
        with open(out) as f:
            data = json.load(f)
        rows = data["results"] if isinstance(data, dict) else data
        full.append(float(rows[0]["plan_us"]))
        step.append(float(rows[0].get("plan_step_us", float("nan"))))
    return statistics.median(full), statistics.median(step), min(full), max(full)


def flashinfer_plan_us(lens) -> float:
    import torch
    import flashinfer
    pages = [(n + PAGE_SIZE - 1) // PAGE_SIZE for n in lens]
    kv_indptr = torch.tensor([0] + pages, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    kv_indices = torch.arange(int(kv_indptr[-1]), dtype=torch.int32, device="cuda")
    last_page_len = torch.tensor([(n - 1) % PAGE_SIZE + 1 for n in lens], dtype=torch.int32)
    workspace = torch.empty(128 << 20, dtype=torch.uint8, device="cuda")
    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=True)

    def plan():
        w.plan(kv_indptr, kv_indices, last_page_len, NUM_QO_HEADS, NUM_KV_HEADS, HEAD_DIM, PAGE_SIZE,
               pos_encoding_mode="NONE", q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)

    for _ in range(5):
        plan()
    torch.cuda.synchronize()
    times = []
    for _ in range(51):
        t0 = time.perf_counter()
        plan()
        times.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", required=True, help="attnkit's command-line tool")
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--processes", type=int, default=5, help="attnkit processes timed, one after another")
    ap.add_argument("--mla", action="store_true", help="also time the mla backend's plan (DeepSeek-V3, 16 and 128 heads)")
    args = ap.parse_args()
    rows = []
    print("| batch | attnkit planned plan us, median of processes (lowest-highest) | FlashInfer decode-tc plan us |"
          " ratio | attnkit next decode step us |")
    print("|---|---|---|---|---|")
    for max_len in MAX_LENS:
        lens = kv_lens(max_len)
        ours, step, lo, hi = attnkit_plan_us(args.tool, lens, args.processes)
        try:
            theirs = flashinfer_plan_us(lens)
        except Exception as e:  # noqa: BLE001 (a peer that cannot run is reported, not fatal)
            print(f"FlashInfer plan failed: {e}", file=sys.stderr)
            theirs = float("nan")
        name = f"{NUM_REQUESTS} x [128, {max_len}]"
        rows.append({"batch": name, "attnkit_us": ours, "flashinfer_us": theirs, "attnkit_step_us": step,
                     "attnkit_us_lowest": lo, "attnkit_us_highest": hi, "processes": args.processes})
        print(f"| {name} | {ours:.1f} ({lo:.1f}-{hi:.1f}) | {theirs:.1f} | {theirs / ours:.2f} | {step:.1f} |", flush=True)
    if args.mla:
        # mla's whole init_forward_metadata (its scheduling metadata and the upload) on DeepSeek-V3's
        # latent cache, page 64; no peer row (the target is absolute: 256 requests in 20 us).
        print("| mla batch (deepseek-v3, page 64) | attnkit mla plan us, median of processes (lowest-highest) |"
              " attnkit next decode step us |")
        print("|---|---|---|")
        for heads in (16, 128):
            lens = kv_lens(4096)
            ours, step, lo, hi = attnkit_plan_us(args.tool, lens, args.processes, ("mla", "deepseek-v3", 64, heads))
            name = f"{NUM_REQUESTS} x [128, 4096], {heads} heads"
            rows.append({"batch": "mla " + name, "attnkit_us": ours, "attnkit_step_us": step,
                         "attnkit_us_lowest": lo, "attnkit_us_highest": hi, "processes": args.processes})
            print(f"| {name} | {ours:.1f} ({lo:.1f}-{hi:.1f}) | {step:.1f} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
