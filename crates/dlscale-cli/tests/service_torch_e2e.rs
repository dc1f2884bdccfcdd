//! End to end with real torch workers on CPU (`examples/train_digits.py`): `dlscale serve` with
//! 4 slots, three torchrun jobs arriving at different times, a rescale, a `kill -9` of the
//! server and a restart; and a job whose batch follows the gradient noise scale its worker
//! measures. Skips (passes with a message) when the torch venv is missing, unless
//! `DLSCALE_REQUIRE_TORCH=1`.

mod service_support;

use std::path::Path;

use dlscale_autoscaler::Status as JobStatus;
use dlscale_server::api::dto::JobView;
use dlscale_server::client::Method;
use serde_json::{json, Value};
use service_support::{assert_trained, cli, repo_root, torch_venv_or_skip, Server};

fn job(id: &str, max_gpus: u32, total_steps: u32, trace: &Path) -> Value {
    json!({"id": id, "min_batch": 32, "max_batch": 256, "max_local_batch": 64, "max_gpus": max_gpus,
           "powers_of_two": true,
           "model": {"compute_base_s": 0.01, "compute_per_sample_s": 0.0005, "sync_intra_base_s": 0.005},
           "command": ["examples/train_digits.py", "--total-steps", total_steps.to_string(),
                       "--trace", trace.display().to_string()],
           "workdir": repo_root().display().to_string(), "launcher": "torchrun",
           "env": {"DLSCALE_STEP_SLEEP": "0.1", "DLSCALE_METRICS_INTERVAL": "1", "DLSCALE_LOG_EVERY": "10"}})
}

/// Every job the server knows, ended or not, by id.
async fn every_job(server: &Server) -> Vec<JobView> {
    let mut jobs: Vec<JobView> = server
        .client
        .call(Method::GET, "/v1/jobs?all=true", None)
        .await
        .unwrap();
    jobs.sort_by(|x, y| x.id.cmp(&y.id));
    jobs
}

fn running(j: &JobView) -> bool {
    j.state == JobStatus::Running && j.engine_id("pgid").is_some()
}

#[tokio::test(flavor = "multi_thread")]
async fn three_torchrun_jobs_rescale_resume_and_survive_a_server_kill() {
    let Some(venv) =
        torch_venv_or_skip("three_torchrun_jobs_rescale_resume_and_survive_a_server_kill")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "slots = 4\ncooldown_s = 3\ninterval_s = 1\ngrace_s = 30\nmin_gain = 0.05\ntorchrun = \"{}\"\n",
        venv.join("bin/torchrun").display()
    );
    let mut server = Server::start(dir.path(), &config).await;
    let traces = dir.path().join("traces");
    std::fs::create_dir_all(&traces).unwrap();
    let totals = [("a", 4, 400u64), ("b", 2, 300), ("c", 1, 200)];
    let trace = |id: &str| traces.join(format!("{id}.trace"));

    // a alone: all 4 slots at the largest batch.
    server.submit(job("a", 4, 400, &trace("a"))).await;
    let a1 = server
        .wait_job("a", 180.0, "a training", |j| {
            running(j) && j.step.is_some_and(|s| s >= 20)
        })
        .await;
    assert_eq!((a1.gpus, a1.batch_size), (4, 256));

    // b arrives: a is rescaled (stopped at a checkpoint, relaunched smaller), b gets the rest.
    server.submit(job("b", 2, 300, &trace("b"))).await;
    let b1 = server
        .wait_job("b", 120.0, "b training", |j| {
            running(j) && j.step.is_some_and(|s| s >= 20)
        })
        .await;
    let a2 = server.job("a").await;
    assert!(a2.attempt >= 2 && a2.restarts >= 1, "{a2:?}");

    // c arrives through the CLI.
    let c_file = dir.path().join("c.json");
    std::fs::write(&c_file, job("c", 1, 200, &trace("c")).to_string()).unwrap();
    assert!(cli(&server, &["submit", c_file.to_str().unwrap()]).contains("submitted c"));
    let c1 = server
        .wait_job("c", 120.0, "c training", |j| {
            running(j) && j.step.is_some_and(|s| s >= 10)
        })
        .await;
    assert!(b1.gpus >= 1 && c1.gpus == 1);

    // kill -9 the server mid-run; the restarted server loses nothing and re-attaches. Every
    // job is listed, ended or not: one may finish just before the kill (under load, a did).
    let before = every_job(&server).await;
    server.kill9();
    server.restart().await;
    let after = every_job(&server).await;
    assert_eq!(
        after.iter().map(|j| &j.id).collect::<Vec<_>>(),
        ["a", "b", "c"]
    );
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(
            b.attempt, a.attempt,
            "{} was relaunched instead of re-attached: {a:?}",
            a.id
        );
        if b.state == JobStatus::Running {
            // Re-attached: the same process group; or killed just as it finished, its wrapper
            // gone and its last processes ending (no process group left to show), which the
            // next observation records as its success.
            let finishing = a.state == JobStatus::Running && a.engine_id("pgid").is_none();
            assert!(
                (a.state == JobStatus::Running && a.engine_id("pgid") == b.engine_id("pgid"))
                    || a.state == JobStatus::Succeeded
                    || finishing,
                "{}: {b:?} -> {a:?}",
                a.id
            );
            if finishing {
                server
                    .wait_job(&a.id, 30.0, "its end recorded", |j| {
                        j.state == JobStatus::Succeeded
                    })
                    .await;
            }
        }
    }

    for (id, _, total) in totals {
        assert_trained(&server, id, total, &trace(id), 150.0).await;
    }
    // a was rescaled: workers and batch both changed, and it resumed at its checkpoints.
    let allocations: Vec<Value> = server
        .client
        .call(Method::GET, "/v1/jobs/a/allocations", None)
        .await
        .unwrap();
    assert_eq!(
        (
            allocations[0]["gpus"].as_u64(),
            allocations[0]["batch_size"].as_u64()
        ),
        (Some(4), Some(256))
    );
    assert!(
        allocations
            .iter()
            .any(|x| x["gpus"] != allocations[0]["gpus"]
                && x["batch_size"] != allocations[0]["batch_size"]),
        "{allocations:?}"
    );
    let shown: Value =
        serde_json::from_str(&cli(&server, &["job", "a", "--format", "json"])).unwrap();
    assert_eq!(shown["state"], "succeeded");
    assert!(shown["restarts"].as_u64().unwrap() >= 1);
    let log = server
        .client
        .text("/v1/jobs/a/logs?tail_bytes=10000000")
        .await
        .unwrap();
    let stopped: Vec<&str> = log
        .lines()
        .filter_map(|l| l.strip_prefix("dlscale: stopped step="))
        .map(|r| r.split(' ').next().unwrap())
        .collect();
    let resumed: Vec<&str> = log
        .lines()
        .filter_map(|l| l.strip_prefix("dlscale: resumed step="))
        .map(|r| r.split(' ').next().unwrap())
        .collect();
    assert!(
        !stopped.is_empty() && stopped == resumed,
        "stopped {stopped:?} resumed {resumed:?}"
    );
    service_support::assert_replays(&server);
}

/// What the service showed of a job the first time it saw it running a launch, or a batch.
#[derive(Debug, Clone, Copy)]
struct SeenLaunch {
    attempt: u32,
    batch_size: u32,
    /// The job's noise scale at that moment, if its workers had reported one (infinite when
    /// unbounded).
    noise_scale: Option<f64>,
}

/// Goodput with measured statistical efficiency, for real: the worker estimates the gradient
/// noise scale from two micro-batches per step and reports it; the service takes it into the
/// job's efficiency and re-decides the batch. While a model trains its gradient shrinks and the
/// noise scale grows, so larger batches waste fewer samples: on its one GPU the job is relaunched
/// with a larger batch once the noise scale it measured has grown. It still trains to the end.
#[tokio::test(flavor = "multi_thread")]
async fn a_jobs_batch_grows_as_its_measured_noise_scale_grows() {
    let Some(venv) = torch_venv_or_skip("a_jobs_batch_grows_as_its_measured_noise_scale_grows")
    else {
        return;
    };
    batch_follows_the_noise_scale(&venv, false).await;
}

/// The same job submitted with `batch_in_place`: its batch grows with the noise scale while its
/// one launch runs on, never restarted; the worker takes each new batch from the answers to its
/// reports (`job.rebatched()`), and still trains every sample exactly once to the end.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_that_changes_batch_in_place_grows_it_without_a_restart() {
    let Some(venv) =
        torch_venv_or_skip("a_job_that_changes_batch_in_place_grows_it_without_a_restart")
    else {
        return;
    };
    let (_dir, server, seen) = batch_follows_the_noise_scale(&venv, true).await;
    let done = server.job("noisy").await;
    assert_eq!(
        (done.attempt, done.restarts),
        (1, 0),
        "relaunched: {seen:?}\n{}",
        server.log()
    );
    let log = server
        .client
        .text("/v1/jobs/noisy/logs?tail_bytes=10000000")
        .await
        .unwrap_or_default();
    assert!(
        log.lines().any(|l| l.starts_with("dlscale: rebatched ")),
        "the worker never took a new batch: {seen:?}\n{}",
        &log[log.len().saturating_sub(3000)..]
    );
}

/// Runs the noisy job to its end with the goodput utility, watching its batch and noise scale;
/// asserts that a later batch, decided on a larger measured noise scale, is larger, and that it
/// trained exactly. Returns the server (with its data directory) and what it saw at each change
/// of launch or batch.
async fn batch_follows_the_noise_scale(
    venv: &Path,
    batch_in_place: bool,
) -> (tempfile::TempDir, Server, Vec<SeenLaunch>) {
    let dir = tempfile::tempdir().unwrap();
    // No restart cost: the job lives a minute, and a restart to follow its noise scale would be
    // worth nothing at that age under the service's default 30 s.
    let config = "slots = 1\ncooldown_s = 2\ninterval_s = 1\ngrace_s = 30\nmin_gain = 0.05\n\
                  utility = \"goodput\"\nrestart_cost_s = 0\n";
    let server = Server::start(dir.path(), config).await;
    let trace = dir.path().join("noisy.trace");
    let total_steps = 5000u64;
    // The analytic model fixes throughput, so only the measured noise moves the batch. B0 = 32
    // (`batch_size`): the batch the server counts progress in, and the worker's `--init-batch`.
    server
        .submit(json!({"id": "noisy", "min_batch": 16, "max_batch": 512, "batch_size": 32,
            "max_local_batch": 512, "max_gpus": 1, "powers_of_two": true,
            "batch_in_place": batch_in_place,
            "model": {"compute_base_s": 0.01, "compute_per_sample_s": 0.0005},
            "command": [venv.join("bin/python").display().to_string(), "examples/train_digits.py",
                        "--total-steps", total_steps.to_string(), "--step-sleep", "0.004", "--measure-noise", "--init-batch", "32",
                        "--noise-window-samples", "16000", "--lr-rule", "sqrt",
                        "--trace", trace.display().to_string()],
            "workdir": repo_root().display().to_string(), "launcher": "plain",
            "env": {"DLSCALE_METRICS_INTERVAL": "1", "DLSCALE_LOG_EVERY": "20"}}))
        .await;

    let mut seen: Vec<SeenLaunch> = Vec::new();
    // The noise scale once a second, for the failure message.
    let mut noise_path: Vec<(u64, u32, f64)> = Vec::new();
    let start = std::time::Instant::now();
    // Three restarts at most, each slower while the other lanes build and train beside it.
    let deadline = start + std::time::Duration::from_secs(480);
    loop {
        let j = server.job("noisy").await;
        if j.state.is_terminal() {
            break;
        }
        let elapsed_s = start.elapsed().as_secs();
        if let Some(noise) = j.noise_scale {
            if noise_path.last().is_none_or(|&(t, _, _)| t < elapsed_s) {
                noise_path.push((elapsed_s, j.batch_size, noise.round()));
            }
        }
        let changed = |l: &SeenLaunch| l.attempt != j.attempt || l.batch_size != j.batch_size;
        if running(&j) && seen.last().is_none_or(changed) {
            // Once measured, a job's noise scale is only left out of its view when it is not
            // finite: the estimated gradient norm came out 0, late in training, and the noise
            // scale is unbounded.
            let measured_before = seen.iter().any(|l| l.noise_scale.is_some());
            seen.push(SeenLaunch {
                attempt: j.attempt,
                batch_size: j.batch_size,
                noise_scale: j.noise_scale.or(measured_before.then_some(f64::INFINITY)),
            });
        }
        assert!(
            std::time::Instant::now() < deadline,
            "noisy did not finish: {j:?}\nlaunches {seen:?}\n{}",
            server.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // Two batches decided on a measured noise scale, the later with more noise and larger.
    let measured: Vec<(f64, u32)> = seen
        .iter()
        .filter_map(|l| Some((l.noise_scale?, l.batch_size)))
        .collect();
    let grew = measured.iter().enumerate().any(|(i, &(noise, batch))| {
        measured[i + 1..]
            .iter()
            .any(|&(later_noise, later_batch)| later_noise > noise && later_batch > batch)
    });
    assert!(
        grew,
        "no larger batch after the noise scale grew: {seen:?}\n\
         (second, batch, noise scale): {noise_path:?}\n{}",
        server.log()
    );
    assert_trained(&server, "noisy", total_steps, &trace, 60.0).await;
    (dir, server, seen)
}
