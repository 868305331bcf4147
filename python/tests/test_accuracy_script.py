"""bench/accuracy.py (attnkit's error beside PyTorch SDPA's against float64) on the CPU: it runs,
compares every backend it is given, and writes its rows."""
import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "accuracy.py"


def test_cpu_backends_are_within_twice_sdpas_error(tmp_path):
    out = tmp_path / "accuracy.json"
    run = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--backends", "cpu", "reference",
                          "--tokens", "96", "--json", str(out)],
                         capture_output=True, text=True, env=dict(os.environ), timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = json.loads(out.read_text())["rows"]
    assert {(r["shape"], r["backend"]) for r in rows} == {
        (s, b) for s in ("causal 1 x 96", "full 1 x 96") for b in ("cpu", "reference")}
    for r in rows:
        assert r["passed"] and 0 < r["error"]["rms"] <= r["error"]["max_abs"], r
    assert "within 2.0x SDPA math" in run.stdout.splitlines()[-1]
