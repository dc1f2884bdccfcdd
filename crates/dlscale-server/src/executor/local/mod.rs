//! The local executor: runs each job launch on this machine in its own process group and signals,
//! watches and re-attaches to it.
//!
//! Every launch runs under a small `sh` wrapper that leads the process group and, when the job's
//! command exits, writes its exit code to `<run_dir>/exit`. The server writes the wrapper's pid
//! (the group id) to `<run_dir>/pid` right after starting it; should it crash before that, the
//! launch is still found by its run directory in the wrapper's command line ([`find_launch`]). The
//! wrapper survives SIGTERM (it only waits), so a server that restarted after a crash — and is no
//! longer the parent — still learns how a re-attached job ended. Output goes straight to the
//! job's log file, never through a pipe to the server, so jobs outlive the server.
//!
//! A launch is more than its process group: torchrun starts every worker in a session of its own,
//! and a worker may fork daemons that re-parent to PID 1. Every process of a launch inherits the
//! launch's marker in its environment (`DLSCALE_LAUNCH`, see [`super::launch_marker`]), so
//! [`launch_processes`] finds all of them however they regrouped, [`kill_launch`] ends them all,
//! and a launch counts as over (its GPUs free) only when none is left.
//!
//! The machine's slots may be of several GPU types (`slot_types` in the configuration, else the
//! names nvidia-smi gives): the machine is then one node per type ([`nodes_of`]), and a launch
//! takes free slots of the node(s) its shape names only, so that its `CUDA_VISIBLE_DEVICES` holds
//! devices of the type the autoscaler chose. Slots are device ids either way: a launch found
//! again after a restart holds the ids in its environment, whatever node they belong to.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use dlscale_autoscaler::{
    Input, LaunchSpec, LaunchState, Observation, ObservedLaunch, Outcome, Shape,
};
use dlscale_core::placement::Share;

use super::{
    find_program, launch_marker, lock, parse_launch_marker, read_exit, worker_env, Believed,
    Capacity, ClusterError, EngineId, ExecContext, Executor, Handle, JobFiles, LaunchJob, NodeInfo,
    Reports, Slots,
};
use crate::fault;

mod settings;
pub use settings::{LocalConfig, LocalKind, KIND, NAME};

/// What a [`Handle`] calls a launch's id here: the process group of its wrapper.
pub const ENGINE_ID: &str = "pgid";
use crate::spec::{JobSpec, Launcher};

const WRAPPER: &str = r#"dir="$1"; shift
"$@" &
child=$!
trap ':' TERM INT HUP
while :; do
  wait "$child"; rc=$?
  kill -0 "$child" 2>/dev/null || break
done
printf '%s\n' "$rc" > "$dir/exit.tmp" && mv -f "$dir/exit.tmp" "$dir/exit"
exit "$rc"
"#;

/// Finds the machine's GPUs and their types with
/// `nvidia-smi --query-gpu=index,name --format=csv,noheader` ([`parse_gpus`]).
pub fn detect_gpus() -> Option<Vec<Slot>> {
    let out = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=index,name", "--format=csv,noheader"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let gpus = parse_gpus(&String::from_utf8_lossy(&out.stdout));
    (!gpus.is_empty()).then_some(gpus)
}

/// The GPUs of nvidia-smi's `index, name` lines, each typed by its name ([`gpu_type_of_name`]);
/// a line without an index is skipped.
pub fn parse_gpus(csv: &str) -> Vec<Slot> {
    csv.lines()
        .filter_map(|line| {
            let (index, name) = line.split_once(',').unwrap_or((line, ""));
            Some(Slot {
                id: index.trim().parse().ok()?,
                gpu_type: gpu_type_of_name(name),
            })
        })
        .collect()
}

/// Words of a GPU's name that say whose it is or its product line, not its model.
const BRAND_WORDS: [&str; 4] = ["nvidia", "tesla", "geforce", "quadro"];
/// Words that are a model's name only with the number after them (`RTX 4090`).
const SERIES_WORDS: [&str; 2] = ["rtx", "gtx"];
/// Words after such a number that make another model of it (`RTX 3090 Ti`).
const VARIANT_WORDS: [&str; 2] = ["ti", "super"];

/// The GPU type a GPU's name (as nvidia-smi gives it) names, as jobs name types: its model, in
/// lower case, without the brand, form factor or memory (`NVIDIA A100-SXM4-80GB` → `a100`,
/// `Tesla T4` → `t4`, `NVIDIA GeForce RTX 4090` → `rtx4090`). `None` for a name that holds no
/// model of letters then digits (`Graphics Device`): such a GPU is of no named type.
pub fn gpu_type_of_name(name: &str) -> Option<String> {
    let lower = name.to_lowercase();
    let mut words = lower
        .split_whitespace()
        .filter(|w| !BRAND_WORDS.contains(w))
        .peekable();
    // The model ends where its form factor or memory starts (`a100-sxm4-80gb`).
    let model_of = |word: &str| word.split('-').next().unwrap_or_default().to_string();
    let mut model = model_of(words.next()?);
    if SERIES_WORDS.contains(&model.as_str()) {
        model.push_str(&model_of(words.next()?));
        if let Some(variant) = words.next_if(|w| VARIANT_WORDS.contains(w)) {
            model.push_str(variant);
        }
    }
    let is_model = model.starts_with(|c: char| c.is_ascii_lowercase())
        && model.contains(|c: char| c.is_ascii_digit())
        && model.chars().all(|c| c.is_ascii_alphanumeric());
    is_model.then_some(model)
}

/// The node of the local executor when the machine's slots are of one kind (one GPU type, or
/// none named), and of its untyped slots when some are typed.
pub const NODE: &str = "local";

/// One device slot of this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// Its device id, as `CUDA_VISIBLE_DEVICES` names it.
    pub id: u32,
    /// Its GPU type (lower case), when it is known.
    pub gpu_type: Option<String>,
}

impl Slot {
    /// Slots `0..count`, of no named type.
    pub fn untyped(count: u32) -> Vec<Slot> {
        (0..count).map(|id| Slot { id, gpu_type: None }).collect()
    }
}

/// The slots of one GPU type: one node of the topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalNode {
    /// Its name in the topology and in launches' shares.
    pub name: String,
    /// Its slots' GPU type.
    pub gpu_type: Option<String>,
    /// Its slots' device ids, in slot order.
    pub slots: Vec<u32>,
}

/// The machine's slots as nodes, one per GPU type in the order the slots first show it: the one
/// node [`NODE`] when they are all of one kind (so that a machine of one type keeps the node its
/// launches were placed on before it was typed), else `local-<type>` per type and [`NODE`] for
/// the slots of no named type.
pub fn nodes_of(slots: &[Slot]) -> Vec<LocalNode> {
    let mut nodes: Vec<LocalNode> = Vec::new();
    for slot in slots {
        match nodes.iter_mut().find(|n| n.gpu_type == slot.gpu_type) {
            Some(node) => node.slots.push(slot.id),
            None => nodes.push(LocalNode {
                name: slot
                    .gpu_type
                    .as_ref()
                    .map_or_else(|| NODE.to_string(), |t| format!("{NODE}-{t}")),
                gpu_type: slot.gpu_type.clone(),
                slots: vec![slot.id],
            }),
        }
    }
    if let [only] = nodes.as_mut_slice() {
        only.name = NODE.to_string();
    }
    nodes
}

/// The nodes in one short line, for the log at the start: each node's name, type, number of
/// slots and their ids as ranges ([`slot_ranges`]), never every id of a machine that may have
/// up to 1,048,576 slots (`local (1048576 slots: 0-1048575)`).
pub fn nodes_summary(nodes: &[LocalNode]) -> String {
    let nodes: Vec<String> = nodes
        .iter()
        .map(|n| {
            let count = match n.slots.len() {
                1 => "1 slot".to_string(),
                k => format!("{k} slots"),
            };
            let slots = format!("{count}: {}", slot_ranges(&n.slots));
            match &n.gpu_type {
                Some(t) => format!("{} ({t}: {slots})", n.name),
                None => format!("{} ({slots})", n.name),
            }
        })
        .collect();
    nodes.join(", ")
}

/// Slot ids as their runs of consecutive ids (`0-3, 8, 10-11`): the first
/// [`SLOT_RUNS_SHOWN`], then how many more there are and the last id.
fn slot_ranges(ids: &[u32]) -> String {
    let mut shown: Vec<(u32, u32)> = Vec::new();
    let mut more = 0usize;
    let mut previous: Option<u32> = None;
    for &id in ids {
        let continues = previous.and_then(|p| p.checked_add(1)) == Some(id);
        previous = Some(id);
        if !continues {
            // A run past those shown is only counted.
            if shown.len() < SLOT_RUNS_SHOWN {
                shown.push((id, id));
            } else {
                more += 1;
            }
        } else if let Some((_, end)) = shown.last_mut().filter(|_| more == 0) {
            *end = id;
        }
    }
    let mut text: Vec<String> = shown
        .iter()
        .map(|&(start, end)| match end - start {
            0 => start.to_string(),
            _ => format!("{start}-{end}"),
        })
        .collect();
    if let (true, Some(last)) = (more > 0, previous) {
        text.push(format!("… and {more} more run(s), up to {last}"));
    }
    text.join(", ")
}

/// How many runs of slot ids [`nodes_summary`] shows before it counts the rest.
const SLOT_RUNS_SHOWN: usize = 4;

/// `slots` with the types of `types` (`slot_types`, one per slot), where given; `counted_by`
/// says where the slots came from, for the error when the counts differ.
fn with_types(slots: Vec<Slot>, types: Option<&[String]>, counted_by: &str) -> Result<Vec<Slot>> {
    let Some(types) = types else {
        return Ok(slots);
    };
    if types.len() != slots.len() {
        bail!(
            "slot_types names {} GPU type(s) but {counted_by} {}: one type per slot",
            types.len(),
            slots.len()
        );
    }
    Ok(slots
        .into_iter()
        .zip(types)
        .map(|(slot, t)| Slot {
            gpu_type: Some(t.clone()),
            ..slot
        })
        .collect())
}

/// What the local executor tracks of a live launch.
#[derive(Debug, Clone, Default)]
struct Tracked {
    /// Process group of its wrapper, once it is known.
    pgid: Option<i32>,
    /// Device ids it holds (`CUDA_VISIBLE_DEVICES`).
    slots: Vec<u32>,
}

/// The local executor: a fixed set of device slots on this machine.
#[derive(Debug)]
pub struct LocalExecutor {
    /// Context of every launch.
    pub ctx: ExecContext,
    /// Its slots (GPUs), in slot order.
    pub slots: Vec<Slot>,
    /// Whether the slots are GPUs found by nvidia-smi.
    pub gpus_detected: bool,
    /// Live launches: their slots and process group.
    live: Arc<Mutex<BTreeMap<(String, u32), Tracked>>>,
    /// Launches this process started and still waits for: tracked even before a scan sees them.
    waited: Arc<Mutex<BTreeSet<(String, u32)>>>,
    reports: Reports,
}

impl LocalExecutor {
    /// The executor of `config`: its `slots`, or the GPUs `nvidia-smi` finds (an error when
    /// there are none), typed by its `slot_types` or else by the names nvidia-smi gives. A
    /// torchrun (`ctx.torchrun`) that cannot be found is only warned about: a server may run
    /// plain jobs only (torchrun jobs then fail saying why).
    pub fn from_config(config: &LocalConfig, ctx: ExecContext, reports: Reports) -> Result<Self> {
        let torchrun = ctx.torchrun.to_string_lossy();
        let path = std::env::var_os("PATH");
        if let Err(e) = find_program(&torchrun, path.as_deref(), std::path::Path::new("/")) {
            tracing::warn!(
                "{e}: jobs with launcher \"torchrun\" cannot start; set torchrun = PATH in the \
                 configuration (or --torchrun PATH)"
            );
        }
        let (slots, gpus_detected, counted_by) = match config.slots {
            Some(n) => (Slot::untyped(n), false, "slots is"),
            None => match detect_gpus() {
                Some(gpus) => (gpus, true, "nvidia-smi found"),
                None => anyhow::bail!(
                    "no GPUs found with nvidia-smi; give the number of slots to schedule with \
                     --slots N (or slots = N in the config)"
                ),
            },
        };
        let slots = with_types(slots, config.slot_types.as_deref(), counted_by)?;
        tracing::info!("local executor: {}", nodes_summary(&nodes_of(&slots)));
        Ok(LocalExecutor::new(ctx, slots, gpus_detected, reports))
    }

    /// An executor over `slots`; launches that end are reported to `reports`.
    pub fn new(ctx: ExecContext, slots: Vec<Slot>, gpus_detected: bool, reports: Reports) -> Self {
        LocalExecutor {
            ctx,
            slots,
            gpus_detected,
            live: Arc::new(Mutex::new(BTreeMap::new())),
            waited: Arc::new(Mutex::new(BTreeSet::new())),
            reports,
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, u32), Tracked>> {
        lock(&self.live)
    }

    /// Takes, for launch `key`, each share's GPUs from the first slots of its node that no live
    /// launch holds, under one lock: of launches dispatched at once, each gets slots of its own,
    /// and a launch on one GPU type's node gets slots of that type only. When a node has fewer
    /// free, or a share names no node of this machine, nothing is taken and the error says why.
    fn reserve_slots(&self, key: &(String, u32), shares: &[Share]) -> Result<Vec<u32>> {
        let nodes = nodes_of(&self.slots);
        let mut live = self.live();
        let busy: BTreeSet<u32> = live
            .values()
            .flat_map(|h| h.slots.iter().copied())
            .collect();
        let mut slots: Vec<u32> = Vec::new();
        for share in shares {
            let node = nodes
                .iter()
                .find(|n| *n.name == *share.node)
                .ok_or_else(|| {
                    let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
                    anyhow!(
                        "node {} is not one of this machine's ({})",
                        share.node,
                        names.join(", ")
                    )
                })?;
            let free: Vec<u32> = node
                .slots
                .iter()
                .copied()
                .filter(|s| !busy.contains(s) && !slots.contains(s))
                .collect();
            let wanted = share.gpus as usize;
            if free.len() < wanted {
                // Held by a launch being ended (one found stale, say): not the job's doing.
                return Err(ClusterError(format!(
                    "{wanted} slot(s) asked for on {}, {} free",
                    share.node,
                    free.len()
                ))
                .into());
            }
            slots.extend(&free[..wanted]);
        }
        if slots.is_empty() {
            bail!("the launch names no GPUs of any node");
        }
        live.insert(
            key.clone(),
            Tracked {
                pgid: None,
                slots: slots.clone(),
            },
        );
        Ok(slots)
    }

    /// Whether process group `pgid`, kept for launch `attempt` of `id`, still holds one of that
    /// launch's processes. Once they have all ended the group id is free, and the system may
    /// give it to other processes: a signal to it would then reach them.
    async fn group_is_launch(&self, pgid: i32, id: &str, attempt: u32) -> bool {
        let marker = launch_marker(&self.ctx.instance, id, attempt);
        tokio::task::spawn_blocking(move || group_holds_launch(pgid, &marker))
            .await
            .unwrap_or(false)
    }
}

#[async_trait::async_trait]
impl Executor for LocalExecutor {
    fn name(&self) -> &'static str {
        NAME
    }

    fn ctx(&self) -> &ExecContext {
        &self.ctx
    }

    /// torchrun jobs, while the torchrun it runs cannot be found (looked up again at each
    /// submission: it may be installed while the server runs).
    fn cannot_launch(&self, launcher: crate::spec::Launcher) -> Option<String> {
        if launcher != crate::spec::Launcher::Torchrun {
            return None;
        }
        let torchrun = self.ctx.torchrun.to_string_lossy();
        let path = std::env::var_os("PATH");
        find_program(&torchrun, path.as_deref(), std::path::Path::new("/"))
            .err()
            .map(|e| {
                format!(
                    "this server cannot start torchrun jobs: {e} (its configuration's torchrun \
                     = PATH, or serve --torchrun PATH, names one)"
                )
            })
    }

    fn poll_interval(&self) -> Duration {
        Duration::from_millis(1000)
    }

    fn slots(&self) -> Option<Slots> {
        Some(Slots {
            ids: self.slots.iter().map(|s| s.id).collect(),
            detected: self.gpus_detected,
        })
    }

    /// This machine as one node per GPU type of its slots ([`nodes_of`]).
    async fn capacity(&self) -> Result<Capacity> {
        Ok(Capacity::whole(
            nodes_of(&self.slots)
                .into_iter()
                .map(|n| NodeInfo {
                    total_gpus: n.slots.len() as u32,
                    name: n.name,
                    addr: "127.0.0.1".to_string(),
                    gpu_type: n.gpu_type,
                })
                .collect(),
        ))
    }

    /// The slots and process group of each live launch.
    fn handles(&self) -> BTreeMap<(String, u32), Handle> {
        self.live()
            .iter()
            .map(|(key, t)| {
                let handle = Handle {
                    slots: t.slots.clone(),
                    engine_id: t.pgid.map(|g| EngineId::new(ENGINE_ID, g)),
                };
                (key.clone(), handle)
            })
            .collect()
    }

    /// Sends SIGTERM to launch `attempt` of `id`; `false` when it is not known here (yet: the
    /// next observation finds it, and the stop is asked for again).
    async fn stop(&self, id: &str, attempt: u32, _job: Option<&LaunchJob>) -> Result<bool> {
        let pgid = self
            .live()
            .get(&(id.to_string(), attempt))
            .and_then(|h| h.pgid);
        match pgid {
            Some(g) => {
                if self.group_is_launch(g, id, attempt).await {
                    signal_group(g, libc::SIGTERM)
                        .with_context(|| format!("cannot signal process group {g}"))?;
                }
                // Else none of its processes is left in it: it has ended, and its waiter or the
                // next observation says how.
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Ends every process of launch `attempt` of `id`.
    async fn kill(&self, id: &str, attempt: u32) {
        let pgid = self
            .live()
            .get(&(id.to_string(), attempt))
            .and_then(|h| h.pgid);
        if let Some(pgid) = pgid {
            if self.group_is_launch(pgid, id, attempt).await {
                let _ = signal_group(pgid, libc::SIGKILL);
            }
        }
        let marker = launch_marker(&self.ctx.instance, id, attempt);
        let left = tokio::task::spawn_blocking(move || kill_launch(&marker))
            .await
            .unwrap_or(1);
        if left > 0 {
            tracing::error!("job {id}: {left} process(es) of launch {attempt} survive SIGKILL");
        }
    }

    /// Starts a launch on free slots; a waiter reports its end.
    async fn launch(&self, l: &LaunchSpec, job: &LaunchJob) -> Result<()> {
        // Before the spawn: an observation taken meanwhile must not report it ended (nor drop
        // the slots it holds).
        let key = (l.id.clone(), l.attempt);
        lock(&self.waited).insert(key.clone());
        let slots = match self.reserve_slots(&key, &l.shape.shares) {
            Ok(slots) => slots,
            Err(e) => {
                lock(&self.waited).remove(&key);
                return Err(e);
            }
        };
        let plan = plan(
            &job.spec, l.attempt, &l.shape, &slots, &job.token, &self.ctx,
        );
        let header = format!(
            "dlscale-server: launch {} of {}: {} workers, batch {} ({} per worker), slots {slots:?}: {:?}",
            l.attempt, l.id, l.shape.gpus, l.shape.batch_size, l.shape.local_batch_size, plan.argv
        );
        let spawned = tokio::task::spawn_blocking(move || spawn(&plan, &header))
            .await
            .context("launch task failed")
            .and_then(|r| r);
        let unreserve = || {
            self.live().remove(&key);
            lock(&self.waited).remove(&key);
        };
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                unreserve();
                return Err(e);
            }
        };
        let Some(pid) = child.id() else {
            unreserve();
            anyhow::bail!("the launched process has no pid");
        };
        let pgid = pid as i32;
        self.live().insert(
            (l.id.clone(), l.attempt),
            Tracked {
                pgid: Some(pgid),
                slots,
            },
        );
        fault::point("after-spawn");
        let (id, attempt) = (l.id.clone(), l.attempt);
        let marker = launch_marker(&self.ctx.instance, &id, attempt);
        let reports = self.reports.clone();
        let live = Arc::clone(&self.live);
        let waited = Arc::clone(&self.waited);
        tokio::spawn(async move {
            let outcome = match child.wait().await {
                Ok(status) => Outcome::Exited(status_code(status)),
                Err(err) => {
                    tracing::error!("job {id}: cannot wait for launch {attempt}: {err}");
                    Outcome::Vanished
                }
            };
            reap(&id, attempt, marker).await;
            // Its slots are free only now that none of its processes is left.
            lock(&live).remove(&(id.clone(), attempt));
            lock(&waited).remove(&(id.clone(), attempt));
            let _ = reports.send(vec![Input::Exited {
                id,
                attempt,
                outcome,
            }]);
        });
        Ok(())
    }

    /// Every live launch of this server (found by marker), and how the `believed` launches that
    /// are not live ended. A launch whose wrapper exited but whose processes linger counts as
    /// live while they are ended.
    async fn observe(&self, believed: &[Believed]) -> Result<Observation> {
        let taken_at_s = self.ctx.clock.now_s();
        let instance = self.ctx.instance.clone();
        let found = tokio::task::spawn_blocking(move || scan(&instance))
            .await
            .context("observation task failed")?;
        let mut launches = Vec::new();
        let mut live = BTreeMap::new();
        for ((id, attempt), procs) in &found {
            let leader = procs.iter().find(|p| p.leads_group && p.wrapper);
            if leader.is_none() {
                // The launch's command ended; what it left behind is ended now.
                let marker = launch_marker(&self.ctx.instance, id, *attempt);
                let (job, a) = (id.clone(), *attempt);
                tokio::spawn(async move { reap(&job, a, marker).await });
            }
            let mut handle = self
                .live()
                .get(&(id.clone(), *attempt))
                .cloned()
                .unwrap_or_default();
            if let Some(l) = leader {
                handle.pgid.get_or_insert(l.pid);
                if handle.slots.is_empty() {
                    handle.slots.clone_from(&l.slots);
                }
            }
            live.insert((id.clone(), *attempt), handle);
            launches.push(ObservedLaunch {
                id: id.clone(),
                attempt: *attempt,
                state: LaunchState::Running,
            });
        }
        let waited = lock(&self.waited).clone();
        let mut asked = Vec::with_capacity(believed.len());
        for b in believed {
            let key = (b.id.clone(), b.attempt);
            if found.contains_key(&key) {
                asked.push(key);
                continue;
            }
            // Being started, or ended and being reaped, by this process: its waiter reports the
            // end with the exit code. Answering here would race it (the launch is in no scan and
            // its waiter has not reported yet, which reads as vanished), so it is left unasked.
            if waited.contains(&key) {
                continue;
            }
            asked.push(key);
            let outcome =
                read_exit(&b.files.run(b.attempt)).map_or(Outcome::Vanished, Outcome::Exited);
            launches.push(ObservedLaunch {
                id: b.id.clone(),
                attempt: b.attempt,
                state: LaunchState::Ended { outcome },
            });
        }
        // A launch spawned after the scan is not in it: keep those this process still waits for
        // (their waiter removes them when they end).
        let mut tracked = self.live();
        // Waited for now (not when the scan began): a launch reserving its slots meanwhile
        // keeps them.
        let waited = lock(&self.waited).clone();
        tracked.retain(|k, _| found.contains_key(k) || waited.contains(k));
        tracked.extend(live);
        drop(tracked);
        Ok(Observation {
            taken_at_s,
            asked,
            launches,
        })
    }
}

/// Ends what is left of a launch whose wrapper exited (workers in sessions of their own, daemons
/// they forked), retrying until nothing is left: its GPUs are free only then.
async fn reap(id: &str, attempt: u32, marker: String) {
    loop {
        let m = marker.clone();
        let left = tokio::task::spawn_blocking(move || {
            let leftover = launch_processes(&m).len();
            (leftover, kill_launch(&m))
        })
        .await
        .unwrap_or((1, 1));
        if left.0 > 0 {
            tracing::warn!(
                "job {id}: {} process(es) of launch {attempt} outlived it; ended them",
                left.0
            );
        }
        if left.1 == 0 {
            return;
        }
        tracing::error!(
            "job {id}: {} process(es) of launch {attempt} survive SIGKILL; its GPUs stay held",
            left.1
        );
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    }
}

/// One process of a launch, as `/proc` shows it.
#[derive(Debug, Clone)]
struct LaunchProcess {
    pid: i32,
    /// It leads its process group.
    leads_group: bool,
    /// It is the launch's wrapper shell.
    wrapper: bool,
    /// Its `CUDA_VISIBLE_DEVICES`.
    slots: Vec<u32>,
}

/// Every live process carrying a launch marker of `instance`, by (job id, attempt).
fn scan(instance: &str) -> BTreeMap<(String, u32), Vec<LaunchProcess>> {
    let mut found: BTreeMap<(String, u32), Vec<LaunchProcess>> = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    let me = std::process::id() as i32;
    for pid in entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
    {
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let mut marker = None;
        let mut slots = Vec::new();
        for var in environ.split(|&b| b == 0) {
            if let Some(m) = var.strip_prefix(b"DLSCALE_LAUNCH=".as_slice()) {
                marker = std::str::from_utf8(m).ok();
            } else if let Some(v) = var.strip_prefix(b"CUDA_VISIBLE_DEVICES=".as_slice()) {
                slots = std::str::from_utf8(v)
                    .unwrap_or("")
                    .split(',')
                    .filter_map(|s| s.trim().parse().ok())
                    .collect();
            }
        }
        let Some((inst, id, attempt)) = marker.and_then(parse_launch_marker) else {
            continue;
        };
        if inst != instance {
            continue;
        }
        let Some((state, pgrp, _)) = proc_stat(pid) else {
            continue;
        };
        if state == 'Z' {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let wrapper = args.get(1) == Some(&&b"-c"[..]) && args.get(2) == Some(&WRAPPER.as_bytes());
        found
            .entry((id.to_string(), attempt))
            .or_default()
            .push(LaunchProcess {
                pid,
                leads_group: pgrp == pid,
                wrapper,
                slots,
            });
    }
    found
}

/// Everything one launch needs.
#[derive(Debug, Clone)]
pub struct LaunchPlan {
    /// Program and arguments (before the wrapper).
    pub argv: Vec<String>,
    /// Environment added to the server's.
    pub env: BTreeMap<String, String>,
    /// Working directory.
    pub workdir: PathBuf,
    /// Log file (appended).
    pub log: PathBuf,
    /// Directory of this launch's `pid` and `exit` files.
    pub run_dir: PathBuf,
}

/// Builds launch `attempt` of `spec` with `shape` on `slots`; its workers get `token`.
pub fn plan(
    spec: &JobSpec,
    attempt: u32,
    shape: &Shape,
    slots: &[u32],
    token: &str,
    ctx: &ExecContext,
) -> LaunchPlan {
    let workers = slots.len().max(1);
    let argv = match spec.launcher {
        Launcher::Plain | Launcher::Srun => spec.command.clone(),
        Launcher::Torchrun => {
            let mut argv = vec![
                ctx.torchrun.display().to_string(),
                "--standalone".to_string(),
                "--nnodes=1".to_string(),
                format!("--nproc-per-node={workers}"),
                "--max-restarts=0".to_string(),
            ];
            argv.extend(spec.command.iter().cloned());
            argv
        }
    };
    let mut env = worker_env(spec, attempt, shape, token, ctx);
    let files = JobFiles::of(&ctx.data_dir, spec);
    let slots = slots
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    env.insert("CUDA_VISIBLE_DEVICES".to_string(), slots);
    // The slots are nvidia-smi's indices, which follow the PCI bus; CUDA numbers devices
    // fastest first unless told otherwise, and on a machine of mixed types a job placed on a
    // T4's slot would get the A100.
    env.insert("CUDA_DEVICE_ORDER".to_string(), "PCI_BUS_ID".to_string());
    // One node: this machine, rank 0, hosting any rendezvous itself.
    for (k, v) in [
        ("DLSCALE_NODE_RANK", "0".to_string()),
        ("DLSCALE_MASTER_ADDR", "127.0.0.1".to_string()),
    ] {
        env.insert(k.to_string(), v);
    }
    LaunchPlan {
        argv,
        env,
        workdir: spec.workdir.clone(),
        log: files.log(),
        run_dir: files.run(attempt),
    }
}

/// Starts a launch in a new process group; output is appended to the log after a header line.
/// A program that cannot be executed is an error that says why, before anything starts.
/// Blocking file operations only (small); call from a blocking context or accept a short stall.
pub fn spawn(plan: &LaunchPlan, header: &str) -> Result<tokio::process::Child> {
    // The wrapper shell would start anyway and its command exit 127: say why instead.
    let path = plan
        .env
        .get("PATH")
        .map(OsString::from)
        .or_else(|| std::env::var_os("PATH"));
    let program = plan.argv.first().map_or("", String::as_str);
    find_program(program, path.as_deref(), &plan.workdir).map_err(anyhow::Error::msg)?;
    std::fs::create_dir_all(&plan.run_dir)
        .with_context(|| format!("cannot create {}", plan.run_dir.display()))?;
    if let Some(dir) = plan.env.get("DLSCALE_CHECKPOINT_DIR") {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {dir}"))?;
    }
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&plan.log)
        .with_context(|| format!("cannot open log {}", plan.log.display()))?;
    writeln!(log, "{header}")?;
    log.flush()?;
    let err = log.try_clone()?;
    let mut cmd = tokio::process::Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(WRAPPER)
        .arg("dlscale-job")
        .arg(&plan.run_dir)
        .args(&plan.argv)
        .envs(&plan.env)
        .current_dir(&plan.workdir)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(err))
        .process_group(0)
        .kill_on_drop(false);
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot start {:?} in {}", plan.argv, plan.workdir.display()))?;
    // Before anything else: a server that crashes from here on finds the group on recovery.
    if let Some(pid) = child.id() {
        let tmp = plan.run_dir.join("pid.tmp");
        let written = std::fs::write(&tmp, format!("{pid}\n"))
            .and_then(|()| std::fs::rename(&tmp, plan.run_dir.join("pid")));
        if let Err(e) = written {
            tracing::warn!("cannot write {}/pid: {e}", plan.run_dir.display());
        }
    }
    Ok(child)
}

/// Sends `signal` to every process of group `pgid`. A group that is gone is not an error.
pub fn signal_group(pgid: i32, signal: i32) -> std::io::Result<()> {
    if pgid <= 1 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("refusing to signal process group {pgid}"),
        ));
    }
    // SAFETY: killpg has no memory-safety preconditions.
    let rc = unsafe { libc::killpg(pgid, signal) };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ESRCH) {
        Ok(())
    } else {
        Err(err)
    }
}

/// `(state, pgrp, start ticks)` of a process, from `/proc/<pid>/stat`.
fn proc_stat(pid: i32) -> Option<(char, i32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: parse after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let pgrp = fields.get(2)?.parse().ok()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((state, pgrp, start))
}

/// Whether the environment block of `/proc/<pid>/environ` holds `DLSCALE_LAUNCH=<marker>`.
/// Whether `environ` carries the launch `marker` names, in its form or the form of a version
/// before it (a launch started before an upgrade is still found, reaped and killed).
fn carries_marker(environ: &[u8], marker: &str) -> bool {
    let wanted = parse_launch_marker(marker);
    environ.split(|&b| b == 0).any(|var| {
        var.strip_prefix(b"DLSCALE_LAUNCH=".as_slice())
            .and_then(|m| std::str::from_utf8(m).ok())
            .is_some_and(|m| m == marker || (wanted.is_some() && parse_launch_marker(m) == wanted))
    })
}

/// Every live (non-zombie) process of the launch with `marker`, found by the marker in its
/// environment: the wrapper, torchrun, workers in sessions of their own and daemons they forked.
pub fn launch_processes(marker: &str) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let me = std::process::id() as i32;
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| carries_marker(&env, marker))
                && proc_stat(pid).is_some_and(|(state, _, _)| state != 'Z')
        })
        .collect()
}

/// Whether process group `pgid` holds a live process of the launch with `marker` (while one
/// lives the group id cannot be given to other processes).
pub fn group_holds_launch(pgid: i32, marker: &str) -> bool {
    launch_processes(marker)
        .into_iter()
        .any(|pid| proc_stat(pid).is_some_and(|(_, group, _)| group == pgid))
}

/// Sends SIGKILL to one process of the launch with `marker`, race-free against pid reuse: the
/// pid is pinned with a pidfd before its environment is checked, so a pid that was reused in the
/// meantime is never signalled.
fn kill_if_marked(pid: i32, marker: &str) {
    // SAFETY: pidfd_open takes a pid and flags, and returns a new file descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    if fd < 0 {
        // No pidfds (old kernel): a plain kill, after checking the marker once more.
        if std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|e| carries_marker(&e, marker)) {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        return;
    }
    if std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|e| carries_marker(&e, marker)) {
        // SAFETY: the descriptor is ours and open; a null siginfo is allowed.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd,
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
    }
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(fd) };
}

/// Ends every process of the launch with `marker` (SIGKILL, repeated while processes remain, as
/// a dying parent may still fork). Blocks for at most about five seconds; returns how many
/// processes are still alive (0 unless something resists SIGKILL, e.g. an uninterruptible wait).
pub fn kill_launch(marker: &str) -> usize {
    for _ in 0..250 {
        let pids = launch_processes(marker);
        if pids.is_empty() {
            return 0;
        }
        for pid in pids {
            kill_if_marked(pid, marker);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    launch_processes(marker).len()
}

/// An exit status as one number: the exit code, or minus the signal that killed the process.
pub fn status_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| -s))
        .unwrap_or(-1)
}

#[cfg(test)]
mod tests;
