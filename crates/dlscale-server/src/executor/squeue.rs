//! What Slurm says, read: `squeue --json` and `sinfo --json` parsed (both the 22.05 and the 23.02+
//! flavours of their JSON), and one queue snapshot interpreted for the autoscaler
//! ([`interpret`]). Pure functions, tested on recorded JSON.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Context, Result};
use dlscale_autoscaler::{LaunchState, Observation, ObservedLaunch, Outcome};
use serde_json::Value;

use super::{parse_launch_marker, NodeInfo};

/// One of this server's launches as Slurm shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct SlurmJob {
    /// Slurm's job id.
    pub job_id: u64,
    /// dlscale job id.
    pub job: String,
    /// dlscale launch number.
    pub attempt: u32,
    /// Base job state (`PENDING`, `RUNNING`, `COMPLETING`, `COMPLETED`, `CANCELLED`, ...).
    pub state: String,
    /// Why it is in that state (`Resources`, `BeginTime`, `NonZeroExitCode`, ...).
    pub reason: String,
    /// Times Slurm requeued it.
    pub restart_cnt: u32,
    /// Exit code of the batch script once it ended (negative: signal).
    pub exit_code: Option<i32>,
    /// Submission time, seconds since the epoch.
    pub submit_time: Option<i64>,
    /// Node list (Slurm hostlist syntax).
    pub nodes: String,
}

impl SlurmJob {
    /// Whether Slurm is done with it (its processes are gone).
    pub fn is_terminal(&self) -> bool {
        is_terminal_state(&self.state)
    }

    /// How it ended, preferring the exit code its batch script recorded.
    pub fn outcome(&self, recorded: Option<i32>) -> Outcome {
        match self.state.as_str() {
            "COMPLETED" => Outcome::Exited(recorded.unwrap_or(0)),
            "FAILED" | "OUT_OF_MEMORY" => {
                let code = recorded.or(self.exit_code).unwrap_or(1);
                Outcome::Exited(if code == 0 { 1 } else { code })
            }
            "CANCELLED" => Outcome::CancelledOutside,
            other => Outcome::Interrupted(format!(
                "Slurm ended job {} as {other} (reason {})",
                self.job_id, self.reason
            )),
        }
    }
}

/// Whether a Slurm job state is final.
pub fn is_terminal_state(state: &str) -> bool {
    matches!(
        state,
        "COMPLETED"
            | "CANCELLED"
            | "FAILED"
            | "TIMEOUT"
            | "NODE_FAIL"
            | "PREEMPTED"
            | "BOOT_FAIL"
            | "DEADLINE"
            | "OUT_OF_MEMORY"
    )
}

/// What one `squeue --json` says that matters to dlscale.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueSnapshot {
    /// This server's launches (by job name).
    pub ours: Vec<SlurmJob>,
    /// GPUs per node held by jobs this server did not submit.
    pub foreign_gpus: BTreeMap<String, u32>,
}

/// The most names one bracketed range of a hostlist expands to: Slurm's own limit on a
/// hostlist range is 64k (`MAX_RANGE` in `hostlist.c`); anything larger is not a hostlist.
const MAX_HOSTLIST_RANGE: u64 = 65_536;

/// Expands a Slurm hostlist (`n[1-3,5],gpu07`) into names, keeping zero padding. Malformed
/// pieces (a `]` before its `[`, a reversed or oversized range) are kept as they are, unexpanded.
pub fn expand_hostlist(list: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    let bytes = list.as_bytes();
    let mut items = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'[' => depth += 1,
            b']' => depth -= 1,
            b',' if depth == 0 => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&list[start..]);
    for item in items.into_iter().map(str::trim).filter(|s| !s.is_empty()) {
        let (Some(open), Some(close)) = (item.find('['), item.rfind(']')) else {
            out.push(item.to_string());
            continue;
        };
        if close < open {
            out.push(item.to_string());
            continue;
        }
        let (prefix, suffix) = (&item[..open], &item[close + 1..]);
        for range in item[open + 1..close].split(',') {
            match range.split_once('-') {
                Some((a, b)) => {
                    let (Ok(lo), Ok(hi)) = (a.parse::<u64>(), b.parse::<u64>()) else {
                        continue;
                    };
                    if hi < lo || hi - lo >= MAX_HOSTLIST_RANGE {
                        out.push(item.to_string());
                        continue;
                    }
                    for v in lo..=hi {
                        out.push(format!("{prefix}{v:0width$}{suffix}", width = a.len()));
                    }
                }
                None => out.push(format!("{prefix}{range}{suffix}")),
            }
        }
    }
    out
}

/// GPUs in a GRES string (`gpu:4`, `gpu:a100:2(S:0-1)`, `gpu:3(IDX:0-2)`, `gres:gpu:2`,
/// `gres/gpu:2`), summed over its comma-separated entries; 0 without GPUs.
pub fn gres_gpus(gres: &str) -> u32 {
    let mut total = 0;
    let mut depth = 0;
    let mut start = 0;
    let mut items = Vec::new();
    for (i, c) in gres.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&gres[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&gres[start..]);
    for item in items {
        let item = item.split('(').next().unwrap_or("").trim();
        let item = item
            .strip_prefix("gres:")
            .or_else(|| item.strip_prefix("gres/"))
            .unwrap_or(item);
        let mut parts = item.split(':');
        if parts.next() != Some("gpu") {
            continue;
        }
        if let Some(n) = parts.next_back().and_then(|n| n.parse::<u32>().ok()) {
            total = u32::saturating_add(total, n);
        }
    }
    total
}

/// The GPU type a GRES string names (`gpu:a100:4(S:0-1)` → `a100`), when every GPU entry names
/// the same one; `None` for untyped GPUs (`gpu:4`) or a node of several types (which dlscale
/// then sees as GPUs of no type).
pub fn gres_gpu_type(gres: &str) -> Option<String> {
    let mut found: Option<&str> = None;
    for item in gres.split(',') {
        let item = item.split('(').next().unwrap_or("").trim();
        let item = item
            .strip_prefix("gres:")
            .or_else(|| item.strip_prefix("gres/"))
            .unwrap_or(item);
        let parts: Vec<&str> = item.split(':').collect();
        match parts.as_slice() {
            ["gpu", gpu_type, count] if count.parse::<u32>().is_ok_and(|n| n > 0) => {
                if found.is_some_and(|f| f != *gpu_type) {
                    return None;
                }
                found = Some(gpu_type);
            }
            ["gpu", count] if count.parse::<u32>().is_ok_and(|n| n > 0) => return None,
            _ => {}
        }
    }
    found
        .filter(|t| dlscale_core::fleet::is_type_name(t))
        .map(str::to_string)
}

/// A number that Slurm's JSON gives plain (22.05) or as `{"set", "number"}` (23.02+).
fn num(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::Object(m) => {
            if m.get("set").and_then(Value::as_bool) == Some(false) {
                return None;
            }
            m.get("number").and_then(Value::as_i64)
        }
        _ => None,
    }
}

/// A state that Slurm's JSON gives as a string (22.05) or a list of flags (23.02+): the base
/// state, and whether it is still completing.
fn state_of(v: &Value) -> (String, bool) {
    match v {
        Value::String(s) => (s.clone(), s == "COMPLETING"),
        Value::Array(items) => {
            let flags: Vec<&str> = items.iter().filter_map(Value::as_str).collect();
            let completing = flags.contains(&"COMPLETING");
            let base = flags.first().copied().unwrap_or("UNKNOWN");
            (base.to_string(), completing)
        }
        _ => ("UNKNOWN".to_string(), false),
    }
}

/// The exit code of a finished job: the raw wait status (22.05) or `{"return_code",
/// "signal"}` (23.02+); negative for a signal.
fn exit_code_of(v: &Value) -> Option<i32> {
    match v {
        Value::Object(m) => {
            let signal = m
                .get("signal")
                .and_then(|s| s.get("id").or(Some(s)))
                .and_then(num)
                .filter(|&s| s > 0)
                .and_then(|s| i32::try_from(s).ok());
            match signal {
                Some(s) => Some(-s),
                None => m.get("return_code").and_then(num).map(|c| c as i32),
            }
        }
        other => {
            let raw = num(other)?;
            let sig = raw & 0x7f;
            Some(if sig != 0 {
                -(sig as i32)
            } else {
                ((raw >> 8) & 0xff) as i32
            })
        }
    }
}

fn str_of(v: Option<&Value>) -> String {
    v.and_then(Value::as_str).unwrap_or("").to_string()
}

/// Parses `squeue --json`: this instance's launches (jobs named by its launch markers and run
/// by `uid`, the server's user: anyone can name a job so, and a look-alike must never stand for
/// a launch) and the GPUs other jobs hold per node.
pub fn parse_squeue(text: &str, instance: &str, uid: u32) -> Result<QueueSnapshot> {
    let doc: Value = serde_json::from_str(text).context("squeue --json printed invalid JSON")?;
    let jobs = doc
        .get("jobs")
        .and_then(Value::as_array)
        .ok_or_else(|| anyhow!("squeue --json printed no 'jobs' array"))?;
    let mut snap = QueueSnapshot::default();
    for j in jobs {
        let Some(job_id) = j
            .get("job_id")
            .and_then(num)
            .and_then(|n| u64::try_from(n).ok())
        else {
            continue;
        };
        let name = str_of(j.get("name"));
        let (state, completing) = state_of(j.get("job_state").unwrap_or(&Value::Null));
        let nodes = str_of(j.get("nodes"));
        // A Slurm without `user_id` in its JSON: the name alone.
        let by_us = j
            .get("user_id")
            .and_then(num)
            .is_none_or(|user| user == i64::from(uid));
        match parse_launch_marker(&name) {
            Some((inst, id, attempt)) if inst == instance && by_us => snap.ours.push(SlurmJob {
                job_id,
                job: id.to_string(),
                attempt,
                state: if completing {
                    "COMPLETING".to_string()
                } else {
                    state
                },
                reason: str_of(j.get("state_reason")),
                restart_cnt: j
                    .get("restart_cnt")
                    .and_then(num)
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(0),
                exit_code: j.get("exit_code").and_then(exit_code_of),
                submit_time: j.get("submit_time").and_then(num),
                nodes,
            }),
            _ => {
                let holds = completing
                    || matches!(
                        state.as_str(),
                        "RUNNING" | "COMPLETING" | "CONFIGURING" | "SUSPENDED" | "STOPPED"
                    );
                if !holds {
                    continue;
                }
                let names = expand_hostlist(&nodes);
                let detail: Vec<u32> = j
                    .get("gres_detail")
                    .and_then(Value::as_array)
                    .map(|d| d.iter().filter_map(Value::as_str).map(gres_gpus).collect())
                    .unwrap_or_default();
                let per_node = gres_gpus(&str_of(j.get("tres_per_node")));
                for (i, node) in names.iter().enumerate() {
                    let gpus = detail.get(i).copied().unwrap_or(per_node);
                    if gpus > 0 {
                        let held = snap.foreign_gpus.entry(node.clone()).or_insert(0);
                        *held = held.saturating_add(gpus);
                    }
                }
            }
        }
    }
    Ok(snap)
}

/// Node states and flags under which dlscale places nothing on a node.
const UNUSABLE: [&str; 14] = [
    "DOWN",
    "DRAIN",
    "DRAINED",
    "DRAINING",
    "FAIL",
    "FAILING",
    "FUTURE",
    "INVALID",
    "MAINTENANCE",
    "NOT_RESPONDING",
    "POWERED_DOWN",
    "POWERING_DOWN",
    "REBOOT_REQUESTED",
    "UNKNOWN",
];

/// Parses `sinfo --json` into the partition's usable nodes with their GPUs (foreign jobs not
/// yet subtracted), in Slurm's order. `only`: keep just these nodes (an unknown name is an error).
pub fn parse_sinfo(text: &str, partition: &str, only: Option<&[String]>) -> Result<Vec<NodeInfo>> {
    let doc: Value = serde_json::from_str(text).context("sinfo --json printed invalid JSON")?;
    let nodes = doc
        .get("nodes")
        .and_then(Value::as_array)
        .ok_or_else(|| anyhow!("sinfo --json printed no 'nodes' array"))?;
    let mut usable = Vec::new();
    let mut seen = Vec::new();
    for n in nodes {
        let name = str_of(n.get("name"));
        if name.is_empty() || seen.contains(&name) {
            continue;
        }
        let in_partition = n
            .get("partitions")
            .and_then(Value::as_array)
            .is_some_and(|ps| ps.iter().any(|p| p.as_str() == Some(partition)));
        if !in_partition {
            continue;
        }
        seen.push(name.clone());
        if only.is_some_and(|only| !only.contains(&name)) {
            continue;
        }
        let mut states: Vec<String> = match n.get("state") {
            Some(Value::String(s)) => vec![s.to_uppercase()],
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_uppercase)
                .collect(),
            _ => Vec::new(),
        };
        if let Some(flags) = n.get("state_flags").and_then(Value::as_array) {
            states.extend(
                flags
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_uppercase),
            );
        }
        // sinfo marks some states with a suffix (`idle*` = not responding, `mix~` = powered off).
        let up = !states.is_empty()
            && states.iter().all(|s| {
                !UNUSABLE.contains(&s.as_str()) && !s.ends_with(|c: char| "*~#!%$@^-".contains(c))
            });
        let gres = str_of(n.get("gres"));
        let gpus = gres_gpus(&gres);
        if !up || gpus == 0 {
            continue;
        }
        let addr = Some(str_of(n.get("address")))
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| name.clone());
        usable.push(NodeInfo {
            name,
            total_gpus: gpus,
            addr,
            gpu_type: gres_gpu_type(&gres),
        });
    }
    if seen.is_empty() {
        bail!("sinfo shows no node in partition '{partition}'");
    }
    if let Some(only) = only {
        let missing: Vec<&String> = only.iter().filter(|n| !seen.contains(n)).collect();
        if !missing.is_empty() {
            bail!(
                "configured nodes {missing:?} are not in partition '{partition}' (it has {seen:?})"
            );
        }
    }
    Ok(usable)
}

/// One queue snapshot, read for the autoscaler.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// What the autoscaler is told.
    pub observation: Observation,
    /// Slurm jobs to cancel: duplicates of a launch (the one dlscale knows, else the oldest,
    /// stands for it), with why.
    pub duplicates: Vec<(u64, String)>,
    /// The Slurm job that stands for each live launch.
    pub handles: BTreeMap<(String, u32), u64>,
}

/// Interprets this server's Slurm jobs (`ours`, from a snapshot started at `taken_at_s`) for the
/// autoscaler: each launch's state (pending since its submission, requeued, running, ended with
/// its outcome), how `believed` launches Slurm no longer shows ended (`exit_of`: the exit code
/// their batch script recorded), and duplicates to cancel. `known`: the Slurm job dlscale
/// submitted for a launch, where it knows it.
pub fn interpret(
    ours: &[SlurmJob],
    believed: &[(String, u32)],
    known: &BTreeMap<(String, u32), u64>,
    exit_of: impl Fn(&str, u32) -> Option<i32>,
    taken_at_s: f64,
) -> Reading {
    let mut by_launch: BTreeMap<(String, u32), Vec<&SlurmJob>> = BTreeMap::new();
    for j in ours {
        by_launch
            .entry((j.job.clone(), j.attempt))
            .or_default()
            .push(j);
    }
    let mut reading = Reading {
        observation: Observation {
            taken_at_s,
            asked: believed.to_vec(),
            launches: Vec::new(),
        },
        ..Reading::default()
    };
    for (key, mut jobs) in by_launch {
        let standing = known.get(&key).copied();
        jobs.sort_by_key(|j| (Some(j.job_id) != standing, j.job_id));
        let current = jobs[0];
        for dup in jobs[1..].iter().filter(|d| !d.is_terminal()) {
            reading.duplicates.push((
                dup.job_id,
                format!(
                    "a duplicate of Slurm job {} for launch {} of {}",
                    current.job_id, key.1, key.0
                ),
            ));
        }
        let state = match current.state.as_str() {
            s if is_terminal_state(s) => LaunchState::Ended {
                outcome: current.outcome(exit_of(&key.0, key.1)),
            },
            "PENDING" | "CONFIGURING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" => {
                LaunchState::Pending {
                    since_s: current.submit_time.map_or(taken_at_s, |t| t as f64),
                    requeued: current.restart_cnt > 0,
                }
            }
            _ => LaunchState::Running,
        };
        if !matches!(state, LaunchState::Ended { .. }) {
            reading.handles.insert(key.clone(), current.job_id);
        }
        reading.observation.launches.push(ObservedLaunch {
            id: key.0.clone(),
            attempt: key.1,
            state,
        });
    }
    for (id, attempt) in believed {
        let seen = reading
            .observation
            .launches
            .iter()
            .any(|l| &l.id == id && l.attempt == *attempt);
        if seen {
            continue;
        }
        // Gone from squeue (it ended longer ago than MinJobAge): its recorded exit code, or
        // nothing (the autoscaler then counts it lost).
        if let Some(code) = exit_of(id, *attempt) {
            reading.observation.launches.push(ObservedLaunch {
                id: id.clone(),
                attempt: *attempt,
                state: LaunchState::Ended {
                    outcome: Outcome::Exited(code),
                },
            });
        }
    }
    reading
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostlists_and_gres() {
        assert_eq!(expand_hostlist("n[1-2]"), ["n1", "n2"]);
        assert_eq!(
            expand_hostlist("gpu[08-10,12],cpu5"),
            ["gpu08", "gpu09", "gpu10", "gpu12", "cpu5"]
        );
        assert_eq!(expand_hostlist(""), Vec::<String>::new());
        assert_eq!(gres_gpus("gpu:4"), 4);
        assert_eq!(gres_gpus("gpu:a100:2(S:0-1),mps:100"), 2);
        assert_eq!(gres_gpus("gpu:3(IDX:0-2)"), 3);
        assert_eq!(gres_gpus("gres:gpu:2"), 2);
        assert_eq!(gres_gpus("gres/gpu:1"), 1);
        assert_eq!(gres_gpus("(null)"), 0);
        assert_eq!(gres_gpus("gpu:0"), 0);
        assert_eq!(
            gres_gpu_type("gpu:a100:2(S:0-1),mps:100").as_deref(),
            Some("a100")
        );
        assert_eq!(
            gres_gpu_type("gres/gpu:t4:4,gpu:t4:2").as_deref(),
            Some("t4")
        );
        for untyped in [
            "gpu:4",
            "gpu:a100:2,gpu:t4:2",
            "gpu:t4:2,gpu:1",
            "gpu:A100:2",
            "(null)",
        ] {
            assert_eq!(gres_gpu_type(untyped), None, "{untyped}");
        }
    }

    /// Odd values Slurm should not print but a fuzzer does: no panic, no overflow, no huge
    /// expansion.
    #[test]
    fn odd_hostlists_gres_and_exit_codes_are_read_without_panic() {
        assert_eq!(expand_hostlist("]["), ["]["]);
        assert_eq!(expand_hostlist("n[5-1]"), ["n[5-1]"]);
        assert_eq!(expand_hostlist("n[0-99999999999]"), ["n[0-99999999999]"]);
        assert_eq!(expand_hostlist("n[0-65535]").len(), 65_536);
        assert_eq!(gres_gpus("gpu:4294967295,gpu:1"), u32::MAX);
        let signal = |n: i64| serde_json::json!({"signal": {"id": n}, "return_code": 0});
        assert_eq!(exit_code_of(&signal(2_147_483_648)), Some(0));
        assert_eq!(exit_code_of(&signal(9)), Some(-9));
        let queue = |job: serde_json::Value| {
            parse_squeue(&serde_json::json!({"jobs": [job]}).to_string(), "i1", 0).unwrap()
        };
        let q = queue(serde_json::json!({"job_id": -5, "name": "dlscale:i1:a:1"}));
        assert!(q.ours.is_empty(), "a negative job id is no job: {q:?}");
        let q =
            queue(serde_json::json!({"job_id": 5, "name": "dlscale:i1:a:1", "restart_cnt": -1}));
        assert_eq!(q.ours[0].restart_cnt, 0);
        let q = queue(
            serde_json::json!({"job_id": 5, "name": "x", "job_state": "RUNNING",
            "nodes": "n1", "gres_detail": ["gpu:4294967295"], "tres_per_node": "gpu:1"}),
        );
        assert_eq!(q.foreign_gpus["n1"], u32::MAX);
    }

    #[test]
    fn exit_codes_of_both_json_flavours() {
        assert_eq!(exit_code_of(&serde_json::json!(35072)), Some(137));
        assert_eq!(exit_code_of(&serde_json::json!(15)), Some(-15));
        assert_eq!(exit_code_of(&serde_json::json!(0)), Some(0));
        assert_eq!(
            exit_code_of(
                &serde_json::json!({"status": ["EXITED"], "return_code": {"set": true, "number": 75}, "signal": {"id": {"set": false, "number": 0}}})
            ),
            Some(75)
        );
    }

    #[test]
    fn parses_squeue_for_ours_and_foreign_gpus() {
        let text = serde_json::json!({"jobs": [
            {"job_id": 5, "name": "dlscale:i1:a:2", "job_state": "RUNNING", "state_reason": "None",
             "nodes": "n[1-2]", "gres_detail": ["gpu:4(IDX:0-3)", "gpu:4(IDX:0-3)"], "restart_cnt": 0,
             "exit_code": 0, "submit_time": 100, "user_id": 1000},
            // Another user's job under this instance's marker: theirs, not a launch.
            {"job_id": 4, "name": "dlscale:i1:a:2", "job_state": "RUNNING", "nodes": "n2",
             "gres_detail": ["gpu:1(IDX:0)"], "user_id": 1001},
            {"job_id": 6, "name": "dlscale:other:a:2", "job_state": "RUNNING", "nodes": "n1",
             "gres_detail": ["gpu:1(IDX:0)"], "tres_per_node": "gres:gpu:1"},
            {"job_id": 7, "name": "user", "job_state": "COMPLETING", "nodes": "n2",
             "gres_detail": [], "tres_per_node": "gres:gpu:2"},
            {"job_id": 8, "name": "user", "job_state": "PENDING", "nodes": "",
             "tres_per_node": "gres:gpu:4"},
            {"job_id": 9, "name": "dlscale:i1:b:1", "job_state": "FAILED", "state_reason": "NonZeroExitCode",
             "nodes": "n1", "exit_code": 19200}
        ]})
        .to_string();
        let snap = parse_squeue(&text, "i1", 1000).unwrap();
        assert_eq!(snap.ours.len(), 2);
        assert_eq!(snap.ours[0].job_id, 5);
        assert_eq!((snap.ours[0].job.as_str(), snap.ours[0].attempt), ("a", 2));
        assert!(!snap.ours[0].is_terminal());
        assert_eq!(snap.ours[1].outcome(None), Outcome::Exited(75));
        assert_eq!(snap.ours[1].outcome(Some(3)), Outcome::Exited(3));
        assert_eq!(
            snap.foreign_gpus,
            BTreeMap::from([("n1".to_string(), 1), ("n2".to_string(), 3)])
        );
    }

    #[test]
    fn parses_sinfo_partition_and_states() {
        let node = |name: &str, state: &str, flags: &[&str], part: &str| {
            serde_json::json!({"name": name, "state": state, "state_flags": flags,
                               "partitions": [part], "gres": "gpu:4", "address": "10.0.0.1"})
        };
        let text = serde_json::json!({"nodes": [
            node("n1", "idle", &[], "gpu"), node("n2", "mixed", &["DRAIN"], "gpu"),
            node("n3", "down", &[], "gpu"), node("n4", "allocated", &[], "gpu"),
            node("c1", "idle", &[], "cpu")]})
        .to_string();
        let t = parse_sinfo(&text, "gpu", None).unwrap();
        let names: Vec<&str> = t.iter().map(|n| &*n.name).collect();
        assert_eq!(names, ["n1", "n4"]);
        assert_eq!(t[0].addr, "10.0.0.1");
        assert_eq!(t[0].gpu_type, None);
        // Typed GRES: each node's type.
        let typed = serde_json::json!({"nodes": [
            {"name": "t1", "state": "idle", "partitions": ["gpu"], "gres": "gpu:t4:4(S:0)"},
            {"name": "a1", "state": "idle", "partitions": ["gpu"], "gres": "gpu:a100:2"}]})
        .to_string();
        let t = parse_sinfo(&typed, "gpu", None).unwrap();
        let types: Vec<(u32, Option<&str>)> = t
            .iter()
            .map(|n| (n.total_gpus, n.gpu_type.as_deref()))
            .collect();
        assert_eq!(types, [(4, Some("t4")), (2, Some("a100"))]);
        let only = parse_sinfo(&text, "gpu", Some(&["n4".to_string()])).unwrap();
        assert_eq!(only.len(), 1);
        let err = parse_sinfo(&text, "gpu", Some(&["zz".to_string()])).unwrap_err();
        assert!(err.to_string().contains("not in partition"), "{err}");
        assert!(parse_sinfo(&text, "nope", None).is_err());
    }

    /// A real `squeue --json` of Slurm 22.05 (scripts/slurm-local.sh, two nodes × 4 fake GPUs) with
    /// this server's (instance `ab12`) launches in every state: `train:3` running as job 26 and
    /// requeued as job 31 (a duplicate), `bad:1` failed with exit 3, `done:2` completed, `wide:1`
    /// pending, `gone:1` cancelled outside dlscale; and a foreign job holding a GPU of n2.
    const SQUEUE: &str = include_str!("../../tests/data/squeue-22.05.json");

    #[test]
    fn interprets_a_recorded_queue_for_the_autoscaler() {
        let snap = parse_squeue(SQUEUE, "ab12", 0).unwrap();
        assert_eq!(snap.ours.len(), 6);
        assert_eq!(snap.foreign_gpus, BTreeMap::from([("n2".to_string(), 1)]));
        let known = BTreeMap::from([(("train".to_string(), 3), 26)]);
        let believed = [
            ("train".to_string(), 3),
            ("bad".to_string(), 1),
            ("lost".to_string(), 4),
            ("recorded".to_string(), 2),
        ];
        let exit_of = |id: &str, _: u32| (id == "recorded").then_some(0);
        let r = interpret(&snap.ours, &believed, &known, exit_of, 1_796_123_800.0);
        let state = |id: &str, attempt: u32| {
            r.observation
                .launches
                .iter()
                .find(|l| l.id == id && l.attempt == attempt)
                .map(|l| l.state.clone())
        };
        assert_eq!(state("train", 3), Some(LaunchState::Running));
        assert_eq!(r.duplicates.len(), 1);
        assert_eq!(
            r.duplicates[0].0, 31,
            "the requeued copy goes, the known job stays"
        );
        assert_eq!(
            state("bad", 1),
            Some(LaunchState::Ended {
                outcome: Outcome::Exited(3)
            })
        );
        assert_eq!(
            state("done", 2),
            Some(LaunchState::Ended {
                outcome: Outcome::Exited(0)
            })
        );
        assert_eq!(
            state("gone", 1),
            Some(LaunchState::Ended {
                outcome: Outcome::CancelledOutside
            })
        );
        assert!(matches!(
            state("wide", 1),
            Some(LaunchState::Pending {
                requeued: false,
                ..
            })
        ));
        // Gone from squeue: its recorded exit code, or nothing (counted lost by the autoscaler).
        assert_eq!(
            state("recorded", 2),
            Some(LaunchState::Ended {
                outcome: Outcome::Exited(0)
            })
        );
        assert_eq!(state("lost", 4), None);
        assert_eq!(r.handles.get(&("train".to_string(), 3)), Some(&26));
        // Without a known job, the oldest stands for the launch; the requeued one is a duplicate.
        let r = interpret(&snap.ours, &[], &BTreeMap::new(), |_, _| None, 0.0);
        assert_eq!(r.duplicates[0].0, 31);
        // The requeued copy alone: pending and requeued.
        let requeued: Vec<SlurmJob> = snap
            .ours
            .iter()
            .filter(|j| j.job_id == 31)
            .cloned()
            .collect();
        let r = interpret(&requeued, &[], &BTreeMap::new(), |_, _| None, 0.0);
        assert!(matches!(
            r.observation.launches[0].state,
            LaunchState::Pending { requeued: true, .. }
        ));
    }

    #[test]
    fn reads_a_recorded_sinfo() {
        let nodes = parse_sinfo(
            include_str!("../../tests/data/sinfo-22.05.json"),
            "gpu",
            None,
        )
        .unwrap();
        assert_eq!(
            nodes,
            [
                NodeInfo {
                    name: "n1".into(),
                    total_gpus: 4,
                    addr: "127.0.0.1".into(),
                    gpu_type: None,
                },
                NodeInfo {
                    name: "n2".into(),
                    total_gpus: 4,
                    addr: "127.0.0.1".into(),
                    gpu_type: None,
                },
            ]
        );
    }
}
