#!/usr/bin/env python3
"""The cost of calling attnkit from Python: one step's Batch + plan + one layer's forward, timed in a
Python loop, beside the same step in a C++ loop inside the extension (the batch's arrays copied into a
fresh ForwardBatch, plan, forward). The difference of the medians is what the Python path adds.

    python bench/python_overhead.py                            # cpu backend, decode of 8 requests
    python bench/python_overhead.py --backend planned --device cuda --json out/python_overhead.json

On the GPU the forward is only queued (the host time of the launches); the device work is waited for
once at the end of each loop, as the C++ loop does.
"""
import argparse
import json
import statistics
import time

import torch

import attnkit
from attnkit import _attnkit


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="cpu")
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=8, help="decode requests (default 8)")
    p.add_argument("--kv-len", type=int, default=512, help="each request's history (default 512)")
    p.add_argument("--iterations", type=int, default=2000)
    p.add_argument("--json")
    args = p.parse_args()
    dtype = torch.bfloat16
    spec = attnkit.ModelSpec.preset("llama3-8b", num_layers=1)
    page_size, pages_each = 16, -(-args.kv_len // 16)
    num_pages = args.batch * pages_each
    kv = torch.zeros(1, 2, num_pages, page_size, 8, 128, dtype=dtype, device=args.device)
    cache = attnkit.KvCache.from_pools(kv)
    backend = attnkit.Backend(args.backend, spec, cache)
    qo_indptr = torch.arange(args.batch + 1, dtype=torch.int32)
    kv_indptr = torch.arange(0, num_pages + 1, pages_each, dtype=torch.int32)
    indices = torch.randperm(num_pages, generator=torch.Generator().manual_seed(0)).to(torch.int32)
    last = torch.full((args.batch,), (args.kv_len - 1) % page_size + 1, dtype=torch.int32)
    first = attnkit.Batch(qo_indptr, kv_indptr, indices, last, page_size=page_size)
    out_cache_loc = torch.from_numpy(first.out_cache_loc.copy())
    q = torch.randn(args.batch, 32, 128, device=args.device).to(dtype)
    k = torch.randn(args.batch, 8, 128, device=args.device).to(dtype)
    v = torch.randn_like(k)
    out = torch.empty_like(q)

    def python_step():
        batch = attnkit.Batch(qo_indptr, kv_indptr, indices, last, page_size=page_size, out_cache_loc=out_cache_loc)
        backend.plan(batch)
        backend.forward(0, q, k, v, out)

    for _ in range(50):  # warm-up: first-touch of buffers, the CUDA context, the thread pool
        python_step()
    _attnkit._time_cpp_step(backend, first, 0, q, k, v, out, 50)
    rounds = {"python": [], "cpp": []}
    for _ in range(5):  # alternate, so a shared host's drift falls on both
        times = []
        for _ in range(args.iterations):
            start = time.perf_counter_ns()
            python_step()
            times.append(time.perf_counter_ns() - start)
        backend.synchronize()
        rounds["python"].append(statistics.median(times) / 1e3)
        rounds["cpp"].append(statistics.median(_attnkit._time_cpp_step(backend, first, 0, q, k, v, out,
                                                                       args.iterations)) / 1e3)
    python_us, cpp_us = statistics.median(rounds["python"]), statistics.median(rounds["cpp"])
    result = dict(backend=backend.name, device=args.device, batch=args.batch, kv_len=args.kv_len,
                  iterations=args.iterations, python_us=round(python_us, 2), cpp_us=round(cpp_us, 2),
                  overhead_us=round(python_us - cpp_us, 2), rounds=rounds,
                  gpu=attnkit.cuda_device_name() if args.device.startswith("cuda") else None,
                  date=time.strftime("%Y-%m-%d"))
    print(json.dumps(result))
    print("%s decode of %d x %d: Python step %.2f us, C++ step %.2f us, Python adds %.2f us"
          % (backend.name, args.batch, args.kv_len, python_us, cpp_us, python_us - cpp_us))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
