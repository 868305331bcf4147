#!/usr/bin/env python3
"""Times attnkit's peers on the GPU over the shapes of shapes.py and writes the figures as JSON:
TB/s of KV read for decode, TFLOP/s for prefill, plus the ceilings measured through torch.

    python3 bench/peers/run_peers.py --json out/peers.json [--shapes NAME ...] [--peers NAME ...]

FlashInfer compiles its kernels on first use; --prebuild compiles every module it needs at once
(in parallel) and --save-aot packs the compiled modules for later runs (see docs/device.md).
"""
import argparse
import datetime
import json
import os
import sys
import tarfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import peers  # noqa: E402
import sglang_triton  # noqa: E402
import shapes  # noqa: E402
import timing  # noqa: E402

# FlexAttention compiles once per shape (tens of seconds each): by default only where it says the most.
# The variant shapes too: there FlexAttention is the peer that expresses them all.
DEFAULT_FLEX_SHAPES = (["decode 64x16384", "decode 16x8192", "prefill causal 1x8192", "chunked prefill 2048 on 30720"] +
                       [s.name for s in shapes.SHAPES if s.variant])


def log(msg: str) -> None:
    print(msg, flush=True)


def prebuild_flashinfer(names, head_dims):
    """Runs every FlashInfer peer once on a tiny shape of each head dim, in parallel threads, so
    their JIT modules compile concurrently (nvcc in subprocesses) instead of one after another
    inside the timings."""
    jobs = []
    for head_dim in sorted(head_dims):
        tiny = {"decode": shapes.Shape("tiny decode", "decode", [(63, 1)] * 2, head_dim=head_dim),
                "prefill": shapes.Shape("tiny prefill", "prefill", [(0, 256)], head_dim=head_dim)}
        for name in names:
            runner, phases, is_fi = peers.PEERS[name]
            if is_fi:
                jobs.append((name, runner, tiny[phases[0]]))
    started = time.time()

    def one(job):
        name, runner, shape = job
        runner(peers.make_data(shape))[0]()
        torch.cuda.synchronize()
        return name

    with ThreadPoolExecutor(max_workers=len(jobs) or 1) as pool:
        for job, fut in [(j, pool.submit(one, j)) for j in jobs]:
            try:
                fut.result()
            except Exception as e:  # noqa: BLE001 - reported, and the timed run will say it again
                log(f"prebuild {job[0]}: {type(e).__name__}: {e}")
    log(f"flashinfer prebuild: {time.time() - started:.1f} s")


def save_aot(path: str) -> None:
    """Packs the compiled FlashInfer modules as data/aot/<name>/<name>.so for the next run."""
    try:
        from flashinfer.jit import env as jit_env
    except ImportError as e:
        log(f"save-aot: skipped, FlashInfer is unavailable ({e})")
        return
    modules = sorted(p for p in jit_env.FLASHINFER_JIT_DIR.glob("*/*.so") if p.parent.name == p.stem)
    if not modules:
        log("save-aot: no JIT-compiled modules (all came from an AOT archive?)")
        return
    with tarfile.open(path, "w:xz", preset=3) as tar:
        for so in modules:
            tar.add(so, arcname=f"{so.stem}/{so.name}")
    log(f"save-aot: {len(modules)} modules -> {path} ({os.path.getsize(path) / 1e6:.1f} MB)")


def run_shape(shape, names, flex_shapes, results):
    data = peers.make_data(shape)
    reference = None
    for name in names:
        runner, _, _ = peers.PEERS[name]
        row = {"shape": shape.name, "peer": name, "metric": shape.metric(), "head_dim": shape.head_dim,
               "page_size": shape.page_size}
        if not peers.applies(name, shape):
            continue
        if name == "flex" and shape.name not in flex_shapes:
            row["skipped"] = "not in --flex-shapes (compiles per shape)"
            results.append(row)
            continue
        try:
            calls = runner(data)
            ms = timing.median_ms(calls)
            row.update(ms=ms, value=shape.figure(ms))
            log(f"  {shape.name:34s} {name:30s} {ms:9.3f} ms {row['value']:8.3f} {shape.metric()}")
            try:  # the same inputs through every peer: a peer set up wrongly shows here
                out = calls[0]().float()
                if reference is None:
                    reference = (name, out)
                else:
                    row["max_abs_diff_vs_" + reference[0]] = float((out - reference[1]).abs().max())
            except Exception as e:  # noqa: BLE001
                row["compare_error"] = f"{type(e).__name__}: {e}"[:200]
        except peers.Skip as e:
            row["skipped"] = str(e)
        except Exception as e:  # noqa: BLE001 - one peer failing must not lose the others' figures
            row["skipped"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            log(f"  {shape.name:34s} {name:30s} FAILED: {row['skipped']}")
            traceback.print_exc(limit=3)
        results.append(row)
        torch.cuda.synchronize()
    del data
    torch.cuda.empty_cache()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--shapes", nargs="*", help="shape names (default: all)")
    ap.add_argument("--peers", nargs="*", default=list(peers.PEERS), help="peer names (default: all)")
    ap.add_argument("--flex-shapes", nargs="*", default=DEFAULT_FLEX_SHAPES)
    ap.add_argument("--no-ceilings", action="store_true")
    ap.add_argument("--prebuild", action="store_true", help="compile FlashInfer's modules first, in parallel")
    ap.add_argument("--save-aot", help="pack compiled FlashInfer modules into this .tar.xz")
    args = ap.parse_args()

    names = [n for n in args.peers if n in peers.PEERS]
    fi_version = peers.flashinfer_version()
    if fi_version.startswith("unavailable"):
        log(f"flashinfer {fi_version}: its peers are skipped")
        names = [n for n in names if not peers.PEERS[n][2]]
    sglang_version = sglang_triton.version()
    if sglang_version.startswith("unavailable"):
        log(f"sglang kernels {sglang_version}: their peers are skipped")
        names = [n for n in names if not n.startswith("sglang-")]
    props = torch.cuda.get_device_properties(0)
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": props.name, "sms": props.multi_processor_count, "l2_bytes": timing.l2_bytes(),
        "torch": torch.__version__, "cuda": torch.version.cuda, "flashinfer": fi_version,
        "sglang": sglang_version,
        "heads": f"{shapes.NUM_QO_HEADS} q / {shapes.NUM_KV_HEADS} kv / {shapes.HEAD_DIM} (unless a shape says)",
        "page_size": shapes.PAGE_SIZE, "dtype": "bf16", "results": [],
    }
    log(f"{props.name}, torch {torch.__version__}, flashinfer {fi_version}, sglang kernels {sglang_version}")
    if not args.no_ceilings:
        report["ceilings"] = {"copy_bytes_per_s": timing.copy_bandwidth(),
                              "bf16_matmul_flop_per_s": timing.bf16_matmul_rate()}
        c = report["ceilings"]
        log(f"ceilings: copy {c['copy_bytes_per_s'] / 1e12:.2f} TB/s (read+write), "
            f"bf16 matmul {c['bf16_matmul_flop_per_s'] / 1e12:.0f} TFLOP/s")
    if args.prebuild:
        prebuild_flashinfer(names, {s.head_dim for s in shapes.by_name(args.shapes)})
        if args.save_aot:  # right away: a run cut short by its time limit still keeps the modules
            save_aot(args.save_aot)
    for shape in shapes.by_name(args.shapes):
        run_shape(shape, names, args.flex_shapes, report["results"])
        if args.json:  # written after every shape, so a run cut short keeps what it measured
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)
    if args.save_aot and not args.prebuild and any(peers.PEERS[n][2] for n in names):
        save_aot(args.save_aot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
