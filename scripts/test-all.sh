#!/usr/bin/env bash
# Runs every test of dlscale on a fresh machine: installs what the tests need (a torch venv for the
# real training processes, a local Slurm cluster, Chromium for the dashboard's browser test), then
# formatting, lints, the Rust test suite and the Python tests.
# Usage: ./scripts/test-all.sh        (from anywhere; takes ~10-25 min on a fresh 2-core machine)
set -euo pipefail
cd "$(dirname "$0")/.."

export DLSCALE_VENV="${DLSCALE_VENV:-$HOME/.cache/dlscale/venv}"
echo "== installing the Python worker library and torch into $DLSCALE_VENV"
./scripts/setup-python.sh
# The service's end-to-end test must not skip here: torch is installed.
export DLSCALE_REQUIRE_TORCH=1
export PATH="$DLSCALE_VENV/bin:$PATH"

if ! command -v chromium >/dev/null 2>&1; then
  echo "== installing Debian's chromium for the dashboard's browser test"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends chromium fonts-liberation >/dev/null 2>&1 || {
    # Missing or stale package lists: refresh them once, then try again.
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends chromium fonts-liberation >/dev/null
  }
fi
# The dashboard's browser test must not skip here: Chromium is installed.
export DLSCALE_REQUIRE_CHROMIUM=1

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "== starting a local Slurm cluster (2 nodes x 4 GPUs) for the Slurm tests"
trap './scripts/slurm-local.sh down' EXIT
slurm_env=$(./scripts/slurm-local.sh up --nodes 2 --gpus-per-node 4) # exports SLURM_CONF
eval "$slurm_env"
# The Slurm end-to-end tests must not skip here: Slurm is up.
export DLSCALE_REQUIRE_SLURM=1
echo "== cargo test"
cargo test --workspace
echo "== pytest"
"$DLSCALE_VENV/bin/python" -m pytest -q python/tests
