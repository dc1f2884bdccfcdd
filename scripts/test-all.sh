#!/usr/bin/env bash
# Runs every test of dlscale on a fresh machine: installs what the tests need (a torch and Ray venv
# for the real training processes, a local Slurm cluster and a local Ray cluster, Chromium for the
# dashboard's browser test), then
# formatting, lints, the Rust test suite and the Python tests.
# Usage: ./scripts/test-all.sh        (from anywhere; its time on a fresh 2-core machine is in the
#                                      README, "Tests"; ./scripts/test-quick.sh is the inner loop)
#
# The installs (pip, apt) wait on the network and the disk, not the CPU: they run in the
# background while the Rust code is formatted and built. The tests mostly wait on their worker
# processes: they run in three lanes side by side, the lints (clippy) beside them, and the
# Python tests in the lane that finishes first.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
logs=$(mktemp -d)

# A clean build has nothing to reuse: no incremental cache (it doubled the build's disk use).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
export DLSCALE_VENV="${DLSCALE_VENV:-$HOME/.cache/dlscale/venv}"
echo "== installing in the background: the Python worker library and torch into $DLSCALE_VENV, Chromium, Slurm"
./scripts/setup-python.sh >"$logs/python.log" 2>&1 &
python_pid=$!
install_packages() {
  # The Slurm packages here too: one apt at a time (apt's lock), before slurm-local.sh needs them.
  local pkgs=(chromium fonts-liberation slurmctld slurmd slurm-client munge)
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${pkgs[@]}" || {
    # Missing or stale package lists: refresh them once, then try again.
    apt-get update -q && apt-get install -y -q --no-install-recommends "${pkgs[@]}"
  }
}
if command -v chromium >/dev/null 2>&1 && command -v slurmctld >/dev/null 2>&1; then
  apt_pid=""
else
  install_packages >"$logs/apt.log" 2>&1 &
  apt_pid=$!
fi
# Whatever ends this script ends its background jobs too, and the Slurm it started.
slurm_up=""
ray_up=""
cleanup() {
  local pids
  pids=$(jobs -p)
  [ -z "$pids" ] || kill $pids 2>/dev/null || true
  [ -z "$slurm_up" ] || ./scripts/slurm-local.sh down
  [ -z "$ray_up" ] || ./scripts/ray-local.sh down
}
trap cleanup EXIT
# Waits for background job $1 (named $2); on failure prints its log ($3) and exits.
await() {
  if [ -n "$1" ] && ! wait "$1"; then
    echo "== $2 failed:" >&2
    tail -n 40 "$3" >&2
    exit 1
  fi
}

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== building the tests ($((SECONDS - started)) s so far)"
# The test binaries and the package directory cargo test would run each in: "name exe dir".
cargo test --workspace --no-run --message-format=json-render-diagnostics >"$logs/build.json"
python3 - "$logs/build.json" >"$logs/binaries" <<'PY'
import json, os, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"], os.path.dirname(m["manifest_path"]))
PY
echo "== waiting for the installs ($((SECONDS - started)) s so far)"
await "$python_pid" "setup-python.sh" "$logs/python.log"
await "$apt_pid" "apt-get install" "$logs/apt.log"
# The service's end-to-end test must not skip here: torch is installed.
export DLSCALE_REQUIRE_TORCH=1
export PATH="$DLSCALE_VENV/bin:$PATH"
# The dashboard's browser test must not skip here: Chromium is installed.
export DLSCALE_REQUIRE_CHROMIUM=1

echo "== starting a local Slurm cluster (2 nodes x 4 GPUs) for the Slurm tests"
slurm_up=1
slurm_env=$(./scripts/slurm-local.sh up --nodes 2 --gpus-per-node 4) # exports SLURM_CONF
eval "$slurm_env"
# The Slurm end-to-end tests must not skip here: Slurm is up.
export DLSCALE_REQUIRE_SLURM=1

# The tests mostly wait on their processes; the lints use the CPU meanwhile, on one core (the
# other is the tests'), in a build directory of their own (a check build shares nothing with
# the test build, and two cargo commands on one directory would wait for each other).
echo "== cargo clippy (in the background, $((SECONDS - started)) s so far; its output follows the tests)"
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/clippy" \
  cargo clippy --jobs 1 --workspace --all-targets -- -D warnings >"$logs/clippy.log" 2>&1 &
clippy_pid=$!
# The test binaries run in three lanes side by side (most of their time is spent waiting on
# their worker processes): the tests on the one Slurm cluster, then those on the one Ray
# cluster, one after the other; torch, the
# browser and the local fault soak; everything else. Within a binary, tests run as cargo test
# runs them.
run_lane() { # lane name, then "binary[:test filter args]" entries; "*" is every other binary
  local lane=$1 failed=0 entry name args exe dir t0
  shift
  for entry in "$@"; do
    name=${entry%%:*}
    args=""
    [ "$entry" = "$name" ] || args=${entry#*:}
    while read -r bin_name exe dir; do
      if [ "$name" = "*" ]; then
        case " $lane_taken " in *" $bin_name "*) continue ;; esac
      elif [ "$bin_name" != "$name" ]; then
        continue
      fi
      t0=$SECONDS
      echo "== $lane: $bin_name $args" >>"$logs/lane-$lane.log"
      # shellcheck disable=SC2086 # args are test-filter words
      (cd "$dir" && "$exe" $args) >>"$logs/lane-$lane.log" 2>&1 || {
        failed=1
        echo "$bin_name $args" >>"$logs/failed"
      }
      echo "   $lane: $bin_name $args ($((SECONDS - t0)) s)"
    done <"$logs/binaries"
  done
  return $failed
}
lane_taken="service_slurm_e2e service_ray_e2e soak service_torch_e2e service_adopt_e2e dashboard_browser"
# The Ray tests (Rust and Python) must not skip here: Ray is installed.
export DLSCALE_REQUIRE_RAY=1
# The Slurm lane, then everything on Ray, one after the other: a local Ray cluster started only
# now (an idle Ray still takes CPU from the other lanes), its Rust tests, and the Python Ray
# Train test (a head of its own), each a few torch processes.
ray_up=1
slurm_then_ray() {
  local failed=0 t0
  run_lane slurm service_slurm_e2e "soak:slurm" || failed=1
  t0=$SECONDS
  if ! ./scripts/ray-local.sh up --nodes 2 --gpus-per-node 1 >"$logs/ray.env" 2>"$logs/ray.log"; then
    echo "== ray-local.sh up failed:" >&2
    tail -n 40 "$logs/ray.log" >&2
    echo "ray-local.sh up" >>"$logs/failed"
    return 1
  fi
  echo "   slurm: a Ray cluster up ($((SECONDS - t0)) s)"
  eval "$(cat "$logs/ray.env")" # exports DLSCALE_RAY_ADDRESS, DLSCALE_RAY_RESOURCE
  run_lane slurm service_ray_e2e "soak:ray" || failed=1
  ./scripts/ray-local.sh down 2>>"$logs/ray.log"
  t0=$SECONDS
  "$DLSCALE_VENV/bin/python" -m pytest -q python/tests/test_ray_train.py >"$logs/pytest-ray.log" 2>&1 || {
    failed=1
    echo "pytest python/tests/test_ray_train.py" >>"$logs/failed"
  }
  echo "   slurm: pytest python/tests/test_ray_train.py ($((SECONDS - t0)) s)"
  return $failed
}
echo "== the Rust tests, in three lanes ($((SECONDS - started)) s so far)"
slurm_then_ray &
slurm_lane=$!
run_lane engines service_torch_e2e service_adopt_e2e dashboard_browser "soak:--skip slurm --skip ray" &
engines_lane=$!
rust=0
run_lane rest "*" || rust=1
cargo test --workspace --doc -q >>"$logs/lane-rest.log" 2>&1 || rust=1
# The Python tests train with torch too: in this lane, after its Rust tests, not beside the two
# torch lanes (three torch workloads on two cores slowed them past their timeouts).
echo "== pytest, in the rest lane ($((SECONDS - started)) s so far; its output follows the Rust tests)"
python=0
"$DLSCALE_VENV/bin/python" -m pytest -q python/tests --ignore python/tests/test_ray_train.py \
  >"$logs/pytest.log" 2>&1 || python=$?
wait "$engines_lane" || rust=1
wait "$slurm_lane" || rust=1
for lane in rest engines slurm; do
  echo "== the $lane lane's output"
  grep -v '^test .* \.\.\. ok$' "$logs/lane-$lane.log" || true
done
[ ! -s "$logs/failed" ] || { echo "== failed:"; cat "$logs/failed"; }
echo "== cargo clippy ($((SECONDS - started)) s so far)"
lints=0
wait "$clippy_pid" || lints=$?
grep -v '^ *\(Compiling\|Checking\) ' "$logs/clippy.log" || true
echo "== pytest"
cat "$logs/pytest.log"
cat "$logs/pytest-ray.log" 2>/dev/null || echo "(the Ray Train test did not run: no Ray cluster came up)"
echo "== done in $((SECONDS - started)) s"
exit $((rust != 0 || lints != 0 || python != 0))
