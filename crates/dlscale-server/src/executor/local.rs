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

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context, Result};

use super::{log_path, run_dir, single_node, worker_env, ExecContext, LaunchRequest, Launched};
use crate::placement::Topology;
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

/// The local executor: a fixed set of device slots on this machine.
#[derive(Debug, Clone)]
pub struct LocalExecutor {
    /// Context of every launch.
    pub ctx: ExecContext,
    /// Slot (GPU) ids.
    pub slots: Vec<u32>,
    /// Whether the slots are GPUs found by nvidia-smi.
    pub gpus_detected: bool,
}

impl LocalExecutor {
    /// This machine as one node with its slots.
    pub fn topology(&self) -> Topology {
        single_node("local", self.slots.len() as u32)
    }

    /// The first `gpus` slots not in `busy`.
    pub fn pick_slots(&self, gpus: u32, busy: &BTreeSet<u32>) -> Vec<u32> {
        self.slots
            .iter()
            .copied()
            .filter(|s| !busy.contains(s))
            .take(gpus as usize)
            .collect()
    }

    /// Starts a launch in its own process group (see [`spawn`]).
    pub async fn launch(&self, req: &LaunchRequest<'_>) -> Result<Launched> {
        let alloc = LaunchAlloc {
            slots: req.slots.to_vec(),
            batch_size: req.batch_size,
            local_batch_size: req.local_batch_size,
        };
        let plan = plan(req.spec, &alloc, req.attempt, &self.ctx);
        let header = format!("{}: {:?}", req.header, plan.argv);
        let child = tokio::task::spawn_blocking(move || spawn(&plan, &header))
            .await
            .context("launch task failed")??;
        let pgid = child.id().context("the launched process has no pid")? as i32;
        Ok(Launched::Local {
            child: Box::new(child),
            pgid,
            start_ticks: start_ticks(pgid),
        })
    }
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

/// The allocation of one launch.
#[derive(Debug, Clone)]
pub struct LaunchAlloc {
    /// Slot (GPU) ids, one per worker.
    pub slots: Vec<u32>,
    /// Global batch.
    pub batch_size: u32,
    /// Per-worker batch.
    pub local_batch_size: u32,
}

/// Builds the launch of `spec` with `alloc`, attempt number `attempt`.
pub fn plan(spec: &JobSpec, alloc: &LaunchAlloc, attempt: u32, ctx: &ExecContext) -> LaunchPlan {
    let workers = alloc.slots.len().max(1);
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
    let slots = alloc
        .slots
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut env = worker_env(
        spec,
        attempt,
        workers as u32,
        alloc.batch_size,
        alloc.local_batch_size,
        ctx,
    );
    env.insert("CUDA_VISIBLE_DEVICES".to_string(), slots);
    // One node: this machine, rank 0, hosting any rendezvous itself.
    for (k, v) in [
        ("DLSCALE_NODES", "1".to_string()),
        ("DLSCALE_NODE_RANK", "0".to_string()),
        ("DLSCALE_NODE_LIST", "localhost".to_string()),
        ("DLSCALE_GPUS_PER_NODE", workers.to_string()),
        ("DLSCALE_MASTER_ADDR", "127.0.0.1".to_string()),
    ] {
        env.insert(k.to_string(), v);
    }
    LaunchPlan {
        argv,
        env,
        workdir: spec.workdir.clone(),
        log: log_path(&ctx.data_dir, &spec.id),
        run_dir: run_dir(&ctx.data_dir, &spec.id, attempt),
    }
}

/// Starts a launch in a new process group; output is appended to the log after a header line.
/// Blocking file operations only (small); call from a blocking context or accept a short stall.
pub fn spawn(plan: &LaunchPlan, header: &str) -> Result<tokio::process::Child> {
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

/// Start time of a process in clock ticks since boot (to tell a reused pid apart).
pub fn start_ticks(pid: i32) -> Option<u64> {
    proc_stat(pid).map(|(_, _, t)| t)
}

/// Whether process `pid` is the live (not zombie) process started at `ticks`.
pub fn same_process_alive(pid: i32, ticks: Option<u64>) -> bool {
    match proc_stat(pid) {
        Some((state, _, start)) => state != 'Z' && ticks.is_none_or(|t| t == start),
        None => false,
    }
}

/// Whether any live (non-zombie) process is in group `pgid`.
pub fn group_alive(pgid: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|e| {
        e.file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
            .and_then(proc_stat)
            .is_some_and(|(state, pgrp, _)| pgrp == pgid && state != 'Z')
    })
}

/// The process group of a launch whose wrapper still runs, found by the run directory in its
/// command line (`sh -c WRAPPER dlscale-job <run_dir> ...`): for a server that crashed between
/// starting the wrapper and writing its pid file.
pub fn find_launch(run_dir: &Path) -> Option<i32> {
    let want = run_dir.as_os_str().as_encoded_bytes();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let ours = args.get(1) == Some(&&b"-c"[..])
            && args.get(2) == Some(&WRAPPER.as_bytes())
            && args.get(3) == Some(&&b"dlscale-job"[..])
            && args.get(4) == Some(&want);
        let (state, pgrp, _) = proc_stat(pid)?;
        (ours && state != 'Z').then_some(pgrp)
    })
}

/// The wrapper's pid of a launch, if it was recorded.
pub fn read_pid(run_dir: &Path) -> Option<i32> {
    std::fs::read_to_string(run_dir.join("pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether the environment block of `/proc/<pid>/environ` holds `DLSCALE_LAUNCH=<marker>`.
fn carries_marker(environ: &[u8], marker: &str) -> bool {
    environ
        .split(|&b| b == 0)
        .any(|var| var.strip_prefix(b"DLSCALE_LAUNCH=".as_slice()) == Some(marker.as_bytes()))
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
mod tests {
    use super::super::read_exit;
    use super::*;
    use std::time::Duration;

    fn ctx(dir: &Path) -> ExecContext {
        ExecContext {
            data_dir: dir.to_path_buf(),
            torchrun: PathBuf::from("/venv/bin/torchrun"),
            api_url: Some("http://127.0.0.1:1".into()),
            token: Some("t".into()),
            instance: "test".into(),
        }
    }

    fn spec(command: &[&str], launcher: &str) -> JobSpec {
        JobSpec::from_value(serde_json::json!({
            "id": "j", "min_batch": 2, "max_batch": 64, "max_local_batch": 64,
            "command": command, "workdir": "/tmp", "launcher": launcher,
            "env": {"OMP_NUM_THREADS": "2"}}))
        .unwrap()
    }

    #[test]
    fn plans_torchrun_and_env() {
        let dir = tempfile::tempdir().unwrap();
        let alloc = LaunchAlloc {
            slots: vec![2, 3],
            batch_size: 64,
            local_batch_size: 32,
        };
        let p = plan(
            &spec(&["train.py", "--x"], "torchrun"),
            &alloc,
            3,
            &ctx(dir.path()),
        );
        assert_eq!(
            p.argv,
            [
                "/venv/bin/torchrun",
                "--standalone",
                "--nnodes=1",
                "--nproc-per-node=2",
                "--max-restarts=0",
                "train.py",
                "--x"
            ]
        );
        assert_eq!(p.env["CUDA_VISIBLE_DEVICES"], "2,3");
        assert_eq!(p.env["DLSCALE_WORLD_SIZE"], "2");
        assert_eq!(p.env["DLSCALE_LOCAL_BATCH_SIZE"], "32");
        assert_eq!(p.env["OMP_NUM_THREADS"], "2");
        assert_eq!(p.env["DLSCALE_TOKEN"], "t");
        assert!(p.run_dir.ends_with("jobs/j/run-3"));
    }

    #[tokio::test]
    async fn wrapper_records_exit_codes_and_survives_sigterm() {
        let dir = tempfile::tempdir().unwrap();
        let alloc = LaunchAlloc {
            slots: vec![0],
            batch_size: 2,
            local_batch_size: 2,
        };
        // A command that traps SIGTERM, prints, and exits 75 (like a checkpointing worker).
        let script = "trap 'echo stopping; exit 75' TERM; echo \"ws=$DLSCALE_WORLD_SIZE\"; while :; do sleep 0.05; done";
        let p = plan(
            &spec(&["sh", "-c", script], "plain"),
            &alloc,
            1,
            &ctx(dir.path()),
        );
        let mut child = spawn(&p, "header").unwrap();
        let pid = child.id().unwrap() as i32;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(group_alive(pid));
        assert_eq!(read_pid(&p.run_dir), Some(pid));
        // Found without its pid file too (a crash before the file was written).
        std::fs::remove_file(p.run_dir.join("pid")).unwrap();
        assert_eq!(find_launch(&p.run_dir), Some(pid));
        assert_eq!(find_launch(&dir.path().join("elsewhere")), None);
        assert!(same_process_alive(pid, start_ticks(pid)));
        signal_group(pid, libc::SIGTERM).unwrap();
        let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(status_code(status), 75);
        assert_eq!(read_exit(&p.run_dir), Some(75));
        assert!(!group_alive(pid));
        let log = std::fs::read_to_string(&p.log).unwrap();
        assert!(log.starts_with("header\nws=1\n"), "{log}");
        assert!(log.contains("stopping"), "{log}");
    }
}
