#!/usr/bin/env bash
# Sets up, builds and runs the main job: replay the built-in request trace (Azure 2023 conversation
# sample) on every backend available here, verifying sampled steps against `reference`, print the
# comparison table and write the report; then `attnkit check` on the default preset.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
tool=build/tools/attnkit/attnkit
mkdir -p out
"$tool" list
"$tool" replay --backend all --preset qwen3-0.6b --layers 2 --max-requests 16 --max-context 768 --speed 10 \
  --verify --json out/replay.json --report out/replay.html
"$tool" check --backend all --cases 8
echo "report: out/replay.html"
