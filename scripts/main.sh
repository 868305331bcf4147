#!/usr/bin/env bash
# Sets up, builds and runs the main job: `attnkit bench` and `attnkit check` on the default preset,
# over every backend available on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
build/tools/attnkit/attnkit list
build/tools/attnkit/attnkit bench --backend all --phase decode --batch 4 --kv-len 2048 --max-seconds 10
build/tools/attnkit/attnkit bench --backend all --phase prefill --batch 1 --kv-len 512 --max-seconds 10
build/tools/attnkit/attnkit check --backend all --cases 8
