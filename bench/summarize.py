#!/usr/bin/env python3
"""One short table from the attnkit and peer runs: per shape, attnkit's best GPU backend, the best
peer, and their ratio (above 1: attnkit is faster). Prints it and, with --markdown, writes it.
With --backend and --against: one backend's figure per shape, then a column per named attnkit
backend or peer with its figure and the backend's ratio to it.

    python3 bench/summarize.py --attnkit out/attnkit.json --peers out/peers.json [--markdown FILE]
    python3 bench/summarize.py --attnkit out/attnkit.json --peers out/peers.json \
        --backend hopper --against planned flashinfer-prefill-ragged-fa3 sdpa-cudnn
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))

import shapes  # noqa: E402


def best(rows, key):
    ok = [r for r in rows if "value" in r]
    return max(ok, key=lambda r: r["value"]) if ok else None


def load(path):
    if path and os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return {"results": []}


def best_of_each(ak, pe):
    """(header, rows): per shape, attnkit's best backend, the best peer and their ratio."""
    header = ["shape", "metric", "attnkit (backend)", "best peer (peer)", "ratio"]
    rows = []
    for shape in shapes.SHAPES:
        a = best([r for r in ak["results"] if r["shape"] == shape.name], "value")
        p = best([r for r in pe["results"] if r["shape"] == shape.name], "value")
        if a is None and p is None:
            continue
        fa = f"{a['value']:.3f} ({a['backend']})" if a else "-"
        fp = f"{p['value']:.3f} ({p['peer']})" if p else "-"
        ratio = f"{a['value'] / p['value']:.2f}" if a and p else "-"
        rows.append([shape.name, shape.metric(), fa, fp, ratio])
    return header, rows


def against(backend, columns, ak, pe):
    """(header, rows): the backend's figure per shape, then each column's figure and the ratio."""
    def rows_of(name, shape):
        return ([r for r in ak["results"] if r["shape"] == shape and r.get("backend") == name] +
                [r for r in pe["results"] if r["shape"] == shape and r.get("peer") == name])

    def figure(name, shape):
        """The measured figure of a backend or peer on a shape, or None."""
        return next((r["value"] for r in rows_of(name, shape) if "value" in r), None)

    header = ["shape", "metric", backend]
    for c in columns:
        header += [c, "ratio"]
    out = []
    for shape in shapes.SHAPES:
        if not rows_of(backend, shape.name):
            continue
        own = figure(backend, shape.name)
        others = [figure(c, shape.name) for c in columns]
        row = [shape.name, shape.metric(), f"{own:.3f}" if own is not None else "-"]
        for other in others:
            row += [f"{other:.3f}" if other is not None else "-",
                    f"{own / other:.2f}" if own is not None and other is not None else "-"]
        out.append(row)
    return header, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attnkit")
    ap.add_argument("--peers", nargs="*", default=[], help="one or more run_peers.py JSON files")
    ap.add_argument("--markdown")
    ap.add_argument("--backend", help="the attnkit backend whose figures the table compares")
    ap.add_argument("--against", nargs="*", default=[], help="attnkit backends or peers, a column each")
    args = ap.parse_args()
    ak = load(args.attnkit)
    pe = {"results": [r for path in args.peers for r in load(path)["results"]]}

    header, rows = against(args.backend, args.against, ak, pe) if args.backend else best_of_each(ak, pe)
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in [header] + rows]
    print("\n".join(lines))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n")
            for r in rows:
                f.write("| " + " | ".join(r) + " |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
