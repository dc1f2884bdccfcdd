//! Shared helpers of the tests that run on a real Slurm cluster
//! (`scripts/slurm-local.sh up --nodes 2 --gpus-per-node 4`; `SLURM_CONF` exported).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The tests share one Slurm cluster and assert on its capacity: one at a time.
pub static SLURM: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub const PARTITION: &str = "gpu";

pub fn required() -> bool {
    std::env::var("DLSCALE_REQUIRE_SLURM").as_deref() == Ok("1")
}

/// Why the Slurm cluster cannot be used, if it cannot: reachable, partition `gpu` with two
/// usable nodes of 4 GPUs each.
pub fn slurm_unusable() -> Option<String> {
    let conf = std::env::var_os("SLURM_CONF")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/etc/slurm/slurm.conf".into());
    if !conf.is_file() {
        return Some(format!("no Slurm configuration at {}", conf.display()));
    }
    // sinfo retries for a minute when slurmctld does not answer: give it 15 s.
    let mut child = match Command::new("sinfo")
        .args(["-h", "-N", "-p", PARTITION, "-o", "%N %T %G"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => return Some(format!("cannot run sinfo: {e}")),
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while child.try_wait().ok().flatten().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Some("sinfo got no answer from slurmctld within 15 s".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = match child.wait_with_output() {
        Ok(out) => out,
        Err(e) => return Some(format!("sinfo: {e}")),
    };
    if !out.status.success() {
        return Some(format!(
            "sinfo failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let nodes: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let ok = nodes.len() == 2
        && nodes.iter().all(|n| {
            n.len() == 3
                && matches!(n[1], "idle" | "mixed" | "allocated" | "completing")
                && n[2] == "gpu:4"
        });
    (!ok).then(|| {
        format!("partition '{PARTITION}' must have 2 usable nodes with gpu:4; sinfo shows {text:?}")
    })
}

/// Whether the test may run; prints SKIP or panics (with `DLSCALE_REQUIRE_SLURM=1`) if not.
pub fn slurm_ready(test: &str) -> bool {
    match slurm_unusable() {
        None => true,
        Some(why) if required() => panic!(
            "DLSCALE_REQUIRE_SLURM=1 but Slurm is not usable: {why} (run: eval \"$(scripts/slurm-local.sh up --nodes 2 --gpus-per-node 4)\")"
        ),
        Some(why) => {
            eprintln!("SKIP {test}: {why}; start it with: eval \"$(scripts/slurm-local.sh up --nodes 2 --gpus-per-node 4)\" (set DLSCALE_REQUIRE_SLURM=1 to fail instead)");
            false
        }
    }
}

pub fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// A job in `squeue` (active states only: pending, running, completing, ...).
#[derive(Debug, Clone, PartialEq)]
pub struct Queued {
    /// Slurm job id.
    pub slurm_id: u64,
    /// Job name.
    pub name: String,
    /// State.
    pub state: String,
    /// Nodes.
    pub nodes: String,
}

pub fn squeue() -> Vec<Queued> {
    run("squeue", &["-h", "-o", "%A|%j|%T|%N"])
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            Some(Queued {
                slurm_id: f.first()?.trim().parse().ok()?,
                name: f.get(1)?.to_string(),
                state: f.get(2)?.to_string(),
                nodes: f.get(3)?.to_string(),
            })
        })
        .collect()
}

/// The active Slurm jobs of server `instance`, by dlscale job id.
pub fn ours(instance: &str) -> BTreeMap<String, Vec<Queued>> {
    let mut out: BTreeMap<String, Vec<Queued>> = BTreeMap::new();
    for q in squeue() {
        match dlscale_server::executor::parse_launch_marker(&q.name) {
            Some((i, id, _)) if i == instance => {
                out.entry(id.to_string()).or_default().push(q.clone());
            }
            _ => {}
        }
    }
    out
}

/// Cancels jobs left by earlier runs (dlscale launches, the foreign test job) and waits until
/// Slurm's queue is empty, so capacity assertions hold.
pub fn clear_queue() {
    let stale: Vec<String> = squeue()
        .into_iter()
        .filter(|q| {
            dlscale_server::executor::parse_launch_marker(&q.name).is_some()
                || q.name == "dlscale-test-foreign"
        })
        .map(|q| q.slurm_id.to_string())
        .collect();
    if !stale.is_empty() {
        eprintln!("cancelling Slurm jobs left by an earlier run: {stale:?}");
        let _ = Command::new("scancel").args(&stale).status();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while !squeue().is_empty() {
        assert!(
            Instant::now() < deadline,
            "Slurm's queue does not drain: {:?}",
            squeue()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A directory removed when dropped, unless the thread is panicking (then it is kept, and named).
pub struct KeepOnFailure(pub std::path::PathBuf);

impl Drop for KeepOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("test failed: its data is kept in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Cancels the Slurm jobs of the server in `data_dir` when dropped (test cleanup).
pub struct CancelOnDrop(pub std::path::PathBuf);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Ok(instance) = std::fs::read_to_string(self.0.join("instance")) else {
            return;
        };
        let ids: Vec<String> = ours(instance.trim())
            .into_values()
            .flatten()
            .map(|q| q.slurm_id.to_string())
            .collect();
        if !ids.is_empty() {
            let _ = Command::new("scancel").args(&ids).status();
        }
    }
}

pub fn instance(data_dir: &Path) -> String {
    std::fs::read_to_string(data_dir.join("instance"))
        .expect("the Slurm executor writes <data_dir>/instance")
        .trim()
        .to_string()
}
