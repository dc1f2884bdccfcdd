//! Training code as people write it, as dlscale jobs under `dlscale serve` with real torch
//! workers on CPU: the plain `DataLoader` loop, the Lightning module and the Hugging Face
//! `Trainer` script of `examples/adopt/` (their diffs from the user's own scripts are in
//! python/README.md). Each is rescaled (stopped at a checkpoint, relaunched on
//! other GPUs) and changes its batch in place; the worker library's sample log shows that no
//! sample was lost or repeated on any rank, its log that the learning rate followed every batch,
//! and the service that its metrics and gradient noise arrived. Skips (passes with a message)
//! when the torch venv is missing, unless `DLSCALE_REQUIRE_TORCH=1`.

mod service_support;

use dlscale_autoscaler::Status as JobStatus;
use serde_json::json;
use service_support::{
    assert_each_sample_once, assert_replays, losses, repo_root, torch_venv_or_skip, Server, WORKER,
};

/// scikit-learn's digits: the data set of the loop and the Lightning module.
const DIGITS: usize = 1797;
/// The Hugging Face example's toy language: its sequences.
const COUNTING_SEQUENCES: usize = 2048;
/// The noise scale the jobs are submitted with (samples): the service starts them on both slots
/// at a batch it suits, until their workers' measured one replaces it.
const SUBMITTED_NOISE_SCALE: f64 = 100.0;
/// The global batch the examples' learning rates are tuned for: the jobs' `batch_size` (B0).
const BASE_BATCH: u32 = 32;

/// The learning-rate lines of a job's log (`dlscale: lr batch_size=B factor=F ...`): every one
/// scales linearly from the base batch. Returns the batches.
fn assert_lr_followed_the_batch(log: &str) -> Vec<u32> {
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("dlscale: lr "))
        .collect();
    lines
        .iter()
        .map(|line| {
            let field = |name: &str| {
                line.split_whitespace()
                    .find_map(|t| t.strip_prefix(name))
                    .unwrap_or_else(|| panic!("no {name} in {line}"))
                    .to_owned()
            };
            let batch: u32 = field("batch_size=").parse().unwrap();
            let factor: f64 = field("factor=").parse().unwrap();
            assert_eq!(field("base_batch="), BASE_BATCH.to_string(), "{line}");
            assert!(
                (factor - f64::from(batch) / f64::from(BASE_BATCH)).abs() < 1e-5,
                "{line}"
            );
            batch
        })
        .collect()
}

/// A `DataLoader` loop (`examples/adopt/loop_dlscale.py`).
#[tokio::test(flavor = "multi_thread")]
async fn a_dataloader_loop_is_rescaled_and_rebatched_without_losing_a_sample() {
    rescaled_and_rebatched(
        "a_dataloader_loop_is_rescaled_and_rebatched_without_losing_a_sample",
        &["examples/adopt/loop_dlscale.py", "--epochs", "150"],
        DIGITS,
    )
    .await;
}

/// A Lightning module (`examples/adopt/lit_dlscale.py`, `dlscale.lightning.DlscaleCallback`).
#[tokio::test(flavor = "multi_thread")]
async fn a_lightning_module_is_rescaled_and_rebatched_without_losing_a_sample() {
    rescaled_and_rebatched(
        "a_lightning_module_is_rescaled_and_rebatched_without_losing_a_sample",
        &[
            "examples/adopt/lit_dlscale.py",
            "--max-steps",
            "4000",
            "--out",
            "{dir}/lightning",
        ],
        DIGITS,
    )
    .await;
}

/// A Hugging Face `Trainer` script (`examples/adopt/hf_trainer_dlscale.py`,
/// `dlscale.hf.prepare`).
#[tokio::test(flavor = "multi_thread")]
async fn a_hugging_face_trainer_is_rescaled_and_rebatched_without_losing_a_sample() {
    rescaled_and_rebatched(
        "a_hugging_face_trainer_is_rescaled_and_rebatched_without_losing_a_sample",
        &[
            "examples/adopt/hf_trainer_dlscale.py",
            "--max-steps",
            "4000",
            "--out",
            "{dir}/hf",
        ],
        COUNTING_SEQUENCES,
    )
    .await;
}

/// Runs `command` (`{dir}` in it: the server's data directory) as the job `adopted`, submitted
/// with a moderate analytic noise scale: the service starts it on both slots; once its workers'
/// measured noise scale arrives, the batch changes in place. A second job then takes a slot: the
/// job is stopped at a checkpoint and relaunched on one, and on two again when that job ends. It
/// must succeed with every sample trained once per epoch on every rank (`dataset_len` samples),
/// the LR scaled for every batch, its metrics and noise scale reported and its loss fallen.
async fn rescaled_and_rebatched(test: &str, command: &[&str], dataset_len: usize) {
    let Some(venv) = torch_venv_or_skip(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "slots = 2\ncooldown_s = 2\ninterval_s = 1\ngrace_s = 30\nmin_gain = 0.05\n\
         utility = \"goodput\"\nrestart_cost_s = 0\ntorchrun = \"{}\"\n",
        venv.join("bin/torchrun").display()
    );
    let server = Server::start(dir.path(), &config).await;
    let samples = dir.path().join("samples");
    let command: Vec<String> = command
        .iter()
        .map(|a| a.replace("{dir}", &dir.path().display().to_string()))
        .collect();
    server
        .submit(json!({"id": "adopted", "min_batch": 16, "max_batch": 512, "batch_size": BASE_BATCH,
            "max_local_batch": 256, "max_gpus": 2, "powers_of_two": true, "batch_in_place": true,
            "model": {"compute_base_s": 0.01, "compute_per_sample_s": 0.0005, "sync_intra_base_s": 0.005,
                      "noise_scale": SUBMITTED_NOISE_SCALE, "init_batch": BASE_BATCH},
            "command": command, "workdir": repo_root().display().to_string(), "launcher": "torchrun",
            "env": {"DLSCALE_SAMPLE_LOG": samples.display().to_string(),
                    "DLSCALE_METRICS_INTERVAL": "1"}}))
        .await;
    // Its first launch, before any report could change its batch (a fast one rebatches within
    // its first fifty steps).
    let first = server
        .wait_job("adopted", 120.0, "the job launched on both slots", |j| {
            j.state == JobStatus::Running && j.gpus == 2
        })
        .await;
    let rebatched = server
        .wait_job(
            "adopted",
            120.0,
            "a measured noise scale and a batch changed in place",
            |j| {
                // The noise scale its workers measured replaced the submitted one (None: they
                // measured a gradient of norm 0 and the noise scale is unbounded, as a toy
                // language learnt to a loss near 0 does).
                j.noise_scale != Some(SUBMITTED_NOISE_SCALE)
                    && j.attempt == first.attempt
                    && j.batch_size != first.batch_size
            },
        )
        .await;

    let other = json!({"id": "other", "min_batch": 32, "max_batch": 32, "max_local_batch": 32, "max_gpus": 1,
        "model": {"compute_base_s": 0.01, "compute_per_sample_s": 0.001},
        "command": ["sh", "-c", WORKER], "workdir": "/tmp", "launcher": "plain",
        "env": {"TOTAL": "150"}});
    server.submit(other).await;
    server
        .wait_job("adopted", 120.0, "the job relaunched on one slot", |j| {
            j.attempt > rebatched.attempt && j.state == JobStatus::Running && j.gpus == 1
        })
        .await;
    let done = server
        .wait_job("adopted", 400.0, "the job's end", |j| j.state.is_terminal())
        .await;
    let log = server
        .client
        .text("/v1/jobs/adopted/logs?tail_bytes=10000000")
        .await
        .unwrap_or_default();
    assert_eq!(
        (done.state, done.exit_code),
        (JobStatus::Succeeded, Some(0)),
        "{done:?}\n{}\n--- the job's log, the end ---\n{}",
        server.log(),
        &log[log.len().saturating_sub(6000)..]
    );
    assert!(done.restarts >= 1, "{done:?}");
    assert!(
        log.lines().any(|l| l.starts_with("dlscale: rebatched ")),
        "{log}"
    );
    let steps = assert_each_sample_once(&samples, dataset_len);
    assert_eq!(Some(steps), done.step);
    let batches = assert_lr_followed_the_batch(&log);
    assert!(
        batches.len() > done.restarts as usize + 1 && batches.windows(2).any(|w| w[0] != w[1]),
        "one LR line per launch and per rebatch: {batches:?}"
    );
    let l = losses(&log);
    assert!(
        l.len() >= 5 && l[l.len() - 1] < 0.5 * l[0],
        "the loss did not fall: {l:?}"
    );
    assert_replays(&server);
}
