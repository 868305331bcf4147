# shellcheck shell=bash
# Sourced by the scripts that run peers on the GPU machine: install_peers puts FlashInfer's wheels
# from .whl/ into /tmp/site (once), with the modules an earlier run compiled (not with
# --without-compiled: a run that compiles them to pack them), and sets the environment the peers
# read. Calls `note` where the caller defines one, else echoes.
peers_installed=0
install_peers() {
  [[ $peers_installed == 1 ]] && return
  peers_installed=1
  local say=echo
  declare -F note >/dev/null && say=note
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl &&
      export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} || $say "wheel install FAILED"
    # Modules compiled by an earlier run (run_peers.py --save-aot) load without compiling again.
    if [[ -f .whl/flashinfer-aot.tar.xz && "${1:-}" != --without-compiled ]]; then
      mkdir -p /tmp/site/flashinfer/data/aot && tar -xJf .whl/flashinfer-aot.tar.xz -C /tmp/site/flashinfer/data/aot
    fi
  else
    echo "no .whl/: FlashInfer peers are skipped (run scripts/fetch-third-party.sh where pip works)"
  fi
  export FLASHINFER_WORKSPACE_BASE=/tmp PYTHONUNBUFFERED=1
}
