"""SGLang's Triton attention kernels (decode and extend), loaded from SGLang's own wheel.

Only the kernel sources are used: the attention folder of the wheel (sglang/kernels/ops/attention/,
or sglang/srt/layers/attention/triton_ops/ in older releases) is unpacked into a temporary folder
and its modules imported under their own names. The few imports they make from the rest of SGLang
(platform checks, environment switches, the server's run-time config) are answered by small stand-ins
here, which report what SGLang itself reports on an NVIDIA GPU: not HIP, the SM count from torch,
every environment switch at its default (or as set in the environment). The serving stack is never
imported. Any other import the sources make is refused with its name, so a newer wheel that needs
more says so instead of running differently.

The wheel is looked for in SGLANG_WHEEL, else in .whl/sglang/ at the repository root.
"""
import ast
import atexit
import glob
import importlib
import os
import shutil
import sys
import tempfile
import types
import zipfile
from typing import Dict, List, Optional

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Where the kernels sit in the wheel, newest layout first.
KERNEL_DIRS = ("sglang/kernels/ops/attention/", "sglang/srt/layers/attention/triton_ops/")
# The modules the peers call and, through their imports, the sibling modules they need.
ENTRY_MODULES = ("decode_attention", "extend_attention", "metadata")

# SGLang's environment switches the kernels read, with SGLang's defaults (sglang/srt/environ.py).
ENV_DEFAULTS: Dict[str, object] = {
    "SGLANG_FORCE_LEAN_GRID_CU_MULT": 1.0,
    "SGLANG_MLA_DECODE_TUNE": False,
    "SGLANG_TRITON_COMPACT_EXTEND_ATTENTION": True,
    "SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS": False,
    "SGLANG_TRITON_FP8_PREFILL_ATTN": True,
}


class Unavailable(Exception):
    """The kernels cannot be loaded here (the message says why)."""


# --- stand-ins for the parts of SGLang the kernel sources import -------------------------------

def _is_hip() -> bool:
    return torch.version.hip is not None


def _is_cuda() -> bool:
    return torch.version.cuda is not None and torch.cuda.is_available()


def _amd_arch(prefix: str) -> bool:
    return _is_hip() and prefix in getattr(torch.cuda.get_device_properties(0), "gcnArchName", "")


def _device_core_count(device_id: int = 0) -> int:
    """SMs of the GPU (132 on an H200), 0 without one, as SGLang's own helper."""
    if not torch.cuda.is_available():
        return 0
    return torch.cuda.get_device_properties(device_id).multi_processor_count


def _env_value(name: str, default):
    text = os.environ.get(name)
    if text is None:
        return default
    if isinstance(default, bool):
        return text.strip().lower() in ("1", "true", "yes", "on")
    return type(default)(text)


class _EnvVar:
    def __init__(self, name: str):
        self.name = name

    def get(self):
        return _env_value(self.name, ENV_DEFAULTS[self.name])


class _Envs:
    def __getattr__(self, name: str):
        if name not in ENV_DEFAULTS:
            raise AttributeError(f"SGLang environment switch {name} has no stand-in (add it to ENV_DEFAULTS)")
        return _EnvVar(name)


def _get_exec():
    # SGLang raises ValueError while no server config is published; the kernels then keep their
    # defaults (the paths that consult it are ROCm-only).
    raise ValueError("no SGLang server config: the kernels run on their defaults")


STANDINS: Dict[str, Dict[str, object]] = {
    "sglang.srt.utils": {
        "is_hip": _is_hip,
        "is_cuda": _is_cuda,
        "is_gfx95_supported": lambda: _amd_arch("gfx95"),
        "is_gfx1250_supported": lambda: _amd_arch("gfx1250"),
        "get_device_core_count": _device_core_count,
        "get_bool_env_var": lambda name, default="false": _env_value(name, default.lower() == "true"),
        "get_int_env_var": lambda name, default=0: _env_value(name, int(default)),
    },
    "sglang.srt.environ": {"envs": _Envs()},
    "sglang.srt.runtime_context": {"get_exec": _get_exec},
}


# --- finding and reading the sources ------------------------------------------------------------

def wheel_path() -> Optional[str]:
    explicit = os.environ.get("SGLANG_WHEEL")
    if explicit:
        return explicit
    found = sorted(glob.glob(os.path.join(ROOT, ".whl", "sglang", "sglang-*.whl")) +
                   glob.glob(os.path.join(ROOT, ".whl", "sglang", "sglang-*.zip")))
    return found[-1] if found else None


def _imports(source: str, filename: str) -> List[tuple]:
    """(module, [names]) of every `sglang` import in the source, module level or inside functions."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "sglang":
            found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.split(".")[0] == "sglang"]
    return found


class Kernels:
    """The loaded modules: decode (decode_attention), extend (extend_attention), metadata (or None
    where the release has no metadata module), the wheel's version and the folder they came from."""

    def __init__(self, modules: Dict[str, types.ModuleType], version: str, kernel_dir: str):
        self.decode = modules["decode_attention"]
        self.extend = modules["extend_attention"]
        self.metadata = modules.get("metadata")
        self.version = version
        self.kernel_dir = kernel_dir


_loaded: Optional[Kernels] = None


def _version(zf: zipfile.ZipFile) -> str:
    for name in zf.namelist():
        if name.endswith(".dist-info/METADATA"):
            for line in zf.read(name).decode("utf-8", "replace").splitlines():
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
    return "unknown"


def _package(name: str, path: List[str]) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__path__ = path
    mod.__package__ = name
    return mod


def load() -> Kernels:
    """Unpacks and imports the kernels once a process; raises Unavailable with the reason."""
    global _loaded
    if _loaded is not None:
        return _loaded
    path = wheel_path()
    if not path or not os.path.exists(path):
        raise Unavailable("no SGLang wheel: set SGLANG_WHEEL or run scripts/fetch-third-party.sh (.whl/sglang/)")
    existing = sys.modules.get("sglang")
    if existing is not None and not getattr(existing, "__attnkit_standin__", False):
        raise Unavailable("an installed sglang package is already imported in this process")
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        kernel_dir = next((d for d in KERNEL_DIRS if d + "decode_attention.py" in names), None)
        if kernel_dir is None:
            raise Unavailable(f"{os.path.basename(path)} has no decode_attention.py in {' or '.join(KERNEL_DIRS)}")
        pkg = kernel_dir.rstrip("/").replace("/", ".")
        sources: Dict[str, str] = {}
        todo = [m for m in ENTRY_MODULES if kernel_dir + m + ".py" in names]
        unhandled = []
        while todo:
            mod = todo.pop()
            if mod in sources:
                continue
            sources[mod] = zf.read(kernel_dir + mod + ".py").decode("utf-8")
            for module, imported in _imports(sources[mod], mod + ".py"):
                if module.startswith(pkg + ".") and kernel_dir + module[len(pkg) + 1:] + ".py" in names:
                    todo.append(module[len(pkg) + 1:])
                elif module in STANDINS and all(n in STANDINS[module] for n in imported):
                    continue
                else:
                    unhandled.append(f"{mod}.py: {module} {imported}")
        if unhandled:
            raise Unavailable("imports without a stand-in: " + "; ".join(sorted(set(unhandled))))
        missing_env = sorted({w for src in sources.values() for w in _env_names(src)} - set(ENV_DEFAULTS))
        if missing_env:
            raise Unavailable("environment switches without a default: " + ", ".join(missing_env))
        version = _version(zf)

    folder = tempfile.mkdtemp(prefix="attnkit-sglang-")
    atexit.register(shutil.rmtree, folder, True)
    target = os.path.join(folder, kernel_dir)
    os.makedirs(target)
    for mod, src in sources.items():
        with open(os.path.join(target, mod + ".py"), "w") as f:
            f.write(src)
    # Empty packages on the way to the kernels (SGLang's own __init__ files import the whole server),
    # then the stand-ins.
    parts = pkg.split(".")
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        sys.modules[name] = _package(name, [os.path.join(folder, *parts[:i])])
    sys.modules["sglang"].__attnkit_standin__ = True
    for name, attrs in STANDINS.items():
        for i in range(2, name.count(".") + 1):
            sys.modules.setdefault(".".join(name.split(".")[:i]), _package(".".join(name.split(".")[:i]), []))
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        sys.modules[name] = mod
    try:
        modules = {m: importlib.import_module(f"{pkg}.{m}") for m in sources}
    except Exception as e:  # noqa: BLE001 - reported as the reason the peers are skipped
        raise Unavailable(f"importing SGLang's kernels failed: {type(e).__name__}: {e}") from e
    _loaded = Kernels(modules, version, kernel_dir)
    return _loaded


def _env_names(source: str) -> List[str]:
    """Names read as envs.NAME in the source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "envs":
            found.append(node.attr)
    return found


def version() -> str:
    """The wheel's version, or why the kernels are unavailable."""
    try:
        return load().version
    except Unavailable as e:
        return f"unavailable: {e}"
