#!/usr/bin/env bash
# ray-local.sh: a real Ray cluster on this one machine, for dlscale's tests.
#
# A head node and K-1 worker nodes, all on loopback, each advertising G units of a custom
# resource (default fake_gpu) that stands for GPUs, with the dashboard (the Jobs REST API dlscale
# drives) on 127.0.0.1. Ray is the one in $DLSCALE_VENV (scripts/setup-python.sh installs it with
# torch), and the cluster runs with that venv first on PATH, so a job's `python` is the venv's.
#
#   scripts/ray-local.sh up [--nodes 2] [--gpus-per-node 4] [--cpus-per-node 2] [--resource fake_gpu]
#   scripts/ray-local.sh down
#   scripts/ray-local.sh env
#
# `up` prints the environment to use on stdout (progress goes to stderr), so this works:
#   eval "$(scripts/ray-local.sh up)"   # exports DLSCALE_RAY_ADDRESS, DLSCALE_RAY_RESOURCE
# `up` on a running cluster leaves it alone. `down` stops only the Ray processes this script
# started (by the pid of each node's `ray start --block`, and then anything left under its
# temporary directory), never other Ray clusters of the machine (`ray stop` would end them all).
#
# Environment:
#   DLSCALE_VENV               the Python environment with Ray (default ~/.cache/dlscale/venv)
#   DLSCALE_RAY_DIR            state dir: pid files, logs, Ray's temp dir (default /tmp/dlscale-ray)
#   DLSCALE_RAY_PORT           the head's GCS port (default 6390)
#   DLSCALE_RAY_DASHBOARD_PORT the dashboard's port (default 8265)
#   DLSCALE_RAY_UP_TIMEOUT     seconds `up` waits for every node (default 300)
set -euo pipefail

PROG=ray-local
die() { echo "[$PROG] ERROR: $*" >&2; exit 1; }
log() { echo "[$PROG] $*" >&2; }

VENV=${DLSCALE_VENV:-$HOME/.cache/dlscale/venv}
DIR=${DLSCALE_RAY_DIR:-/tmp/dlscale-ray}
PORT=${DLSCALE_RAY_PORT:-6390}
DASH=${DLSCALE_RAY_DASHBOARD_PORT:-8265}
UP_TIMEOUT=${DLSCALE_RAY_UP_TIMEOUT:-300}
ADDRESS=http://127.0.0.1:$DASH

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed 's/^# \{0,1\}//' | grep -v '^set -euo' >&2
  exit 2
}

print_env() {
  local resource=fake_gpu
  [ ! -f "$DIR/resource" ] || resource=$(cat "$DIR/resource")
  echo "export DLSCALE_RAY_ADDRESS=$ADDRESS"
  echo "export DLSCALE_RAY_RESOURCE=$resource"
}

# The alive nodes offering $1, as the dashboard's state API lists them (0 while it is not up).
alive_nodes() {
  "$VENV/bin/python" -c '
import json, sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[2] + "/api/v0/nodes?detail=1", timeout=5) as answer:
        nodes = json.load(answer)["data"]["result"]["result"]
except Exception:
    nodes = []
print(sum(1 for n in nodes if n["state"] == "ALIVE" and n["resources_total"].get(sys.argv[1], 0) > 0))
' "$1" "$ADDRESS"
}

# Starts one node in the background (`ray start --block`, its pid in $DIR/node<k>.pid).
start_node() {
  local k=$1
  shift
  # RAY_ADDRESS: Ray Train's helpers find this cluster by it, not by /tmp/ray's record of the
  # machine's latest cluster (another Ray of the machine may have written that).
  PATH="$VENV/bin:$PATH" RAY_ADDRESS=127.0.0.1:$PORT setsid nohup "$VENV/bin/ray" start --block --disable-usage-stats \
    --node-ip-address=127.0.0.1 "$@" >"$DIR/node$k.log" 2>&1 </dev/null &
  echo $! >"$DIR/node$k.pid"
}

cmd_up() {
  local nodes=2 gpus=4 cpus=2 resource=fake_gpu
  while [ $# -gt 0 ]; do
    case "$1" in
      --nodes) nodes=$2; shift 2 ;;
      --gpus-per-node) gpus=$2; shift 2 ;;
      --cpus-per-node) cpus=$2; shift 2 ;;
      --resource) resource=$2; shift 2 ;;
      *) die "unknown option $1" ;;
    esac
  done
  [ -x "$VENV/bin/ray" ] || die "no Ray in $VENV (scripts/setup-python.sh installs it)"
  mkdir -p "$DIR"
  if [ -f "$DIR/node1.pid" ] && kill -0 "$(cat "$DIR/node1.pid")" 2>/dev/null; then
    log "already up: $ADDRESS"
    print_env
    return
  fi
  echo "$resource" >"$DIR/resource"
  local res="{\"$resource\": $gpus}"
  # Each node keeps its object store small: the tests move no data through it.
  log "starting the head (GCS port $PORT, dashboard $ADDRESS), $gpus $resource"
  start_node 1 --head --port="$PORT" --dashboard-host=127.0.0.1 --dashboard-port="$DASH" \
    --num-cpus="$cpus" --resources="$res" --object-store-memory=200000000 --temp-dir="$DIR/tmp"
  local waited=0
  until [ "$(alive_nodes "$resource")" -ge 1 ]; do
    kill -0 "$(cat "$DIR/node1.pid")" 2>/dev/null || { tail -n 30 "$DIR/node1.log" >&2; die "the head exited"; }
    [ "$waited" -lt "$UP_TIMEOUT" ] || die "the head is not up after $UP_TIMEOUT s (log: $DIR/node1.log)"
    sleep 1
    waited=$((waited + 1))
  done
  # A node whose raylet does not register within Ray's fixed 30 s (a loaded machine) exits:
  # start it again, up to three times.
  local k tries
  start_worker() {
    start_node "$1" --address="127.0.0.1:$PORT" --num-cpus="$cpus" --resources="$res" \
      --object-store-memory=200000000 --dashboard-agent-listen-port=$((52365 + $1))
  }
  for k in $(seq 2 "$nodes"); do
    tries=1
    log "starting worker node $k, $gpus $resource"
    start_worker "$k"
    until [ "$(alive_nodes "$resource")" -ge "$k" ]; do
      if ! kill -0 "$(cat "$DIR/node$k.pid")" 2>/dev/null; then
        [ "$tries" -lt 3 ] || { tail -n 5 "$DIR/node$k.log" >&2; die "worker node $k failed to start $tries times (log: $DIR/node$k.log)"; }
        tries=$((tries + 1))
        log "worker node $k exited while starting; starting it again (try $tries)"
        start_worker "$k"
      fi
      [ "$waited" -lt "$UP_TIMEOUT" ] || die "only $(alive_nodes "$resource") of $nodes nodes are up after $UP_TIMEOUT s (logs: $DIR/node*.log)"
      sleep 1
      waited=$((waited + 1))
    done
  done
  log "up: $nodes node(s) x $gpus $resource at $ADDRESS ($waited s)"
  print_env
}

cmd_down() {
  local pids=() f
  for f in "$DIR"/node*.pid; do
    [ -f "$f" ] || continue
    pids+=("$(cat "$f")")
    rm -f "$f"
  done
  [ "${#pids[@]}" -eq 0 ] || kill -TERM "${pids[@]}" 2>/dev/null || true
  # `ray start --block` stops its node's processes when it is ended; wait for that, then end
  # whatever is left under this cluster's temp dir (workers, agents).
  local i
  for i in $(seq 20); do
    pgrep -f -- "$DIR/tmp" >/dev/null || break
    sleep 0.5
  done
  pkill -KILL -f -- "$DIR/tmp" 2>/dev/null || true
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  log "down"
}

case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  env) print_env ;;
  *) usage ;;
esac
