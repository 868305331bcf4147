#!/usr/bin/env python3
"""Rewrites FlashInfer's wheel keeping only what its attention wrappers import and JIT-compile.

The full wheel (hundreds of MB of kernels for other ops) is mostly what a benchmark of attention
never loads; fetch-third-party.sh calls this on the downloaded wheel. The module closure is computed
from the source (module-level imports, guarded or not), so no import of torch is needed here.
"""
import ast
import base64
import csv
import hashlib
import io
import os
import re
import sys
import zipfile

PKG = "flashinfer"
# Entry modules whose import closure is kept: the package itself and the wrappers the peers use.
ENTRIES = ["flashinfer", "flashinfer.decode", "flashinfer.prefill", "flashinfer.page", "flashinfer.mla"]
# Whole trees kept: the JIT generator and the headers and templates it compiles against.
KEEP_TREES = ["flashinfer/jit/", "flashinfer/data/include/", "flashinfer/data/cutlass/",
              "flashinfer/data/cccl/", "flashinfer/data/spdlog/"]
# Manifests and notes some modules read when imported (small; kept everywhere).
KEEP_SUFFIXES = (".json", ".txt", ".typed", ".md")
# Kernel sources of the decode, prefill and MLA modules (fa2 and fa3), plus every top-level header.
CSRC_KEEP = re.compile(r"^flashinfer/data/csrc/([^/]*\.(h|cuh|hpp|inc)|"
                       r"(batch_decode|batch_prefill|batch_mla|single_decode|single_prefill|page|pod|batch_pod|"
                       r"cascade|tvm_ffi)[^/]*)$")


def module_of(path):
    if not path.endswith(".py"):
        return None
    mod = path[:-3].replace("/", ".")
    return mod[: -len(".__init__")] if mod.endswith(".__init__") else mod


def closure(sources):
    """Modules reachable from ENTRIES through module-level imports (inside try/if/with too)."""
    packages = {m for p, m in ((p, module_of(p)) for p in sources) if m and p.endswith("__init__.py")}
    by_module = {module_of(p): p for p in sources if module_of(p)}
    seen = set()

    def stmts(body):
        for s in body:
            if isinstance(s, (ast.Import, ast.ImportFrom)):
                yield s
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(s, field, None)
                if isinstance(inner, list) and not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                  ast.ClassDef)):
                    for x in inner:
                        yield from stmts(x.body if isinstance(x, ast.ExceptHandler) else [x])

    def visit(mod):
        if mod in seen or mod not in by_module:
            return
        seen.add(mod)
        parts = mod.split(".")
        for i in range(1, len(parts)):
            visit(".".join(parts[:i]))
        base = mod if mod in packages else mod.rsplit(".", 1)[0]
        tree = ast.parse(sources[by_module[mod]])
        for s in stmts(tree.body):
            if isinstance(s, ast.Import):
                for a in s.names:
                    visit(a.name)
                continue
            if s.level:
                b = base.split(".")[: len(base.split(".")) - (s.level - 1)]
                target = ".".join(b + ([s.module] if s.module else []))
            else:
                target = s.module or ""
            if target.split(".")[0] != PKG:
                continue
            visit(target)
            for a in s.names:
                visit(f"{target}.{a.name}")

    for e in ENTRIES:
        visit(e)
    return {by_module[m] for m in seen}


def record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def main(src, dst):
    zin = zipfile.ZipFile(src)
    names = zin.namelist()
    sources = {n: zin.read(n).decode() for n in names if n.startswith(PKG + "/") and n.endswith(".py")}
    keep_py = closure(sources)
    kept = []
    for n in names:
        if n.endswith("/"):
            continue
        top_level_py = n.startswith(PKG + "/") and n.count("/") == 1 and n.endswith(".py")
        if (".dist-info/" in n or n.endswith(KEEP_SUFFIXES) or n in keep_py or top_level_py or any(n.startswith(t) for t in KEEP_TREES)
                or CSRC_KEEP.match(n)):
            kept.append(n)
    record_name = next(n for n in names if n.endswith(".dist-info/RECORD"))
    out = zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED, compresslevel=9)
    rows = []
    for n in kept:
        if n == record_name:
            continue
        data = zin.read(n)
        out.writestr(n, data)
        rows.append([n, record_hash(data), str(len(data))])
    rows.append([record_name, "", ""])
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    out.writestr(record_name, buf.getvalue())
    out.close()
    print(f"{os.path.basename(src)}: kept {len(kept)} of {len(names)} files, "
          f"{os.path.getsize(src) / 1e6:.1f} MB -> {os.path.getsize(dst) / 1e6:.1f} MB")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: slim_wheel.py IN.whl OUT.whl")
    main(sys.argv[1], sys.argv[2])
