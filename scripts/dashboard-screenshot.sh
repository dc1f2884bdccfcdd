#!/usr/bin/env bash
# A screenshot of the dashboard, for humans and for docs/dashboard.png: starts a real
# `dlscale serve` (local executor, four slots) with three jobs (examples/plain_job.py), one of
# them rescaled when the others arrive, logs in with headless Chromium and writes a PNG.
#
# Usage: scripts/dashboard-screenshot.sh [OUT.png]        (default: docs/dashboard.png)
#
# It runs the dashboard's browser test (crates/dlscale-cli/tests/dashboard_browser.rs), which
# does all of that, with DLSCALE_DASHBOARD_SCREENSHOT set: it logs in once through the page
# (POST /v1/session: the token in a JSON body, a session cookie back), then opens the page in a
# new tab, as a bookmark would, and that tab's picture is written. The browser's cookie jar
# carries the session; the token is never in a URL.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-docs/dashboard.png}")
if ! command -v chromium >/dev/null 2>&1 && [ -z "${DLSCALE_CHROMIUM:-}" ]; then
  echo "error: needs Chromium: apt-get install chromium (or set DLSCALE_CHROMIUM)" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
DLSCALE_REQUIRE_CHROMIUM=1 DLSCALE_DASHBOARD_SCREENSHOT="$out" \
  cargo test -q -p dlscale-cli --test dashboard_browser -- --nocapture
echo "wrote $out"
