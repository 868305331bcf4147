#!/usr/bin/env python3
"""One short table from the attnkit and peer runs: per shape, attnkit's best GPU backend, the best
peer, and their ratio (above 1: attnkit is faster). Prints it and, with --markdown, writes it.

    python3 bench/summarize.py --attnkit out/attnkit.json --peers out/peers.json [--markdown FILE]
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attnkit")
    ap.add_argument("--peers")
    ap.add_argument("--markdown")
    args = ap.parse_args()
    ak, pe = load(args.attnkit), load(args.peers)

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
