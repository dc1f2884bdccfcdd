#!/usr/bin/env bash
# slurm-local.sh: a real Slurm cluster on this one machine, for dlscale's tests.
#
# K slurmd daemons (nodes n1..nK, all on 127.0.0.1, one port each), each advertising G fake GPUs
# (GRES backed by character devices made with mknod), plus slurmctld and a private munged.
# Everything (config, keys, sockets, pid files, logs, spool) lives under one state dir, so it
# neither needs nor touches /etc/slurm or a system munged. Tested with Debian 12's slurm-wlm 22.05.
#
#   scripts/slurm-local.sh up [--nodes 2] [--gpus-per-node 4] [--cpus-per-node 8] [--mem-per-node-mb 16384]
#                              [--gpu-types t4,a100]
#   scripts/slurm-local.sh down [--purge]
#   scripts/slurm-local.sh status
#   scripts/slurm-local.sh env
#   scripts/slurm-local.sh node-fail NODE   # the node crashes: its slurmd is killed, it is DOWN
#   scripts/slurm-local.sh node-back NODE   # its slurmd starts again and the node is resumed
#
# `up` is idempotent: daemons already running with the same config are left alone (and their jobs
# too); a different config restarts the Slurm daemons with a fresh, empty controller state.
# It prints the environment to use on stdout (progress goes to stderr), so this works:
#   eval "$(scripts/slurm-local.sh up)"      # exports SLURM_CONF=<state dir>/etc/slurm.conf
# `down` cancels all jobs, stops every daemon it started (pid files), and is idempotent.
#
# Environment:
#   DLSCALE_SLURM_DIR          state dir (default /var/lib/dlscale-slurm)
#   DLSCALE_SLURM_PORT         slurmctld port; node k listens on PORT+k (default 6817)
#   DLSCALE_SLURM_MIN_JOB_AGE  seconds a finished job stays visible to squeue/scontrol (default 30)
#   DLSCALE_SLURM_KILL_WAIT    seconds between SIGTERM and SIGKILL on cancel/requeue (default 10)
#   DLSCALE_SLURM_UP_TIMEOUT   seconds `up` waits for the nodes to come up (default 60)
#
# --gpu-types names the nodes' GPU types, round robin (n1 t4, n2 a100, n3 t4, ...): typed GRES
# (`Gres=gpu:a100:4`), as a cluster of several GPU generations declares them; without it, untyped.
#
# Jobs see CUDA_VISIBLE_DEVICES, SLURM_JOB_GPUS, SLURM_GPUS_ON_NODE as on a real GPU cluster; with no
# device cgroups the indices are the node's global ones (two jobs on one node get disjoint sets).
# All nodes share the host name, so a job tells its node by SLURMD_NODENAME, not `hostname`.
set -euo pipefail

PROG=slurm-local
PKGS=(slurmctld slurmd slurm-client munge)

die() { echo "[$PROG] ERROR: $*" >&2; exit 1; }
log() { echo "[$PROG] $*" >&2; }

DIR=${DLSCALE_SLURM_DIR:-/var/lib/dlscale-slurm}
case "$DIR" in /*) ;; *) DIR="$(pwd)/$DIR" ;; esac
DIR=${DIR%/}
PORT=${DLSCALE_SLURM_PORT:-6817}
MIN_JOB_AGE=${DLSCALE_SLURM_MIN_JOB_AGE:-30}
KILL_WAIT=${DLSCALE_SLURM_KILL_WAIT:-10}
UP_TIMEOUT=${DLSCALE_SLURM_UP_TIMEOUT:-60}

ETC=$DIR/etc RUN=$DIR/run LOG=$DIR/log SPOOL=$DIR/spool DEV=$DIR/dev MUNGE=$DIR/munge
CONF=$ETC/slurm.conf
MUNGE_SOCKET=$MUNGE/munge.socket
# Every daemon we start carries this variable; `down` uses it to find stragglers (slurmstepd).
MARK=DLSCALE_SLURM_DAEMON_OF

export SLURM_CONF=$CONF
export PATH=$PATH:/usr/sbin:/sbin

# ---------------------------------------------------------------------------------------------
# helpers

# proc_is PID COMM: PID is a live (not zombie) process named COMM. Zombies matter here: the
# daemons' reaper may be a PID 1 that reaps late, and a zombie keeps its /proc entry and name.
proc_is() {
  local stat
  [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ] || return 1
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# pid_alive PIDFILE COMM: the pid file names a live process named COMM (not a recycled pid).
pid_alive() {
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] && proc_is "$pid" "$2"
}

# daemon LOGNAME CMD...: start a self-daemonizing server with nothing of ours inherited: stdin from
# /dev/null, output to LOG/LOGNAME.stderr, every other fd closed (munged keeps inherited fds open; an
# inherited lock or a test harness's pipe would stay held for the daemon's lifetime), MARK set.
daemon() {
  local name=$1 fd
  shift
  (
    for fd in "/proc/$BASHPID/fd"/*; do
      fd=${fd##*/}
      [ "$fd" -gt 2 ] && eval "exec $fd>&-"
    done
    exec env "$MARK=$DIR" "$@"
  ) </dev/null >>"$LOG/$name.stderr" 2>&1
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The node names of the config currently on disk (for down/status, which take no arguments).
conf_nodes() { if [ -f "$CONF" ]; then sed -n 's/^NodeName=\([^ ]*\) .*/\1/p' "$CONF"; fi; }

tail_logs() {
  local f
  for f in "$LOG"/slurmctld.log "$LOG"/slurmd-*.log "$MUNGE"/munged.log "$LOG"/*.stderr; do
    [ -s "$f" ] || continue
    echo "----- tail $f" >&2
    tail -n "${1:-15}" "$f" >&2
  done
}

ensure_root() { [ "$(id -u)" = 0 ] || die "must run as root (it installs packages and runs daemons)"; }

lock() {
  mkdir -p "$DIR"
  exec 9>"$DIR/.lock"
  flock -w 300 9 || die "another $PROG is running on $DIR for over 300 s"
}

# ---------------------------------------------------------------------------------------------
# up

ensure_packages() {
  local b missing=0
  for b in slurmctld slurmd sinfo squeue scontrol sbatch munged munge; do
    command -v "$b" >/dev/null 2>&1 || missing=1
  done
  [ "$missing" = 0 ] && return 0
  mkdir -p "$LOG"
  log "installing ${PKGS[*]} (apt-get; log: $LOG/apt.log)"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q --no-install-recommends "${PKGS[@]}" >"$LOG/apt.log" 2>&1; then
    # Missing or stale package lists: refresh them once, then try again.
    log "apt-get install failed; running apt-get update and retrying"
    { apt-get update -q && apt-get install -y -q --no-install-recommends "${PKGS[@]}"; } \
      >>"$LOG/apt.log" 2>&1 || { tail -n 20 "$LOG/apt.log" >&2; die "could not install ${PKGS[*]}"; }
  fi
  for b in slurmctld slurmd sinfo munged; do
    command -v "$b" >/dev/null 2>&1 || die "$b still missing after installing ${PKGS[*]}"
  done
}

# Fake GPUs. slurmd only stat()s the gres.conf File= paths and rejects anything that is not a
# character/block device (the node then goes INVAL), so make real device nodes. Major 195 is
# NVIDIA's; nothing ever opens them. Fall back to minors of mem devices if 195 is refused.
make_fake_gpus() {
  local i f fallback=(3 5 7 8 9)
  mkdir -p "$DEV"
  for ((i = 0; i < GPUS; i++)); do
    f=$DEV/nvidia$i
    [ -c "$f" ] && continue
    rm -f "$f"
    mknod "$f" c 195 "$i" 2>/dev/null || mknod "$f" c 1 "${fallback[$((i % 5))]}" \
      || die "mknod $f failed: cannot make fake GPU devices here"
  done
}

write_config() { # DEST_DIR
  local host k out=$1
  host=$(hostname -s)
  [ -n "$host" ] || die "hostname -s is empty"
  {
    echo "# Written by scripts/slurm-local.sh: local test cluster, $NODES nodes x $GPUS fake GPUs"
    echo "ClusterName=dlscale"
    echo "SlurmctldHost=$host(127.0.0.1)"
    echo "SlurmctldPort=$PORT"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=$MUNGE_SOCKET"
    echo "StateSaveLocation=$SPOOL/ctld"
    echo "SlurmdSpoolDir=$SPOOL/%n"
    echo "SlurmctldPidFile=$RUN/slurmctld.pid"
    echo "SlurmdPidFile=$RUN/slurmd-%n.pid"
    echo "SlurmctldLogFile=$LOG/slurmctld.log"
    echo "SlurmdLogFile=$LOG/slurmd-%n.log"
    echo "SlurmctldDebug=info"
    echo "SlurmdDebug=info"
    # No cgroups: 22.05 has no CgroupPlugin=disabled, so leave cgroup.conf out and avoid the plugins.
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "JobCompType=jobcomp/none"
    # (AccountingStorageTRES=gres/gpu would put GPUs in AllocTRES but needs slurmdbd: slurmctld exits.)
    echo "SchedulerType=sched/backfill"
    # Start batch jobs at once (default: up to 3 s later), so tests do not wait on the scheduler.
    echo "SchedulerParameters=batch_sched_delay=0"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "GresTypes=gpu"
    echo "MpiDefault=none"
    echo "MailProg=/bin/true"
    # Nodes advertise more CPUs than the machine has.
    echo "SlurmdParameters=config_overrides"
    echo "ReturnToService=2"
    echo "MinJobAge=$MIN_JOB_AGE"
    echo "KillWait=$KILL_WAIT"
    echo "InactiveLimit=0"
    echo "Waittime=0"
    for ((k = 1; k <= NODES; k++)); do
      printf 'NodeName=n%d NodeHostname=%s NodeAddr=127.0.0.1 Port=%d CPUs=%d Boards=1 SocketsPerBoard=1 CoresPerSocket=%d ThreadsPerCore=1 RealMemory=%d' \
        "$k" "$host" $((PORT + k)) "$CPUS" "$CPUS" "$MEM"
      [ "$GPUS" -gt 0 ] && printf ' Gres=gpu:%s%d' "$(type_of "$k")" "$GPUS"
      echo " State=UNKNOWN"
    done
    echo "PartitionName=gpu Nodes=n[1-$NODES] Default=YES MaxTime=INFINITE State=UP"
  } >"$out/slurm.conf"
  {
    echo "# Written by scripts/slurm-local.sh"
    local files=$DEV/nvidia0 k
    [ "$GPUS" -gt 1 ] && files="$DEV/nvidia[0-$((GPUS - 1))]"
    if [ "$GPUS" -gt 0 ] && [ ${#TYPES[@]} -eq 0 ]; then
      echo "NodeName=n[1-$NODES] Name=gpu File=$files"
    elif [ "$GPUS" -gt 0 ]; then
      for ((k = 1; k <= NODES; k++)); do
        echo "NodeName=n$k Name=gpu Type=$(type_of "$k" | tr -d :) File=$files"
      done
    fi
  } >"$out/gres.conf"
}

start_munged() {
  if pid_alive "$MUNGE/munged.pid" munged; then return 0; fi
  mkdir -p "$MUNGE"
  chmod 0755 "$MUNGE" # the socket must be reachable by every user that submits; the key stays 0600
  if [ ! -s "$MUNGE/munge.key" ]; then
    if command -v mungekey >/dev/null 2>&1; then
      mungekey --create --keyfile="$MUNGE/munge.key" --force
    else
      dd if=/dev/urandom of="$MUNGE/munge.key" bs=1024 count=1 status=none
    fi
    chmod 0600 "$MUNGE/munge.key"
  fi
  rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
  log "starting munged (socket $MUNGE_SOCKET)"
  daemon munged munged --force --socket="$MUNGE_SOCKET" --key-file="$MUNGE/munge.key" \
    --pid-file="$MUNGE/munged.pid" --log-file="$MUNGE/munged.log" --seed-file="$MUNGE/munged.seed" \
    || { tail_logs; die "munged failed to start"; }
  local i
  for ((i = 0; i < 50; i++)); do
    munge -n -S "$MUNGE_SOCKET" 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  tail_logs; die "munged does not answer on $MUNGE_SOCKET"
}

start_slurmctld() {
  if pid_alive "$RUN/slurmctld.pid" slurmctld; then return 0; fi
  # A fresh controller means a fresh cluster: no jobs or node states from an earlier run, and no
  # slurmd left with an old spool. (Job ids restart at 1; a slurmd that remembers an old job N's
  # revoked credential would refuse or confuse the new job N.)
  stop_slurm
  port_busy "$PORT" && die "port $PORT is taken by another process (another slurmctld?):
$(ss -ltnp 2>/dev/null | grep ":$PORT " || true)
stop it, or pick another base port with DLSCALE_SLURM_PORT"
  rm -rf "$SPOOL"
  mkdir -p "$SPOOL/ctld"
  log "starting slurmctld (port $PORT)"
  daemon slurmctld slurmctld -f "$CONF" -c || { tail_logs; die "slurmctld failed to start"; }
  local i
  for ((i = 0; i < 100; i++)); do
    scontrol ping 2>/dev/null | grep -q 'is UP' && return 0
    pid_alive "$RUN/slurmctld.pid" slurmctld || [ "$i" -lt 20 ] || break
    sleep 0.2
  done
  tail_logs; die "slurmctld did not come up"
}

start_slurmd() { # NODE PORT
  if pid_alive "$RUN/slurmd-$1.pid" slurmd; then return 0; fi
  port_busy "$2" && die "port $2 (node $1) is taken by another process:
$(ss -ltnp 2>/dev/null | grep ":$2 " || true)
stop it, or pick another base port with DLSCALE_SLURM_PORT"
  mkdir -p "$SPOOL/$1"
  log "starting slurmd $1 (port $2)"
  daemon "slurmd-$1" slurmd -f "$CONF" -N "$1" || { tail_logs; die "slurmd $1 failed to start"; }
}

# Until every node is up and usable (idle on a fresh cluster; mixed/allocated if jobs run).
wait_nodes() {
  local deadline=$((SECONDS + UP_TIMEOUT)) states bad k
  while :; do
    states=$(sinfo -h -N -o '%N %T' 2>/dev/null || true)
    bad=$(awk '$2 !~ /^(idle|mixed|allocated|completing)$/' <<<"$states")
    if [ -n "$states" ] && [ -z "$bad" ] && [ "$(wc -l <<<"$states")" -eq "$NODES" ]; then
      return 0
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "[$PROG] nodes not up after ${UP_TIMEOUT}s:" >&2
      sinfo -N -o '%N %T %E' >&2 || true
      for ((k = 1; k <= NODES; k++)); do
        pid_alive "$RUN/slurmd-n$k.pid" slurmd || echo "[$PROG] slurmd n$k is not running" >&2
      done
      tail_logs 20
      die "cluster did not come up (logs in $LOG)"
    fi
    sleep 0.3
  done
}

print_env() {
  cat <<EOF
export SLURM_CONF=$CONF
export DLSCALE_SLURM_DIR=$DIR
EOF
}

# type_of K: node K's GPU type followed by ':' (for `gpu:TYPE:N`), or nothing when untyped.
type_of() {
  [ ${#TYPES[@]} -gt 0 ] || return 0
  printf '%s:' "${TYPES[$((($1 - 1) % ${#TYPES[@]}))]}"
}

cmd_up() {
  NODES=2 GPUS=4 CPUS=8 MEM=16384 GPU_TYPES=
  while [ $# -gt 0 ]; do
    case "$1" in
      --gpu-types) GPU_TYPES=${2:?}; shift 2 ;;
      --gpu-types=*) GPU_TYPES=${1#*=}; shift ;;
      --nodes) NODES=${2:?}; shift 2 ;;
      --gpus-per-node) GPUS=${2:?}; shift 2 ;;
      --cpus-per-node) CPUS=${2:?}; shift 2 ;;
      --mem-per-node-mb) MEM=${2:?}; shift 2 ;;
      --nodes=*) NODES=${1#*=}; shift ;;
      --gpus-per-node=*) GPUS=${1#*=}; shift ;;
      --cpus-per-node=*) CPUS=${1#*=}; shift ;;
      --mem-per-node-mb=*) MEM=${1#*=}; shift ;;
      *) die "up: unknown argument $1" ;;
    esac
  done
  local v
  for v in "$NODES" "$GPUS" "$CPUS" "$MEM" "$PORT"; do
    [[ "$v" =~ ^[0-9]+$ ]] || die "not a number: $v"
  done
  if [ "$NODES" -lt 1 ] || [ "$CPUS" -lt 1 ]; then die "--nodes and --cpus-per-node must be >= 1"; fi
  IFS=, read -r -a TYPES <<<"$GPU_TYPES"
  for v in "${TYPES[@]}"; do
    [[ "$v" =~ ^[a-z][a-z0-9._-]*$ ]] || die "--gpu-types: not a GPU type name: $v"
  done
  ensure_root
  lock
  local t0=${EPOCHREALTIME/[.,]/}
  ensure_packages
  mkdir -p "$ETC" "$RUN" "$LOG" "$SPOOL"
  make_fake_gpus

  local tmp
  tmp=$(mktemp -d "$DIR/.conf.XXXXXX")
  write_config "$tmp"
  if ! cmp -s "$tmp/slurm.conf" "$CONF" || ! cmp -s "$tmp/gres.conf" "$ETC/gres.conf"; then
    if [ -f "$CONF" ] && any_slurm_running; then
      log "config changed: restarting the Slurm daemons (jobs are cancelled)"
      stop_slurm
    fi
    mv -f "$tmp/slurm.conf" "$CONF"
    mv -f "$tmp/gres.conf" "$ETC/gres.conf"
  fi
  rm -rf "$tmp"

  start_munged
  start_slurmctld
  local k
  for ((k = 1; k <= NODES; k++)); do start_slurmd "n$k" $((PORT + k)); done
  wait_nodes
  print_env >"$DIR/env"
  t0=$((${EPOCHREALTIME/[.,]/} - t0))
  log "up in $((t0 / 1000000)).$((t0 % 1000000 / 100000))s: $(sinfo -h -N -o '%N:%T:%G' | tr '\n' ' ')"
  print_env
}

# ---------------------------------------------------------------------------------------------
# down

any_slurm_running() {
  local f
  pid_alive "$RUN/slurmctld.pid" slurmctld && return 0
  for f in "$RUN"/slurmd-*.pid; do pid_alive "$f" slurmd && return 0; done
  return 1
}

# stop_pidfile PIDFILE COMM: SIGTERM, wait up to 10 s, then SIGKILL.
stop_pidfile() {
  local pid i
  if pid_alive "$1" "$2"; then
    pid=$(cat "$1")
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      proc_is "$pid" "$2" || break
      sleep 0.1
    done
    if proc_is "$pid" "$2"; then
      log "$2 ($pid) ignored SIGTERM; killing"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$1"
}

# Stop slurmd's and slurmctld (not munged). Cancels jobs first so no job processes are left.
stop_slurm() {
  local f i
  local -a ids
  if pid_alive "$RUN/slurmctld.pid" slurmctld; then
    mapfile -t ids < <(squeue -h -o '%A' 2>/dev/null || true)
    if [ "${#ids[@]}" -gt 0 ]; then
      log "cancelling jobs: ${ids[*]}"
      scancel "${ids[@]}" 2>/dev/null || true
      for ((i = 0; i < (KILL_WAIT + 10) * 5; i++)); do
        [ -z "$(squeue -h -t PD,R,CG,S,CF -o '%A' 2>/dev/null)" ] && break
        sleep 0.2
      done
    fi
  fi
  for f in "$RUN"/slurmd-*.pid; do [ -e "$f" ] && stop_pidfile "$f" slurmd; done
  stop_pidfile "$RUN/slurmctld.pid" slurmctld
  sweep
}

# Last resort, for jobs the controller could not cancel (it or munged was already gone): SIGKILL what
# is left of ours. Daemons and slurmstepd carry MARK; job processes carry SLURM_CONF=<our conf> (slurmd
# sets it even under --export=NONE) together with a SLURM_JOB_ID. Never ourselves or our ancestors.
sweep() {
  local p pid keep=" " e ours job conf
  local -a envv
  pid=$BASHPID
  while [ -n "$pid" ] && [ "$pid" -gt 1 ]; do
    keep+="$pid "
    pid=$(awk '/^PPid:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
  done
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [[ "$keep" == *" $pid "* ]] && continue
    { mapfile -d '' -t envv <"$p/environ"; } 2>/dev/null || continue
    ours=0 job=0 conf=0
    for e in "${envv[@]}"; do
      case "$e" in
        "$MARK=$DIR") ours=1 ;;
        "SLURM_CONF=$CONF") conf=1 ;;
        SLURM_JOB_ID=*) job=1 ;;
      esac
    done
    [ "$ours" = 1 ] || [ "$conf$job" = 11 ] || continue
    [ "$(cat "$p/comm" 2>/dev/null)" = munged ] && continue
    log "killing leftover $(tr '\0' ' ' 2>/dev/null <"$p/cmdline" | cut -c1-60) ($pid)"
    kill -KILL "$pid" 2>/dev/null || true
  done
}

cmd_down() {
  local purge=0
  [ "${1:-}" = --purge ] && purge=1
  [ -d "$DIR" ] || { log "nothing to stop ($DIR does not exist)"; return 0; }
  ensure_root
  lock
  stop_slurm
  stop_pidfile "$MUNGE/munged.pid" munged
  rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
  if [ "$purge" = 1 ]; then
    rm -rf "${SPOOL:?}" "${RUN:?}" "${LOG:?}" "${ETC:?}" "${DEV:?}" "${MUNGE:?}" "$DIR/env"
    log "down; removed state under $DIR"
  else
    log "down (state and logs kept in $DIR)"
  fi
}

# ---------------------------------------------------------------------------------------------
# status

cmd_status() {
  local n
  if ! pid_alive "$RUN/slurmctld.pid" slurmctld; then
    echo "slurmctld: not running (state dir $DIR)"
    return 3
  fi
  echo "slurmctld: running (pid $(cat "$RUN/slurmctld.pid")), SLURM_CONF=$CONF"
  for n in $(conf_nodes); do
    if pid_alive "$RUN/slurmd-$n.pid" slurmd; then echo "slurmd $n: running (pid $(cat "$RUN/slurmd-$n.pid"))"
    else echo "slurmd $n: not running"; fi
  done
  sinfo -N -o '%N %P %T %c %G %E'
  squeue -o '%.8i %.10j %.9T %.6D %.14b %R'
}

# ---------------------------------------------------------------------------------------------
# node faults, for tests

# node_port NODE: the port of a node of this config (n<k> listens on PORT+k).
node_port() {
  [[ "$1" =~ ^n([0-9]+)$ ]] || die "not a node of this cluster: $1"
  grep -q "^NodeName=$1 " "$CONF" || die "not a node of this cluster: $1"
  echo $((PORT + BASH_REMATCH[1]))
}

# A crashed node: without its slurmd it cannot register again (ReturnToService=2 would otherwise
# bring a node that was merely set DOWN back at its next registration); slurmctld ends or requeues
# its jobs at once because the node is set DOWN rather than left to time out.
cmd_node_fail() {
  local node=${1:?node-fail NODE}
  ensure_root
  node_port "$node" >/dev/null
  if pid_alive "$RUN/slurmd-$node.pid" slurmd; then kill -KILL "$(cat "$RUN/slurmd-$node.pid")"; fi
  rm -f "$RUN/slurmd-$node.pid"
  scontrol update nodename="$node" state=down reason="slurm-local node-fail"
  log "$node failed (slurmd killed, set DOWN)"
}

cmd_node_back() {
  local node=${1:?node-back NODE} port deadline state
  ensure_root
  port=$(node_port "$node")
  start_slurmd "$node" "$port"
  scontrol update nodename="$node" state=resume 2>/dev/null || true
  deadline=$((SECONDS + UP_TIMEOUT))
  while state=$(sinfo -h -n "$node" -N -o '%T'); ! [[ "$state" =~ ^(idle|mixed|allocated)$ ]]; do
    [ "$SECONDS" -lt "$deadline" ] || die "$node is $state, not back after ${UP_TIMEOUT}s"
    sleep 0.3
  done
  log "$node back: $state"
}

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  down) shift; cmd_down "$@" ;;
  status) cmd_status ;;
  env) print_env ;;
  node-fail) shift; cmd_node_fail "$@" ;;
  node-back) shift; cmd_node_back "$@" ;;
  -h | --help | help | "") usage ;;
  *) echo "[$PROG] unknown command: $1" >&2; usage ;;
esac
