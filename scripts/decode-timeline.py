#!/usr/bin/env python3
"""Reads the CSV of `attnkit bench --backend planned --decode-timeline FILE` and prints where the
decode kernel's time goes: when CTAs got their first tile, finished streaming and exited, and the
CTAs (and SMs) that ended last.

    python3 scripts/decode-timeline.py FILE
"""
import argparse
import csv
import statistics


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    args = ap.parse_args()
    rows = [{k: int(v) for k, v in r.items()} for r in csv.DictReader(open(args.file))]
    busy = [r for r in rows if r["busy"] > 0]
    span = max(r["exit_ns"] for r in rows)
    print(f"{len(rows)} CTAs ({len(busy)} with work), span {span / 1e3:.1f} us")
    for name in ("entry_ns", "first_tile_ns", "last_tile_ns", "exit_ns"):
        xs = [r[name] / 1e3 for r in busy]
        print(f"  {name[:-3]:<11} us: min {min(xs):7.1f}  p10 {pct(xs, .1):7.1f}  median {pct(xs, .5):7.1f}  "
              f"p90 {pct(xs, .9):7.1f}  max {max(xs):7.1f}")
    tail = [r["exit_ns"] - r["last_tile_ns"] for r in busy]
    print(f"  last tile to exit us: median {pct(tail, .5) / 1e3:.2f}  max {max(tail) / 1e3:.2f}")
    joins = [r["join_ns"] / 1e3 for r in busy if r.get("join_ns", 0) > 0]
    if joins:
        print(f"  last split's fence, count and join us ({len(joins)} CTAs): median {pct(joins, .5):.2f}  "
              f"p90 {pct(joins, .9):.2f}  max {max(joins):.2f}")
    loads = [r["join_loads_ns"] / 1e3 for r in busy if r.get("join_loads_ns", 0) > 0]
    if loads:
        print(f"  of which the join itself us ({len(loads)} joins): median {pct(loads, .5):.2f}  "
              f"p90 {pct(loads, .9):.2f}  max {max(loads):.2f}")
    sm_end = {}
    for r in rows:
        sm_end[r["sm"]] = max(sm_end.get(r["sm"], 0), r["exit_ns"])
    ends = sorted(sm_end.values())
    print(f"  SMs: {len(ends)}; last exit a SM us: min {ends[0] / 1e3:.1f}  median {pct(ends, .5) / 1e3:.1f}  "
          f"max {ends[-1] / 1e3:.1f}; mean SM busy {statistics.mean(ends) / span:.0%} of the span")
    print("  the 8 CTAs that exited last:")
    for r in sorted(busy, key=lambda r: -r["exit_ns"])[:8]:
        print(f"    cta {r['cta']:4d} sm {r['sm']:3d}  first {r['first_tile_ns'] / 1e3:6.1f}"
              f"  last {r['last_tile_ns'] / 1e3:6.1f}  exit {r['exit_ns'] / 1e3:6.1f} us  join {r.get('join_ns', 0) / 1e3:5.2f} ({r.get('join_loads_ns', 0) / 1e3:5.2f}) us")


if __name__ == "__main__":
    main()
