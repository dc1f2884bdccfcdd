#!/usr/bin/env bash
# The inner loop: the tests that need nothing installed and no real engine (no torch, Slurm or
# Chromium): the optimizer, the autoscaler, the simulator, the service's router and API with
# plain shell workers, and the CLI's file and API errors. Formatting first. Its time with a built
# tree is in the README, "Tests"; ./scripts/test-all.sh runs everything.
# Usage: ./scripts/test-quick.sh
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
cargo fmt --all -- --check
cargo test --workspace --exclude dlscale-cli
cargo test -p dlscale-cli --test optimize --test examples --test submit_errors \
  --test service_api --test service_explain --test service_teams
echo "== done in $((SECONDS - started)) s"
