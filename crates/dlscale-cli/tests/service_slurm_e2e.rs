//! End to end on a real Slurm cluster: `scripts/slurm-local.sh up --nodes 2 --gpus-per-node 4`
//! (two nodes × 4 fake GPUs; `SLURM_CONF` exported). `dlscale serve` runs with the Slurm
//! executor; jobs are real Slurm batch jobs.
//!
//! * Three real `examples/train_digits.py` torchrun jobs arrive at different times: one spans
//!   both nodes, jobs are rescaled (GPUs and batch) as others arrive and finish, every job's step
//!   trace runs 1..=total with nothing lost or repeated, and a `kill -9` of the server mid-run is
//!   followed by adoption of the running Slurm jobs, never a duplicate (watched in `squeue` for
//!   the whole run).
//! * Reconciliation with cheap plain jobs: GPUs held by a job dlscale did not submit are left
//!   out, a stale launch carrying the server's name is cancelled, a job Slurm requeues is
//!   cancelled and submitted afresh, and a job cancelled with `scancel` is recorded as cancelled.
//!
//! Skips (passes with a SKIP message) when Slurm is not reachable, unless
//! `DLSCALE_REQUIRE_SLURM=1`.

mod service_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use dlscale_autoscaler::Status as JobStatus;
use dlscale_server::api::dto::JobView;
use dlscale_server::client::Method;
use serde_json::{json, Value};
use service_support::slurm::{
    clear_queue, instance, ours, required, run, slurm_ready, CancelOnDrop, KeepOnFailure, Queued,
    PARTITION, SLURM,
};
use service_support::{
    assert_trained, cli, repo_root, torch_venv_or_skip, venv, wait_until, Server, Watch,
};

/// The torch venv for test `test`, or `None` (it is skipped, saying why) when it is unusable;
/// an unusable venv fails the test where Slurm is required (or torch: `torch_venv_or_skip`).
fn torch_venv(test: &str) -> Option<std::path::PathBuf> {
    if let (true, Err(why)) = (required(), venv()) {
        panic!("the torch venv is unusable: {why} (run scripts/setup-python.sh)");
    }
    torch_venv_or_skip(test)
}

/// Per dlscale job: the most Slurm jobs active at once, and those jobs.
type MostActive = BTreeMap<String, (usize, Vec<Queued>)>;

/// Watches `squeue` in the background and records, per dlscale job, the most Slurm jobs that
/// were active at once (completing ones included).
fn watch_queue(instance: String) -> Watch<MostActive> {
    Watch::start(Duration::from_millis(300), move |most: &mut MostActive| {
        for (id, active) in ours(&instance) {
            let e = most.entry(id).or_insert((0, Vec::new()));
            if active.len() > e.0 {
                *e = (active.len(), active);
            }
        }
    })
}

/// A train_digits job; at most 32 samples per worker, so its batch follows its GPUs.
fn torch_job(id: &str, max_gpus: u32, total_steps: u64, trace: &Path) -> Value {
    json!({"id": id, "min_batch": 32, "max_batch": 256, "max_local_batch": 32, "max_gpus": max_gpus,
           "powers_of_two": true,
           "model": {"compute_base_s": 0.01, "compute_per_sample_s": 0.0005, "sync_intra_base_s": 0.005},
           "command": ["examples/train_digits.py", "--total-steps", total_steps.to_string(),
                       "--trace", trace.display().to_string()],
           "workdir": repo_root().display().to_string(), "launcher": "torchrun",
           "env": {"DLSCALE_STEP_SLEEP": "0.05", "DLSCALE_METRICS_INTERVAL": "1", "DLSCALE_LOG_EVERY": "10"}})
}

/// Slurm's job id of `j`'s launch, while it holds GPUs.
fn slurm_job_id(j: &JobView) -> Option<u64> {
    j.engine_id("slurm_job_id").map(|id| id.parse().unwrap())
}

fn on_slurm(j: &JobView) -> bool {
    j.state == JobStatus::Running && slurm_job_id(j).is_some()
}

fn shape(j: &JobView) -> Vec<(String, u32)> {
    j.nodes
        .iter()
        .map(|s| (s.node.to_string(), s.gpus))
        .collect()
}

async fn jobs(server: &Server) -> Vec<JobView> {
    server
        .client
        .call(Method::GET, "/v1/jobs", None)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn torch_jobs_span_nodes_rescale_and_are_adopted_after_a_server_kill() {
    const NAME: &str = "torch_jobs_span_nodes_rescale_and_are_adopted_after_a_server_kill";
    if !slurm_ready(NAME) {
        return;
    }
    let Some(venv) = torch_venv(NAME) else {
        return;
    };
    let _one_at_a_time = SLURM.lock().await;
    clear_queue();
    let t0 = Instant::now();
    let lap = |what: &str| eprintln!("[{:6.1} s] {what}", t0.elapsed().as_secs_f64());
    // Kept when the test fails (job logs, scripts, server logs); removed when it passes.
    let dir = KeepOnFailure(tempfile::tempdir().unwrap().keep());
    let config = format!(
        "executor = \"slurm\"\ncooldown_s = 3\ninterval_s = 1\ngrace_s = 30\nmin_gain = 0.05\ntorchrun = \"{}\"\n\n[slurm]\npartition = \"{PARTITION}\"\npoll_s = 0.5\n",
        venv.join("bin/torchrun").display()
    );
    // Dropped after the server is killed, so nothing resubmits what it cancels.
    let _cleanup = CancelOnDrop(dir.0.clone());
    let mut server = Server::start(&dir.0, &config).await;
    let inst = instance(&dir.0);
    let watch = watch_queue(inst.clone());
    let traces = dir.0.join("traces");
    std::fs::create_dir_all(&traces).unwrap();
    let trace = |id: &str| traces.join(format!("{id}.trace"));
    let totals = [("a", 8, 900u64), ("b", 2, 200), ("c", 1, 120)];

    // a alone: all 8 GPUs, packed as 4 on each of the two nodes, one Slurm job.
    server.submit(torch_job("a", 8, 900, &trace("a"))).await;
    let a1 = server
        .wait_job("a", 150.0, "a training on 8 GPUs", |j| {
            on_slurm(j) && j.step.is_some_and(|s| s >= 20)
        })
        .await;
    lap("a trains on 8 GPUs");
    assert_eq!((a1.gpus, a1.batch_size), (8, 256), "{a1:?}");
    assert_eq!(shape(&a1), [("n1".to_string(), 4), ("n2".to_string(), 4)]);
    let q = ours(&inst);
    assert_eq!(q["a"].len(), 1, "{q:?}");
    assert_eq!(
        (q["a"][0].slurm_id, q["a"][0].nodes.as_str()),
        (slurm_job_id(&a1).unwrap(), "n[1-2]")
    );

    // b arrives: a is stopped at a checkpoint and resubmitted smaller; b gets the rest.
    server.submit(torch_job("b", 2, 200, &trace("b"))).await;
    let b1 = server
        .wait_job("b", 150.0, "b training", |j| {
            on_slurm(j) && j.step.is_some_and(|s| s >= 20)
        })
        .await;
    lap("b trains");
    let a2 = server.job("a").await;
    assert!(
        a2.attempt >= 2 && a2.restarts >= 1 && a2.gpus < 8,
        "a was not rescaled: {a2:?}"
    );
    assert_eq!(b1.gpus, 2, "{b1:?}");

    // c arrives through the CLI.
    let c_file = dir.0.join("c.json");
    std::fs::write(&c_file, torch_job("c", 1, 120, &trace("c")).to_string()).unwrap();
    assert!(cli(&server, &["submit", c_file.to_str().unwrap()]).contains("submitted c"));
    server
        .wait_job("c", 150.0, "c training", |j| {
            on_slurm(j) && j.step.is_some_and(|s| s >= 10)
        })
        .await;
    lap("c trains");

    // kill -9 the server mid-run: the Slurm jobs keep running, and the restarted server adopts
    // them (same attempt, same Slurm job) instead of submitting them again.
    let before = jobs(&server).await;
    server.kill9();
    lap("server killed");
    let q = ours(&inst);
    for j in before.iter().filter(|j| on_slurm(j)) {
        let live = q.get(&j.id).cloned().unwrap_or_default();
        assert_eq!(live.len(), 1, "{}: {live:?}", j.id);
        assert_eq!(Some(live[0].slurm_id), slurm_job_id(j), "{}", j.id);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.restart().await;
    tokio::time::sleep(Duration::from_secs(3)).await; // several squeue polls
    let after: Vec<JobView> = server
        .client
        .call(Method::GET, "/v1/jobs?all=true", None)
        .await
        .unwrap();
    lap("server restarted");
    let mut ids: Vec<&str> = after.iter().map(|j| j.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["a", "b", "c"]);
    for b in &before {
        let a = after.iter().find(|a| a.id == b.id).unwrap();
        if on_slurm(b) && !a.state.is_terminal() {
            assert_eq!(
                (a.attempt, slurm_job_id(a)),
                (b.attempt, slurm_job_id(b)),
                "{} was resubmitted instead of adopted: {b:?} -> {a:?}",
                a.id
            );
        }
    }
    for (id, live) in ours(&inst) {
        assert!(live.len() <= 1, "{id} runs twice in Slurm: {live:?}");
    }

    for (id, _, total) in totals {
        assert_trained(&server, id, total, &trace(id), 240.0).await;
        lap(&format!("{id} finished"));
    }

    // a spanned both nodes, shrank (GPUs and batch) as b and c arrived and grew again after
    // they finished.
    let allocations: Vec<Value> = server
        .client
        .call(Method::GET, "/v1/jobs/a/allocations", None)
        .await
        .unwrap();
    let gpus: Vec<u64> = allocations
        .iter()
        .map(|x| x["gpus"].as_u64().unwrap())
        .collect();
    assert_eq!(allocations[0]["nodes"].as_array().map(Vec::len), Some(2));
    assert!(
        allocations
            .iter()
            .any(|x| x["gpus"] != allocations[0]["gpus"]
                && x["batch_size"] != allocations[0]["batch_size"]),
        "{allocations:?}"
    );
    let lowest = gpus.iter().position(|&g| g == *gpus.iter().min().unwrap());
    assert!(
        lowest.is_some_and(|i| gpus[i..].iter().any(|&g| g > gpus[i])),
        "a never grew after shrinking: {gpus:?}"
    );
    let most = watch.finish();
    for (id, (n, jobs)) in &most {
        assert_eq!(*n, 1, "{id} ran as {n} Slurm jobs at once: {jobs:?}");
    }
    assert_eq!(most.len(), 3, "{most:?}");
    service_support::assert_replays(&server);
    lap(&format!("done; allocations of a: {gpus:?}"));
}

fn plain_job(id: &str, max_gpus: u32) -> Value {
    json!({"id": id, "min_batch": 8, "max_batch": 64, "max_local_batch": 64, "max_gpus": max_gpus,
           "powers_of_two": true,
           "model": {"compute_per_sample_s": 0.0005, "sync_intra_base_s": 0.001},
           "command": ["bash", "-c", "trap 'exit 75' TERM; echo \"$SLURMD_NODENAME ws=$DLSCALE_WORLD_SIZE\"; while :; do sleep 0.2; done"],
           "workdir": "/tmp", "launcher": "plain"})
}

async fn cluster(server: &Server) -> Value {
    server.json(Method::GET, "/v1/cluster", None).await.1
}

#[tokio::test(flavor = "multi_thread")]
async fn reconciles_foreign_gpus_stale_launches_requeues_and_scancel() {
    const NAME: &str = "reconciles_foreign_gpus_stale_launches_requeues_and_scancel";
    if !slurm_ready(NAME) {
        return;
    }
    let _one_at_a_time = SLURM.lock().await;
    clear_queue();
    // A job dlscale did not submit holds 3 GPUs of n1.
    let foreign = run(
        "sbatch",
        &[
            "--parsable",
            "--job-name=dlscale-test-foreign",
            "--nodelist=n1",
            "--gres=gpu:3",
            "--output=/dev/null",
            "--wrap",
            "sleep 300",
        ],
    );
    let foreign = foreign.trim().split(';').next().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "executor = \"slurm\"\ncooldown_s = 1\ninterval_s = 0.5\ngrace_s = 5\nmin_gain = 0.05\n\n[slurm]\npartition = \"{PARTITION}\"\npoll_s = 0.5\n"
    );
    let _cleanup = CancelOnDrop(dir.path().to_path_buf());
    let server = Server::start(dir.path(), &config).await;
    let inst = instance(dir.path());
    wait_until(
        30.0,
        "capacity 5 (3 GPUs of n1 held by the foreign job)",
        || async { cluster(&server).await["capacity"] == 5 },
    )
    .await;
    let c = cluster(&server).await;
    assert_eq!(c["executor"], "slurm");
    assert_eq!(
        c["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| (
                n["name"].clone(),
                n["gpus"].clone(),
                n["total_gpus"].clone()
            ))
            .collect::<Vec<_>>(),
        [
            (json!("n1"), json!(1), json!(4)),
            (json!("n2"), json!(4), json!(4))
        ]
    );

    // p (up to 8 GPUs, powers of two) gets 4, all on n2: 8 does not fit and 4 = 2 + 2 is not
    // packed when one node has room.
    server.submit(plain_job("p", 8)).await;
    let p1 = server.wait_job("p", 30.0, "p on 4 GPUs", on_slurm).await;
    assert_eq!(shape(&p1), [("n2".to_string(), 4)], "{p1:?}");

    // The foreign job ends: p grows to both nodes.
    run("scancel", &[&foreign]);
    let p2 = server
        .wait_job("p", 40.0, "p on 8 GPUs", |j| on_slurm(j) && j.gpus == 8)
        .await;
    assert_eq!(shape(&p2), [("n1".to_string(), 4), ("n2".to_string(), 4)]);
    assert!(p2.attempt > p1.attempt);

    // A launch under the server's name that is not p's current one (a stale attempt) is
    // cancelled; p itself keeps running.
    let stale = run(
        "sbatch",
        &[
            "--parsable",
            &format!("--job-name=dlscale:{inst}:p:{}", p1.attempt),
            "--output=/dev/null",
            "--wrap",
            "sleep 300",
        ],
    );
    let stale: u64 = stale.trim().split(';').next().unwrap().parse().unwrap();
    wait_until(20.0, "the stale launch to be cancelled", || async {
        ours(&inst)["p"].iter().all(|q| q.slurm_id != stale)
    })
    .await;
    let p3 = server.job("p").await;
    assert_eq!(
        (p3.attempt, slurm_job_id(&p3), p3.state),
        (p2.attempt, slurm_job_id(&p2), JobStatus::Running)
    );

    // Slurm requeues p (a running job can be requeued): dlscale cancels the requeued job and
    // submits p afresh, once.
    let sid = slurm_job_id(&p3).unwrap().to_string();
    wait_until(30.0, "p's Slurm job to run", || async {
        ours(&inst)["p"]
            .iter()
            .any(|q| q.slurm_id.to_string() == sid && q.state == "RUNNING")
    })
    .await;
    run("scontrol", &["requeue", &sid]);
    let p4 = server
        .wait_job("p", 60.0, "p resubmitted after the requeue", |j| {
            on_slurm(j) && j.attempt > p3.attempt
        })
        .await;
    assert_ne!(slurm_job_id(&p4), slurm_job_id(&p3));
    wait_until(30.0, "one Slurm job for p", || async {
        ours(&inst).get("p").map(Vec::len) == Some(1)
    })
    .await;
    let job: JobView = server.job("p").await;
    assert!(
        job.events
            .iter()
            .any(|e| e.kind == "stop" && e.detail.contains("requeued")),
        "{:?}",
        job.events
    );

    // scancel by hand: recorded as cancelled, not relaunched.
    let sid = slurm_job_id(&p4).unwrap().to_string();
    run("scancel", &[&sid]);
    let done = server
        .wait_job("p", 30.0, "p cancelled", |j| j.state.is_terminal())
        .await;
    assert_eq!(done.state, JobStatus::Cancelled, "{done:?}");
    assert!(done.message.contains("scancel"), "{done:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !ours(&inst).contains_key("p"),
        "p was relaunched: {:?}",
        ours(&inst)
    );
    assert_eq!(server.job("p").await.attempt, p4.attempt);
}

/// `examples/plain_job.py` (no worker library: it checkpoints on SIGTERM and exits 0).
fn counter_job(id: &str, max_gpus: u32, steps: u32, trace: &Path) -> Value {
    json!({"id": id, "min_batch": 8, "max_batch": 64, "max_local_batch": 8, "max_gpus": max_gpus,
           "powers_of_two": true,
           "model": {"compute_per_sample_s": 0.0005, "sync_intra_base_s": 0.001},
           "command": ["python3", repo_root().join("examples/plain_job.py").display().to_string(),
                       "--steps", steps.to_string(), "--step-s", "0.1",
                       "--trace", trace.display().to_string()],
           "workdir": "/tmp", "launcher": "plain"})
}

/// The two regressions of issue 8 on Slurm: a `plain` job given two nodes runs its command once
/// (it ran once per node, twice over the same checkpoint); a plain job stopped for a rescale that
/// exits 0 is relaunched and runs every step exactly once. And `launcher = "srun"` runs the
/// command once per node, with the node's rank. A team's launches are charged to its account,
/// and to a reloaded one without a restart.
#[tokio::test(flavor = "multi_thread")]
async fn plain_runs_once_srun_once_per_node_and_a_stopped_plain_job_resumes() {
    const NAME: &str = "plain_runs_once_srun_once_per_node_and_a_stopped_plain_job_resumes";
    if !slurm_ready(NAME) {
        return;
    }
    let _one_at_a_time = SLURM.lock().await;
    clear_queue();
    let dir = tempfile::tempdir().unwrap();
    // b's team charges its launches to an account of its own (no guarantee: nothing else
    // changes).
    let config = format!(
        "executor = \"slurm\"\ncooldown_s = 1\ninterval_s = 0.5\ngrace_s = 10\nmin_gain = 0.05\n\n[slurm]\npartition = \"{PARTITION}\"\npoll_s = 0.5\n[teams.t]\nslurm_account = \"proj-t\"\n"
    );
    let _cleanup = CancelOnDrop(dir.path().to_path_buf());
    let server = Server::start(dir.path(), &config).await;
    let trace = dir.path().join("a.trace");
    server.submit(counter_job("a", 8, 150, &trace)).await;
    let a1 = server
        .wait_job("a", 60.0, "a on both nodes", |j| on_slurm(j) && j.gpus == 8)
        .await;
    assert_eq!(shape(&a1).len(), 2, "{a1:?}");
    // Past the cooldown and a few steps in, b arrives: a shrinks, and its launch that exits 0
    // after the stop is a stop.
    wait_until(30.0, "a few steps of a", || async {
        service_support::read_trace(&trace).len() >= 10
    })
    .await;
    let mut b = counter_job("b", 4, 20, &dir.path().join("b.trace"));
    b["team"] = json!("t");
    server.submit(b).await;
    let b1 = server.wait_job("b", 60.0, "b on Slurm", on_slurm).await;
    let slurm_id = slurm_job_id(&b1).unwrap().to_string();
    // scontrol shows the job a while after it ends too.
    let shown = std::process::Command::new("scontrol")
        .args(["-o", "show", "job", &slurm_id])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains(" Account=proj-t "), "{shown}");
    for id in ["a", "b"] {
        let done = server
            .wait_job(id, 120.0, "the end", |j| j.state.is_terminal())
            .await;
        assert_eq!(
            done.state,
            JobStatus::Succeeded,
            "{done:?}\n{}",
            server.log()
        );
    }
    let rows = service_support::read_trace(&trace);
    let steps: Vec<u64> = rows.iter().map(|r| r["step"].as_u64().unwrap()).collect();
    assert_eq!(
        steps,
        (1..=150).collect::<Vec<_>>(),
        "steps lost or repeated"
    );
    let mut pids: BTreeMap<u64, std::collections::BTreeSet<u64>> = BTreeMap::new();
    for r in &rows {
        pids.entry(r["attempt"].as_u64().unwrap())
            .or_default()
            .insert(r["pid"].as_u64().unwrap());
    }
    assert!(pids.len() >= 2, "a was never rescaled: {pids:?}");
    assert!(
        pids.values().all(|p| p.len() == 1),
        "a launch ran the command more than once: {pids:?}"
    );

    // A reload gives team t another account: the next launches are charged to it.
    server.reload(&config.replace("\"proj-t\"", "\"proj-t2\""));
    wait_until(10.0, "the new account taken", || async {
        server.log().contains("teams' Slurm accounts: t → proj-t2")
    })
    .await;
    // srun: one task per node, each with its node rank.
    let ranks = dir.path().join("ranks");
    server
        .submit(json!({"id": "s", "min_batch": 8, "max_batch": 8, "max_local_batch": 1,
            "min_gpus": 8, "max_gpus": 8, "model": {"compute_per_sample_s": 0.001},
            "command": ["bash", "-c", format!("echo \"$DLSCALE_NODE_RANK $SLURMD_NODENAME $DLSCALE_NODES $SLURM_JOB_ACCOUNT\" >> {}", ranks.display())],
            "workdir": "/tmp", "launcher": "srun", "team": "t"}))
        .await;
    let done = server
        .wait_job("s", 60.0, "the end", |j| j.state.is_terminal())
        .await;
    assert_eq!(done.state, JobStatus::Succeeded, "{done:?}");
    let mut lines: Vec<String> = std::fs::read_to_string(&ranks)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    assert_eq!(lines, ["0 n1 2 proj-t2", "1 n2 2 proj-t2"]);
}

/// No lock is held across an external command: while every `squeue` takes 10 s, the API still
/// answers reads and metrics reports at once. And submissions the controller does not answer
/// are relaunched, not counted as the job's failures.
#[tokio::test(flavor = "multi_thread")]
async fn the_api_answers_at_once_while_squeue_hangs() {
    const NAME: &str = "the_api_answers_at_once_while_squeue_hangs";
    if !slurm_ready(NAME) {
        return;
    }
    let _one_at_a_time = SLURM.lock().await;
    clear_queue();
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let real = run("sh", &["-c", "command -v squeue"]).trim().to_string();
    let calls = dir.path().join("squeue-calls");
    let wrapper = bin.join("squeue");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho start >> {calls}\nsleep 10\necho end >> {calls}\nexec {real} \"$@\"\n",
            calls = calls.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    // And the controller does not answer the first three submissions, as while it restarts:
    // more than max_retries (2), which failed the job before; the cluster's doing, not the job's.
    let real_sbatch = run("sh", &["-c", "command -v sbatch"]).trim().to_string();
    let refusals = dir.path().join("sbatch-refusals");
    let sbatch = bin.join("sbatch");
    std::fs::write(
        &sbatch,
        format!(
            "#!/bin/sh
if [ \"$(wc -l < {r} 2>/dev/null || echo 0)\" -lt 3 ]; then
  echo x >> {r}
  echo 'sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)' >&2
  exit 1
fi
exec {real_sbatch} \"$@\"
",
            r = refusals.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&sbatch, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let config = format!(
        "executor = \"slurm\"\ncooldown_s = 1\ninterval_s = 0.5\ngrace_s = 5\n\n[slurm]\npartition = \"{PARTITION}\"\npoll_s = 0.5\n"
    );
    let _cleanup = CancelOnDrop(dir.path().to_path_buf());
    let server =
        Server::start_with_env(dir.path(), &config, vec![("PATH".to_string(), path)]).await;
    server
        .submit(
            json!({"id": "m", "min_batch": 8, "max_batch": 8, "max_local_batch": 8,
            "max_gpus": 1, "model": {"compute_per_sample_s": 0.001},
            "command": ["sleep", "120"], "workdir": "/tmp", "launcher": "plain"}),
        )
        .await;
    let j = server
        .wait_job("m", 30.0, "m launched", |j| {
            j.state.holds_gpus() && j.attempt >= 4
        })
        .await;
    assert_eq!(j.failures, 0, "{j:?}");
    let (_, view) = server.json(Method::GET, "/v1/jobs/m", None).await;
    assert!(
        view.to_string()
            .contains("the cluster's doing, not a failure of the job: relaunched"),
        "{view}"
    );
    wait_until(30.0, "a squeue call in flight", || async {
        std::fs::read_to_string(&calls).is_ok_and(|t| t.lines().count() % 2 == 1)
    })
    .await;
    let report = json!({"step": 1, "samples_per_s": 10.0, "batch_size": 8, "world_size": 1,
        "loss": 1.0, "samples_seen": 8, "attempt": j.attempt});
    let (mut reads, mut reports) = (Vec::new(), Vec::new());
    let started = Instant::now();
    for step in 1..=100u64 {
        let t = Instant::now();
        let (status, _) = server.json(Method::GET, "/v1/jobs", None).await;
        reads.push(t.elapsed());
        assert_eq!(status, 200);
        let mut r = report.clone();
        r["step"] = json!(step);
        let t = Instant::now();
        let (status, body) = server
            .json(Method::POST, "/v1/jobs/m/metrics", Some(r))
            .await;
        reports.push(t.elapsed());
        assert_eq!(status, 202, "{body}");
    }
    // The pollers call squeue one after the other: one call hangs at any time.
    let text = std::fs::read_to_string(&calls).unwrap();
    let count = |what: &str| text.lines().filter(|l| *l == what).count();
    assert!(
        count("start") > count("end"),
        "no squeue call was hanging at the end of the measurement ({:?}): {text:?}",
        started.elapsed()
    );
    for (what, mut times) in [("GET /v1/jobs", reads), ("POST metrics", reports)] {
        times.sort();
        let p99 = times[times.len() * 99 / 100 - 1];
        // The hang is 10 s; answers within a fifth of it did not wait on it. On a loaded
        // machine (the suite's torch tests run beside this one) a few reports, each a database
        // commit, took up to 0.9 s.
        assert!(
            p99 < Duration::from_secs(2),
            "{what}: p99 {p99:?} while squeue hangs (all: {times:?})"
        );
    }
    let (status, _) = server.json(Method::DELETE, "/v1/jobs/m", None).await;
    assert_eq!(status, 202);
}

/// A second Slurm cluster beside the first, of two GPU types (`slurm-local.sh up --gpu-types
/// t4,a100`: n1 four T4s, n2 four A100s, typed GRES), on its own port and state directory;
/// brought down, its state removed, when dropped.
struct TypedCluster {
    dir: std::path::PathBuf,
    conf: String,
}

impl TypedCluster {
    const PORT: &'static str = "7917";

    fn up() -> TypedCluster {
        let dir = std::env::temp_dir().join("dlscale-slurm-typed");
        let out = std::process::Command::new(repo_root().join("scripts/slurm-local.sh"))
            .args([
                "up",
                "--nodes",
                "2",
                "--gpus-per-node",
                "4",
                "--gpu-types",
                "t4,a100",
            ])
            .env("DLSCALE_SLURM_DIR", &dir)
            .env("DLSCALE_SLURM_PORT", Self::PORT)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let conf = dir.join("etc/slurm.conf").display().to_string();
        TypedCluster { dir, conf }
    }
}

impl Drop for TypedCluster {
    fn drop(&mut self) {
        let _ = std::process::Command::new(repo_root().join("scripts/slurm-local.sh"))
            .args(["down", "--purge"])
            .env("DLSCALE_SLURM_DIR", &self.dir)
            .env("DLSCALE_SLURM_PORT", Self::PORT)
            .output();
    }
}

/// Issue 29 on Slurm with two GPU types: a learned torch job starts on T4 (the A100s are held by
/// a job that may run only there), reports its step times there, and moves to A100 when they
/// free up, as the decision says it pays (what it measured on T4, sped up by the bundled ratio
/// of A100 over T4), asking Slurm for the typed GRES; every step runs exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn a_learned_job_moves_from_t4_to_a100_on_a_typed_slurm_cluster() {
    const NAME: &str = "a_learned_job_moves_from_t4_to_a100_on_a_typed_slurm_cluster";
    if !slurm_ready(NAME) {
        return;
    }
    let Some(venv) = torch_venv(NAME) else {
        return;
    };
    let _one_at_a_time = SLURM.lock().await;
    let typed = TypedCluster::up();
    // Kept when the test fails (job logs, scripts, server logs); removed when it passes.
    let dir = KeepOnFailure(tempfile::tempdir().unwrap().keep());
    // A restart costs 1 s of progress: the move pays once the job has run a few seconds.
    let config = format!(
        "executor = \"slurm\"\ncooldown_s = 1\ninterval_s = 0.5\ngrace_s = 10\nmin_gain = 0.05\nrestart_cost_s = 1\ntorchrun = \"{}\"\n\n[slurm]\npartition = \"{PARTITION}\"\npoll_s = 0.5\n",
        venv.join("bin/torchrun").display()
    );
    let env = vec![("SLURM_CONF".to_string(), typed.conf.clone())];
    let server = Server::start_with_env(&dir.0, &config, env).await;
    let mut big = counter_job("big", 4, 100, &dir.0.join("big.trace"));
    big["min_gpus"] = json!(4);
    big["types"] = json!({"a100": {}});
    server.submit(big).await;
    let b = server.wait_job("big", 60.0, "big on Slurm", on_slurm).await;
    assert_eq!(shape(&b), [("n2".to_string(), 4)], "{b:?}");
    // The learned job: no model, so it is learned from its reports.
    let trace = dir.0.join("l.trace");
    let mut learned = torch_job("l", 4, 400, &trace);
    learned.as_object_mut().unwrap().remove("model");
    server.submit(learned).await;
    let on_t4 = server.wait_job("l", 120.0, "l on Slurm", on_slurm).await;
    assert!(shape(&on_t4).iter().all(|(n, _)| n == "n1"), "{on_t4:?}");
    let done = server
        .wait_job("big", 120.0, "big's end", |j| j.state.is_terminal())
        .await;
    assert_eq!(done.state, JobStatus::Succeeded, "{done:?}");
    let moved = server
        .wait_job("l", 120.0, "l on the A100s", |j| {
            on_slurm(j) && shape(j).iter().all(|(n, _)| n == "n2")
        })
        .await;
    assert!(moved.attempt > on_t4.attempt, "{moved:?}");
    // Slurm gave it A100s: the typed GRES of its launch.
    let shown = std::process::Command::new("scontrol")
        .args([
            "-o",
            "show",
            "job",
            &slurm_job_id(&moved).unwrap().to_string(),
        ])
        .env("SLURM_CONF", &typed.conf)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("gpu:a100:"), "{shown}");
    assert_trained(&server, "l", 400, &trace, 240.0).await;
}
