#!/usr/bin/env bash
# slurm-smoke.sh: end-to-end check of the local Slurm cluster that scripts/slurm-local.sh brings up,
# covering what dlscale relies on: multi-node GPU jobs, GPU isolation between jobs, the rescale
# sequence on a running job (requeue -> PENDING -> TresPerNode -> StartTime=now), and squeue --json.
#
#   scripts/slurm-smoke.sh [--keep]     # --keep: leave the cluster up afterwards
#
# Prints PASS/FAIL lines, then "slurm-smoke: N passed, M failed"; exits non-zero on any failure.
# Runs as root (it calls slurm-local.sh up/down). Job files go to $DLSCALE_SLURM_DIR/smoke.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOCAL=$HERE/slurm-local.sh
KEEP=0
[ "${1:-}" = --keep ] && KEEP=1
PY=$(command -v python3 || true)

PASSED=0 FAILED=0
JOBS=()
pass() { echo "PASS: $*"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL: $*"; FAILED=$((FAILED + 1)); }
check() { local what=$1; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }
info() { echo "  | $*"; }
now() { echo "${EPOCHREALTIME/[.,]/}"; } # microseconds
since() { local t=$(($(now) - $1)); printf '%d.%01ds' $((t / 1000000)) $((t % 1000000 / 100000)); }

finish() {
  local rc=$?
  [ -n "${SLURM_CONF:-}" ] && [ "${#JOBS[@]}" -gt 0 ] && scancel "${JOBS[@]}" >/dev/null 2>&1
  if [ "$KEEP" = 0 ]; then
    "$LOCAL" down || fail "slurm-local.sh down"
  fi
  echo "slurm-smoke: $PASSED passed, $FAILED failed"
  [ "$FAILED" = 0 ] && [ "$rc" = 0 ] && exit 0
  exit 1
}
trap finish EXIT

# ---- helpers -----------------------------------------------------------------------------------
submit() { # VAR sbatch-args...: submits, sets VAR to the job id
  local id
  id=$(sbatch --parsable "${@:2}") || { fail "sbatch ${*:2}"; printf -v "$1" '%s' 0; return 1; }
  id=${id%%;*}
  JOBS+=("$id")
  printf -v "$1" '%s' "$id"
}
field() { # JOB FIELD: a field of `scontrol -o show job` (GONE once the job has been purged)
  local line
  line=$(scontrol -o show job "$1" 2>/dev/null) || { echo GONE; return; }
  sed -n "s/.*[ ]$2=\([^ ]*\).*/\1/p" <<<" $line"
}
wait_state() { # JOB REGEX TIMEOUT_S: until JobState matches; prints the states seen, in order
  local deadline=$(($(now) + $3 * 1000000)) s seen=""
  while :; do
    s=$(field "$1" JobState)
    [[ "$seen" == *" $s" ]] || seen+=" $s"
    if [[ "$s" =~ ^($2)$ ]]; then echo "${seen# }"; return 0; fi
    [ "$(now)" -ge "$deadline" ] && { echo "${seen# }"; return 1; }
    sleep 0.1
  done
}
wait_grep() { # FILE REGEX TIMEOUT_S
  local deadline=$(($(now) + $3 * 1000000))
  until grep -qE "$2" "$1" 2>/dev/null; do
    [ "$(now)" -ge "$deadline" ] && return 1
    sleep 0.1
  done
}
count_ids() { # "0,2,3" -> 3
  [ -z "$1" ] && { echo 0; return; }
  tr ',' '\n' <<<"$1" | grep -c .
}

# ---- up ----------------------------------------------------------------------------------------
[ "$(id -u)" = 0 ] || { fail "must run as root"; exit 1; }
t=$(now)
ENV=$("$LOCAL" up --nodes 2 --gpus-per-node 4 --cpus-per-node 8) || { fail "slurm-local.sh up"; exit 1; }
eval "$ENV"
pass "up: 2 nodes x 4 GPUs idle in $(since "$t")"
while read -r line; do info "$line"; done <<<"$ENV"
ctld_pid=$(cat "$DLSCALE_SLURM_DIR/run/slurmctld.pid")
t=$(now)
"$LOCAL" up --nodes 2 --gpus-per-node 4 --cpus-per-node 8 >/dev/null 2>&1
check "up again is a no-op ($(since "$t"), same slurmctld pid)" \
  [ "$(cat "$DLSCALE_SLURM_DIR/run/slurmctld.pid")" = "$ctld_pid" ]

mapfile -t left < <(squeue -h -o %A)
if [ "${#left[@]}" -gt 0 ]; then
  info "cancelling jobs left from earlier runs: ${left[*]}"
  scancel "${left[@]}"
  for ((i = 0; i < 300; i++)); do [ -z "$(squeue -h -t PD,R,CG,S -o %A)" ] && break; sleep 0.1; done
fi

WORK=$DLSCALE_SLURM_DIR/smoke
rm -rf "$WORK"
mkdir -p "$WORK"
cd "$WORK" || exit 1
TAGS='^(SLURM|CUDA_|GPU_)'

# ---- 1. two nodes, 2 GPUs each, one srun task per node -----------------------------------------
cat >multi.sh <<EOF
#!/bin/bash
env | grep -E '$TAGS' | sort >env-batch.txt
srun --ntasks-per-node=1 bash -c 'echo \$(hostname) \$SLURMD_NODENAME \$CUDA_VISIBLE_DEVICES'
srun --ntasks-per-node=1 bash -c 'env | grep -E "$TAGS" | sort >env-step-\$SLURMD_NODENAME.txt'
EOF
t=$(now)
submit J --nodes=2 --gres=gpu:2 -o multi.out multi.sh
states=$(wait_state "$J" 'COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|GONE' 60)
check "multi-node job $J finished COMPLETED, exit 0:0 (states: $states; $(since "$t"))" \
  [ "$(field "$J" JobState) $(field "$J" ExitCode)" = "COMPLETED 0:0" ]
sed 's/^/  | multi.out: /' multi.out
nodes=$(awk 'NF {print $2}' multi.out | sort | tr '\n' ' ')
check "srun ran one task on each node (SLURMD_NODENAME: $nodes)" [ "$nodes" = "n1 n2 " ]
ok=1
while read -r _ _ cvd; do [ "$(count_ids "$cvd")" = 2 ] || ok=0; done < <(awk NF multi.out)
[ "$(awk NF multi.out | wc -l)" = 2 ] || ok=0
check "each task saw CUDA_VISIBLE_DEVICES with 2 GPUs" [ "$ok" = 1 ]
check "batch step saw SLURM_JOB_NODELIST=n[1-2] SLURM_GPUS_ON_NODE=2" \
  [ "$(grep -cxE 'SLURM_JOB_NODELIST=n\[1-2\]|SLURM_GPUS_ON_NODE=2' env-batch.txt)" = 2 ]
info "env of the srun task on n2 (selected):"
grep -E '^(SLURM_JOB_ID|SLURM_JOB_NODELIST|SLURM_NNODES|SLURM_NODEID|SLURM_PROCID|SLURM_LOCALID|SLURMD_NODENAME|SLURM_GPUS_ON_NODE|SLURM_JOB_GPUS|SLURM_STEP_GPUS|CUDA_VISIBLE_DEVICES|SLURM_CONF|SLURM_RESTART_COUNT)=' \
  env-step-n2.txt 2>/dev/null | sed 's/^/  |   /'

# ---- 2. GPU isolation: two 2-GPU jobs share n1, a third GPU job waits ----------------------------
cat >iso.sh <<'EOF'
#!/bin/bash
echo "$SLURM_JOB_ID $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES $SLURM_JOB_GPUS" >"iso-$SLURM_JOB_ID.txt"
while [ ! -e release ]; do sleep 0.1; done
EOF
t=$(now)
submit A -w n1 --gres=gpu:2 -o iso-%j.out iso.sh
submit B -w n1 --gres=gpu:2 -o iso-%j.out iso.sh
submit C -w n1 --gres=gpu:1 -o iso-%j.out iso.sh
wait_state "$A" RUNNING 30 >/dev/null && wait_state "$B" RUNNING 30 >/dev/null
check "two 1-node jobs with 2 GPUs each run together on n1 ($(since "$t"))" \
  [ "$(field "$A" JobState) $(field "$B" JobState)" = "RUNNING RUNNING" ]
wait_grep "iso-$A.txt" . 10 && wait_grep "iso-$B.txt" . 10
cva=$(awk '{print $3}' "iso-$A.txt" 2>/dev/null) cvb=$(awk '{print $3}' "iso-$B.txt" 2>/dev/null)
info "job $A: CUDA_VISIBLE_DEVICES=$cva   job $B: CUDA_VISIBLE_DEVICES=$cvb"
union=$(tr ',' '\n' <<<"$cva,$cvb" | grep . | sort -u | wc -l)
check "their GPU sets are disjoint and cover the node's 4 GPUs" \
  [ "$(count_ids "$cva") $(count_ids "$cvb") $union" = "2 2 4" ]
deadline=$(($(now) + 15000000))
until [ "$(field "$C" JobState) $(field "$C" Reason)" = "PENDING Resources" ] || [ "$(now)" -ge "$deadline" ]; do sleep 0.2; done
check "a third GPU job on n1 waits (JobState=$(field "$C" JobState) Reason=$(field "$C" Reason))" \
  [ "$(field "$C" JobState) $(field "$C" Reason)" = "PENDING Resources" ]

# ---- squeue --json, with jobs running and pending ---------------------------------------------
squeue --json >squeue.json 2>squeue.err
check "squeue --json exits 0 and parses as JSON (python3 json.load)" \
  "${PY:-false}" -c 'import json,sys; json.load(open(sys.argv[1]))' squeue.json
if [ -n "$PY" ]; then
  "$PY" - "$A" "$C" squeue.json <<'EOF' >json-check.txt 2>&1
import json, sys
run_id, pend_id, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
d = json.load(open(path))
jobs = {j["job_id"]: j for j in d["jobs"]}
keys = ["job_id", "name", "job_state", "state_reason", "nodes", "node_count", "batch_host",
        "tres_per_node", "gres_detail", "restart_cnt", "requeue", "submit_time", "start_time",
        "eligible_time"]
r, p = jobs[run_id], jobs[pend_id]
print("meta:", json.dumps(d["meta"]))
print("running:", json.dumps({k: r.get(k) for k in keys}))
print("pending:", json.dumps({k: p.get(k) for k in keys}))
assert r["job_state"] == "RUNNING" and r["nodes"] == "n1", r
assert r["tres_per_node"] == "gres:gpu:2" and r["gres_detail"][0].startswith("gpu:2(IDX:"), r
assert p["job_state"] == "PENDING" and p["state_reason"] == "Resources" and p["nodes"] == "", p
print("ok")
EOF
  sed 's/^/  | /' json-check.txt
  check "squeue --json: job_id/job_state/state_reason/nodes/tres_per_node/gres_detail as expected" \
    grep -qx ok json-check.txt
fi

touch release
wait_state "$C" COMPLETED 30 >/dev/null
check "after release all three completed; the waiting job then ran ($(since "$t"))" \
  [ "$(field "$A" JobState) $(field "$B" JobState) $(field "$C" JobState)" = "COMPLETED COMPLETED COMPLETED" ]

# ---- 3. rescale a running job: requeue -> PENDING -> TresPerNode -> StartTime=now ----------------
cat >rescale.sh <<'EOF'
#!/bin/bash
echo "start restart=${SLURM_RESTART_COUNT:-0} gpus=$SLURM_GPUS_ON_NODE cvd=$CUDA_VISIBLE_DEVICES node=$SLURMD_NODENAME"
trap 'echo "got SIGTERM"; exit 143' TERM
while :; do sleep 0.1; done
EOF
t=$(now)
submit R --nodes=1 --gres=gpu:1 --open-mode=append -o rescale.out rescale.sh
wait_state "$R" RUNNING 30 >/dev/null
check "rescale job $R runs with 1 GPU ($(since "$t"))" wait_grep rescale.out 'restart=0 gpus=1 cvd=[0-9]+ ' 10
t=$(now)
scontrol requeue "$R"
states=$(wait_state "$R" PENDING 60)
check "scontrol requeue: job goes back to PENDING (states seen: $states; $(since "$t"))" \
  [ "$(field "$R" JobState)" = PENDING ]
scontrol show job "$R" >requeued.txt
info "scontrol show job $R after requeue (selected):"
grep -E 'JobState|Restarts|EligibleTime|StartTime|NodeList=|TresPerNode' requeued.txt | sed 's/^/  |   /'
check "requeued job waits with Reason=BeginTime and Restarts=1" \
  [ "$(field "$R" Reason) $(field "$R" Restarts)" = "BeginTime 1" ]
# Slurm race: requeue revokes the job's credential on its node, and a relaunch whose credential is
# dated (1 s resolution) not after the revocation is refused: "Killing non-startable batch JobId=..:
# Job credential revoked", and the job ends FAILED for good. So release it in a later second.
pending_at=$(date +%s)
while [ "$(date +%s)" -le "$pending_at" ]; do sleep 0.05; done
scontrol update jobid="$R" TresPerNode=gres:gpu:3 && scontrol update jobid="$R" StartTime=now
rc=$?
check "scontrol update TresPerNode=gres:gpu:3 + StartTime=now accepted" [ "$rc" = 0 ]
wait_state "$R" RUNNING 30 >/dev/null
check "job restarts with 3 GPUs (SLURM_RESTART_COUNT=1; $(since "$t") after requeue)" \
  wait_grep rescale.out 'restart=1 gpus=3 cvd=[0-9]+,[0-9]+,[0-9]+ ' 10
sed 's/^/  | rescale.out: /' rescale.out
check "scontrol show job: Restarts=1 TresPerNode=gres:gpu:3" \
  [ "$(field "$R" Restarts) $(field "$R" TresPerNode)" = "1 gres:gpu:3" ]
scancel "$R"
states=$(wait_state "$R" CANCELLED 30)
check "scancel: job $R ends CANCELLED (states seen: $states)" [ "$(field "$R" JobState)" = CANCELLED ]

# ---- 4. --export=NONE still lets a job find the cluster -----------------------------------------
# shellcheck disable=SC2016 # expanded by the job
submit E --export=NONE -o export-none.out --wrap 'echo "SLURM_CONF=$SLURM_CONF PATH=${PATH:-unset}"'
wait_state "$E" 'COMPLETED|FAILED' 30 >/dev/null
sed 's/^/  | export-none.out: /' export-none.out
check "with --export=NONE the job still gets SLURM_CONF=$SLURM_CONF" \
  grep -qF "SLURM_CONF=$SLURM_CONF " export-none.out
