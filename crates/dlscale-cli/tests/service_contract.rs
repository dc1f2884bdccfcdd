//! The contract with training programs that do not use the worker library, end to end with a
//! real `dlscale serve`: a program that checkpoints on SIGTERM and exits 0 is relaunched, not
//! marked finished; a stop or cancel ends every process of a launch (torchrun workers in their
//! own sessions, daemons they fork) before its GPUs are freed.

mod service_support;

use std::path::Path;
use std::time::Duration;

use dlscale_autoscaler::Status as JobStatus;
use dlscale_server::api::dto::JobView;
use serde_json::{json, Value};
use service_support::{launch_processes, read_trace, repo_root, Server};

const CONFIG: &str =
    "slots = 2\ncooldown_s = 1\ninterval_s = 0.5\ngrace_s = 3\nmin_gain = 0.05\nmax_retries = 1\n";

/// `examples/plain_job.py` (no worker library) as a plain-launcher job.
fn plain_job(id: &str, steps: u32, trace: &Path) -> Value {
    json!({"id": id, "min_batch": 32, "max_batch": 256, "max_local_batch": 64, "max_gpus": 2,
           "model": {"compute_base_s": 0.01, "compute_per_sample_s": 0.001, "sync_intra_base_s": 0.002},
           "command": ["python3", repo_root().join("examples/plain_job.py").display().to_string(),
                       "--steps", steps.to_string(), "--step-s", "0.1",
                       "--trace", trace.display().to_string()],
           "workdir": "/tmp", "launcher": "plain"})
}

fn running(j: &JobView) -> bool {
    j.state == JobStatus::Running && j.engine_id("pgid").is_some()
}

/// The regression of issue 8: a program stopped for a rescale saved its state and exited 0, and
/// dlscale recorded `succeeded` at a fraction of its steps. Now the exit after the stop request
/// is a stop: the job is relaunched from its checkpoint and runs every step exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn a_program_that_exits_0_on_sigterm_is_relaunched_not_finished() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), CONFIG).await;
    let (trace_a, trace_b) = (dir.path().join("a.trace"), dir.path().join("b.trace"));
    server.submit(plain_job("a", 80, &trace_a)).await;
    let first = server.wait_job("a", 20.0, "a on 2 slots", running).await;
    assert_eq!(first.gpus, 2);
    tokio::time::sleep(Duration::from_millis(1500)).await; // past the cooldown
    server.submit(plain_job("b", 30, &trace_b)).await;

    for id in ["a", "b"] {
        let done = server
            .wait_job(id, 60.0, "the end", |j| j.state.is_terminal())
            .await;
        assert_eq!(
            done.state,
            JobStatus::Succeeded,
            "{done:?}\n{}",
            server.log()
        );
    }
    let a = server.job("a").await;
    assert!(
        a.restarts >= 1 && a.attempt >= 2,
        "a was never rescaled: {a:?}"
    );
    for (trace, steps) in [(&trace_a, 80), (&trace_b, 30)] {
        let rows = read_trace(trace);
        let done: Vec<u64> = rows.iter().map(|r| r["step"].as_u64().unwrap()).collect();
        assert_eq!(done, (1..=steps).collect::<Vec<_>>(), "{}", trace.display());
    }
    let attempts: std::collections::BTreeSet<u64> = read_trace(&trace_a)
        .iter()
        .map(|r| r["attempt"].as_u64().unwrap())
        .collect();
    assert!(
        attempts.len() >= 2,
        "a ran in one launch only: {attempts:?}"
    );
    // The job's log says, in one line, that the stop was dlscale's.
    let log = std::fs::read_to_string(&a.log).unwrap();
    assert!(
        a.log.starts_with(dir.path().join("jobs/a").join(&a.uid)),
        "{}",
        a.log.display()
    );
    let marks: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("[dlscale] launch 1 stopped (rescale): SIGTERM sent"))
        .collect();
    assert_eq!(marks.len(), 1, "{log}");
}

/// A torchrun job whose workers ignore SIGTERM (torchrun starts each in a session of its own),
/// and one whose worker forks a daemon: a cancel and a normal end leave no process behind, and
/// the job is marked ended only once none is left.
#[tokio::test(flavor = "multi_thread")]
async fn no_process_of_a_launch_outlives_it() {
    let Some(venv) = service_support::torch_venv_or_skip("no_process_of_a_launch_outlives_it")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{CONFIG}torchrun = \"{}\"\n",
        venv.join("bin/torchrun").display()
    );
    let server = Server::start(dir.path(), &config).await;
    let script = dir.path().join("stubborn.py");
    std::fs::write(
        &script,
        r#"import os, signal, subprocess, sys, time
rank = int(os.environ["RANK"])
if sys.argv[1] == "ignore-sigterm":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print(f"rank {rank} ignores SIGTERM", flush=True)
    time.sleep(1000)
else:  # fork a daemon that re-parents to PID 1, then finish normally
    if rank == 0:
        subprocess.Popen(["sleep", "1000"], start_new_session=True)
    print(f"rank {rank} done", flush=True)
"#,
    )
    .unwrap();
    let job = |id: &str, mode: &str| {
        json!({"id": id, "min_batch": 2, "max_batch": 2, "max_local_batch": 1, "min_gpus": 2,
               "max_gpus": 2, "model": {"compute_per_sample_s": 0.001},
               "command": [script.display().to_string(), mode],
               "workdir": dir.path().display().to_string(), "launcher": "torchrun"})
    };
    let instance = std::fs::read_to_string(dir.path().join("instance")).unwrap();
    let instance = instance.trim();

    server.submit(job("stubborn", "ignore-sigterm")).await;
    server
        .wait_job("stubborn", 60.0, "workers up", running)
        .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    // torchrun, its two workers and the wrapper.
    while launch_processes(instance, Some("stubborn")).len() < 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "workers never started"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    service_support::cli(&server, &["cancel", "stubborn"]);
    loop {
        let j = server.job("stubborn").await;
        if j.state.is_terminal() {
            assert_eq!(j.state, JobStatus::Cancelled, "{j:?}");
            // Marked ended (its slots free) only once nothing of the launch runs.
            let left = launch_processes(instance, Some("stubborn"));
            assert!(left.is_empty(), "processes left after cancel: {left:?}");
            // Where dlscale had to kill it when the grace ran out (torchrun may have ended its
            // workers itself before), its log says so.
            let killed = j.events.iter().any(|e| e.kind == "kill");
            let log = std::fs::read_to_string(&j.log).unwrap();
            let marked = log.contains(
                "[dlscale] launch 1 killed after grace: still running 3 s after its stop",
            );
            assert_eq!(killed, marked, "{:?}\n{log}", j.events);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "cancel did not finish: {j:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    server.submit(job("forker", "fork-daemon")).await;
    let done = server
        .wait_job("forker", 60.0, "the end", |j| j.state.is_terminal())
        .await;
    assert_eq!(done.state, JobStatus::Succeeded, "{done:?}");
    let left = launch_processes(instance, Some("forker"));
    assert!(left.is_empty(), "the daemon outlived its job: {left:?}");
}

/// A torchrun job whose worker (worker library) stops at once but whose exit would hang: a
/// thread the interpreter waits for at exit, as a user's logger might start. Its launch is over
/// within seconds of the stop, far below the grace period: the GPUs do not sit idle until the
/// kill.
#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_torchrun_launch_is_over_within_seconds_not_at_the_grace() {
    let Some(venv) = service_support::torch_venv_or_skip(
        "a_stopped_torchrun_launch_is_over_within_seconds_not_at_the_grace",
    ) else {
        return;
    };
    const GRACE_S: u64 = 60;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "slots = 1\ngrace_s = {GRACE_S}\ntorchrun = \"{}\"\n",
        venv.join("bin/torchrun").display()
    );
    let server = Server::start(dir.path(), &config).await;
    let script = dir.path().join("lingers.py");
    std::fs::write(
        &script,
        r#"import threading, time
import dlscale
job = dlscale.init(log_every=1)
import torch
model = torch.nn.Linear(4, 2)
job.resume(model, torch.optim.SGD(model.parameters(), lr=0.1))
threading.Thread(target=time.sleep, args=(1000,)).start()
while True:
    time.sleep(0.05)
    job.step_done(loss=1.0)
    if job.should_stop():
        job.stop()
"#,
    )
    .unwrap();
    server
        .submit(
            json!({"id": "lingers", "min_batch": 2, "max_batch": 2, "max_local_batch": 2,
               "max_gpus": 1, "model": {"compute_per_sample_s": 0.001},
               "command": [script.display().to_string()],
               "workdir": dir.path().display().to_string(), "launcher": "torchrun"}),
        )
        .await;
    // Starting torch takes long on a loaded machine (the suite's other torch tests run beside
    // this one); what is measured is the stop, below.
    server
        .wait_job("lingers", 180.0, "its first steps", |j| {
            running(j) && j.step.is_some_and(|s| s >= 3)
        })
        .await;
    let stopped_at = std::time::Instant::now();
    service_support::cli(&server, &["cancel", "lingers"]);
    let j = server
        .wait_job("lingers", (GRACE_S + 30) as f64, "its cancel", |j| {
            j.state == JobStatus::Cancelled
        })
        .await;
    let took = stopped_at.elapsed();
    let log = std::fs::read_to_string(&j.log).unwrap();
    assert!(log.contains("dlscale: stopped step="), "{log}");
    assert!(
        took < Duration::from_secs(GRACE_S / 3),
        "the launch ended {took:?} after its stop (grace {GRACE_S} s)\n{log}"
    );
    assert!(!log.contains("killed after grace"), "{log}");
}

/// A program that ignores SIGTERM is killed when the grace runs out, and its log says so.
#[tokio::test(flavor = "multi_thread")]
async fn a_launch_killed_after_its_grace_says_so_in_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), CONFIG).await;
    server
        .submit(
            json!({"id": "deaf", "min_batch": 32, "max_batch": 32, "max_local_batch": 32,
            "max_gpus": 1, "model": {"compute_per_sample_s": 0.001},
            "command": ["sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"],
            "workdir": "/tmp", "launcher": "plain"}),
        )
        .await;
    server.wait_job("deaf", 20.0, "running", running).await;
    service_support::cli(&server, &["cancel", "deaf"]);
    let j = server
        .wait_job("deaf", 20.0, "cancelled", |j| j.state.is_terminal())
        .await;
    assert_eq!(j.state, JobStatus::Cancelled, "{j:?}");
    assert!(j.events.iter().any(|e| e.kind == "kill"), "{:?}", j.events);
    let log = std::fs::read_to_string(&j.log).unwrap();
    assert!(
        log.contains("[dlscale] launch 1 killed after grace: still running 3 s after its stop"),
        "{log}"
    );
}
