"""CUDA-event timing of a callable (warm-up, median of many runs, inputs rotated so the data is
not served from L2), and the two ceilings measured through torch. Used by run_peers.py."""
import math
import statistics
from typing import Callable, List

import torch

WARMUP = 5
REPEATS = 30


def l2_bytes() -> int:
    props = torch.cuda.get_device_properties(0)
    return int(getattr(props, "L2_cache_size", 0) or 60 * 2**20)


def rotation_count(bytes_per_copy: float, max_copies: int = 8) -> int:
    """Copies of the data to rotate between so that together they exceed 4x the L2."""
    return max(1, min(max_copies, math.ceil(4 * l2_bytes() / max(bytes_per_copy, 1.0))))


def median_ms(calls: List[Callable[[], object]], warmup: int = WARMUP, repeats: int = REPEATS) -> float:
    """Median milliseconds of one call; call i of the run uses calls[i % len(calls)]."""
    for i in range(warmup):
        calls[i % len(calls)]()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    for i in range(repeats):
        starts[i].record()
        calls[(warmup + i) % len(calls)]()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def copy_bandwidth(nbytes: int = 4 << 30) -> float:
    """Bytes a second of a device-to-device copy, counting bytes read plus bytes written."""
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = median_ms([lambda: dst.copy_(src)], warmup=3, repeats=10)
    del src, dst
    torch.cuda.empty_cache()
    return 2.0 * nbytes / (ms * 1e-3)


def bf16_matmul_rate(n: int = 8192) -> float:
    """FLOP a second of an n^3 bf16 matrix product on random data (zeros run faster)."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = median_ms([lambda: a @ b], warmup=3, repeats=10)
    del a, b
    torch.cuda.empty_cache()
    return 2.0 * n**3 / (ms * 1e-3)
