//! End to end on a real Ray cluster: `scripts/ray-local.sh up --nodes 2 --gpus-per-node 1` (two
//! nodes × 1 unit of `fake_gpu`, the resource that stands for GPUs; `DLSCALE_RAY_ADDRESS`
//! exported). `dlscale serve` runs with the Ray executor; each launch is a Ray job (Jobs REST API)
//! whose entrypoint is `examples/ray_train.py`, a Ray Train `TorchTrainer` on CPU.
//!
//! Two Ray Train jobs: `a` starts alone on both GPUs and changes its batch in place once its
//! workers' measured noise scale arrives; `b` arrives, and `a` is stopped at a checkpoint and
//! relaunched on one (shrunk); the server is killed with SIGKILL while both run and started
//! again, adopting both Ray jobs (never a second Ray job of a launch: the cluster's job list is
//! watched for the whole run); `b` ends and `a` is relaunched on two (grown), trains there, and is
//! cancelled (stopped through Ray at a checkpoint, not relaunched). (Small, as the machine that
//! runs the tests has two cores: each Train worker is a torch process.) Each job succeeds
//! with every sample of its stream trained exactly once, on every rank, across its launches (the
//! worker library's sample log), `b` succeeds, and `dlscale replay` reproduces the run.
//!
//! Skips (passes with a SKIP message) when the Ray cluster or the torch venv is missing, unless
//! `DLSCALE_REQUIRE_RAY=1`.

mod service_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use dlscale_autoscaler::Status as JobStatus;
use dlscale_server::api::dto::JobView;
use dlscale_server::client::Method;
use serde_json::{json, Value};
use service_support::ray::{self, ray_ready, StopOnDrop};
use service_support::slurm::{instance, KeepOnFailure};
use service_support::{assert_each_sample_once, assert_replays, repo_root, venv, Server, Watch};

/// The samples of `examples/ray_train.py`'s data set (the first 1,500 of scikit-learn's digits).
const DATASET: usize = 1500;

/// An `examples/ray_train.py` job of up to `max_gpus` workers, `total_samples` long, its sample
/// log at `samples`.
fn ray_job(id: &str, max_gpus: u32, total_samples: u64, samples: &Path, in_place: bool) -> Value {
    json!({"id": id, "min_batch": 16, "max_batch": 256, "batch_size": 32, "max_local_batch": 64,
           "max_gpus": max_gpus, "powers_of_two": true, "batch_in_place": in_place,
           "model": {"compute_base_s": 0.01, "compute_per_sample_s": 0.0005, "sync_intra_base_s": 0.005,
                     "noise_scale": 100.0, "init_batch": 32},
           "command": ["examples/ray_train.py", "--total-samples", total_samples.to_string()],
           "workdir": repo_root().display().to_string(), "launcher": "torchrun",
           "env": {"DLSCALE_SAMPLE_LOG": samples.display().to_string(), "DLSCALE_STEP_SLEEP": "0.05",
                   "DLSCALE_METRICS_INTERVAL": "1", "DLSCALE_LOG_EVERY": "10",
                   "DLSCALE_MEASURE_NOISE": if in_place { "1" } else { "0" }}})
}

/// Per dlscale job, the most Ray jobs of it that were not over at once.
fn watch_ray_jobs(instance: String) -> Watch<BTreeMap<String, usize>> {
    Watch::start(
        Duration::from_millis(300),
        move |most: &mut BTreeMap<String, usize>| {
            for (id, live) in ray::live(&instance) {
                let e = most.entry(id).or_default();
                *e = (*e).max(live.len());
            }
        },
    )
}

fn on_ray(j: &JobView, gpus: u32) -> bool {
    j.state == JobStatus::Running && j.gpus == gpus && j.engine_id("ray_submission_id").is_some()
}

#[tokio::test(flavor = "multi_thread")]
async fn ray_train_jobs_are_rebatched_shrunk_grown_and_adopted_after_a_server_kill() {
    const NAME: &str = "ray_train_jobs_are_rebatched_shrunk_grown_and_adopted_after_a_server_kill";
    if !ray_ready(NAME) {
        return;
    }
    let venv = match venv() {
        Ok(v) => v,
        Err(why) => panic!("the Ray cluster is up but the torch venv is unusable: {why}"),
    };
    let _one_at_a_time = ray::RAY.lock().await;
    let t0 = Instant::now();
    let lap = |what: &str| eprintln!("[{:6.1} s] {what}", t0.elapsed().as_secs_f64());
    let dir = KeepOnFailure(tempfile::tempdir().unwrap().keep());
    let _cleanup = StopOnDrop(dir.0.clone());
    let config = format!(
        "{}python = \"{}\"\n",
        ray::config(
            "cooldown_s = 3\ninterval_s = 1\ngrace_s = 30\nmin_gain = 0.05\nutility = \"goodput\"\n\
             restart_cost_s = 0\n"
        ),
        venv.join("bin/python").display()
    );
    let mut server = Server::start(&dir.0, &config).await;
    let inst = instance(&dir.0);
    let watch = watch_ray_jobs(inst.clone());
    let samples = |id: &str| dir.0.join(format!("samples-{id}"));

    // a alone: both nodes' GPUs; its batch changes in place once its noise scale arrives.
    server
        .submit(ray_job("a", 2, 10_000_000, &samples("a"), true))
        .await;
    let a1 = server
        .wait_job("a", 240.0, "a training on 2 Ray workers", |j| {
            on_ray(j, 2) && j.step.is_some_and(|s| s >= 10)
        })
        .await;
    lap("a trains on 2 workers");
    let rebatched = server
        .wait_job("a", 180.0, "a's batch changed in place", |j| {
            j.attempt == a1.attempt && j.batch_size != a1.batch_size && j.noise_scale != Some(100.0)
        })
        .await;
    lap("a rebatched in place");
    // Its workers reported with the job's token, read from a file of the launch's own: Ray's
    // dashboard, which shows every job's runtime environment, never shows the token.
    let tokens = token_files(&dir.0);
    assert!(!tokens.is_empty(), "no launch token file under {:?}", dir.0);
    let listed = ray::request("GET", "/api/jobs/").unwrap();
    for (path, token) in &tokens {
        assert!(!token.is_empty(), "{path:?} is empty");
        assert!(
            !listed.contains(token.as_str()),
            "Ray's job list shows {path:?}'s token"
        );
    }

    // b arrives: a is stopped at a checkpoint and relaunched on one worker (the Ray job's stop).
    server
        .submit(ray_job("b", 1, 3_000, &samples("b"), false))
        .await;
    let a2 = server
        .wait_job("a", 240.0, "a relaunched on 1 worker", |j| {
            j.attempt > rebatched.attempt && on_ray(j, 1) && j.step > rebatched.step
        })
        .await;
    server
        .wait_job("b", 240.0, "b training on 1 Ray worker", |j| {
            on_ray(j, 1) && j.step.is_some_and(|s| s >= 5)
        })
        .await;
    lap("a shrunk to 1 worker, b trains on 1");

    // kill -9 of the server while both run: started again, it adopts both Ray jobs.
    server.kill9();
    tokio::time::sleep(Duration::from_secs(2)).await;
    server.restart().await;
    let adopted = server
        .wait_job("a", 60.0, "a adopted after the restart", |j| {
            j.attempt == a2.attempt && on_ray(j, 1)
        })
        .await;
    assert_eq!(adopted.engine_id, a2.engine_id, "{adopted:?}");
    lap("both adopted after kill -9");

    // b ends; a grows back to two workers.
    let b_done = server
        .wait_job("b", 300.0, "b's end", |j| j.state.is_terminal())
        .await;
    assert_eq!(
        (b_done.state, b_done.exit_code),
        (JobStatus::Succeeded, Some(0)),
        "{b_done:?}\n{}",
        server.log()
    );
    let a3 = server
        .wait_job("a", 240.0, "a relaunched on 2 workers", |j| {
            j.attempt > a2.attempt && on_ray(j, 2)
        })
        .await;
    server
        .wait_job("a", 120.0, "a training on 2 workers again", |j| {
            j.attempt == a3.attempt && j.step > a3.step
        })
        .await;
    lap("b done, a grown to 2 workers");
    server
        .client
        .send(Method::DELETE, "/v1/jobs/a", None)
        .await
        .unwrap();
    let a_done = server
        .wait_job("a", 120.0, "a's end after its cancel", |j| {
            j.state.is_terminal()
        })
        .await;
    lap("a cancelled");
    let log = server
        .client
        .text("/v1/jobs/a/logs?tail_bytes=10000000")
        .await
        .unwrap_or_default();
    assert_eq!(
        a_done.state,
        JobStatus::Cancelled,
        "{a_done:?}\n{}",
        server.log()
    );
    assert!(a_done.restarts >= 2, "{a_done:?}");
    assert!(log.contains("dlscale: rebatched "), "{log}");
    // The cancel stopped a at a checkpoint: its last launch's driver said so.
    assert!(
        log.lines().any(|l| l.starts_with("dlscale: stopped step=")),
        "{}",
        &log[log.len().saturating_sub(6000)..]
    );
    let steps_a = assert_each_sample_once(&samples("a"), DATASET);
    assert!(steps_a > a2.step.unwrap_or(0), "{steps_a} {a2:?}");
    let steps_b = assert_each_sample_once(&samples("b"), DATASET);
    assert_eq!(Some(steps_b), b_done.step);
    let most = watch.finish();
    assert!(
        most.values().all(|&n| n == 1) && most.len() == 2,
        "a launch had two Ray jobs at once, or a job none: {most:?}"
    );
    assert!(ray::live(&inst).is_empty(), "{:?}", ray::live(&inst));
    assert_replays(&server);
}

/// Every launch's token file under `dir` (`<job>/run-<n>/token`), with its contents.
fn token_files(dir: &Path) -> Vec<(std::path::PathBuf, String)> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == "token")
                && path
                    .parent()
                    .and_then(|p| p.file_name())
                    .is_some_and(|n| n.to_string_lossy().starts_with("run-"))
            {
                let token = std::fs::read_to_string(&path).unwrap_or_default();
                found.push((path, token.trim().to_string()));
            }
        }
    }
    found
}
