#!/usr/bin/env python3
"""Runs `attnkit bench` for every GPU backend over the shapes of peers/shapes.py that the tool can
express, and writes one JSON (the same figures the peers report: TB/s of KV read, TFLOP/s).

    python3 bench/run_attnkit.py --tool dist/attnkit --json out/attnkit.json [--ceilings]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))

import shapes  # noqa: E402


def gpu_backends(tool: str):
    """Names of the registered backends whose device column in `attnkit list` is cuda."""
    out = subprocess.run([tool, "list"], check=True, capture_output=True, text=True).stdout
    names = []
    for line in out.splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 3 and cols[1] == "cuda":
            names.append(cols[0])
    return names


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", default="dist/attnkit")
    ap.add_argument("--json", required=True)
    ap.add_argument("--backends", nargs="*", help="default: every GPU backend")
    ap.add_argument("--shapes", nargs="*", help="default: every shape the tool can express")
    ap.add_argument("--ceilings", action="store_true", help="also measure the GPU ceilings (first run)")
    ap.add_argument("--max-seconds", default="10")
    ap.add_argument("--bench-args", default="", help="more `attnkit bench` options for every run, one string")
    args = ap.parse_args()

    backends = args.backends or gpu_backends(args.tool)
    bench_help = subprocess.run([args.tool, "bench", "--help"], capture_output=True, text=True).stdout
    has_requests = "--requests" in bench_help and "--non-causal" in bench_help
    report = {"backends": backends, "results": [], "ceilings": None, "not_expressible": []}
    ceilings = args.ceilings
    for shape in shapes.by_name(args.shapes):
        bench_args = shape.attnkit_bench_args(has_requests)
        if bench_args is None:
            report["not_expressible"].append(shape.name)
            print(f"{shape.name}: `attnkit bench` cannot express it (no --requests / --non-causal)", flush=True)
            continue
        for backend in backends:
            with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
                cmd = [args.tool, "bench", "--backend", backend, "--preset", "llama3-8b", "--max-seconds",
                       args.max_seconds, "--json", tmp.name, *bench_args, *args.bench_args.split()]
                if ceilings:
                    cmd.append("--ceilings")
                proc = subprocess.run(cmd, capture_output=True, text=True)
                print(proc.stdout, end="", flush=True)
                row = {"shape": shape.name, "backend": backend, "metric": shape.metric()}
                if proc.returncode != 0:
                    row["skipped"] = f"exit {proc.returncode}: " + proc.stderr.strip()[-300:]
                    print(proc.stderr, end="", file=sys.stderr, flush=True)
                else:
                    out = json.load(open(tmp.name))
                    if ceilings:
                        report["ceilings"] = out.get("ceilings")
                        ceilings = False
                    r = out["results"][0]
                    if r.get("skipped"):
                        row["skipped"] = r["skipped"]
                    else:
                        row.update(ms=r["median_ms"], value=shape.figure(r["median_ms"]),
                                   workspace_bytes=r.get("workspace_bytes"), tool=r)
                report["results"].append(row)
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
