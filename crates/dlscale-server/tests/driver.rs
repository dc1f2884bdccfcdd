//! The driver's decisions carried out, without processes or waits: a real service (driver,
//! store, router) on the fake executor and a manual clock. What the executor is asked to do
//! (launches and their shapes), what the API shows, and when: cooldowns pass when the clock is
//! advanced, not slept through. The same behaviour with real processes, a server killed with
//! `kill -9` and real checkpoints is in `dlscale-cli`'s `service_api.rs` and the soak.

use axum::http::StatusCode;
use dlscale_autoscaler::Outcome;
use dlscale_server::ConfigFile;
use serde_json::{json, Value};

mod router;

use router::{call, wait_job, Harness};

fn job(id: &str) -> Value {
    json!({"id": id, "min_batch": 32, "max_batch": 256, "max_local_batch": 64, "max_gpus": 4,
           "model": {"compute_base_s": 0.01, "compute_per_sample_s": 0.001,
                     "sync_intra_base_s": 0.002},
           "command": ["true"], "workdir": "/tmp", "launcher": "plain"})
}

async fn submit(h: &Harness, job: Value) {
    let (status, body) = call(&h.app, "POST", "/v1/jobs", job.to_string().into()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

/// Job `id` as the API shows it once `until` holds (within 20 s of real time: the driver's
/// batches and the executor's polls take milliseconds).
async fn harness(file: ConfigFile) -> (tempfile::TempDir, Harness) {
    let dir = tempfile::tempdir().unwrap();
    let h = router::harness(dir.path(), file).await;
    (dir, h)
}

fn running(view: &Value) -> bool {
    view["state"] == "running"
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_launch_is_retried_then_the_job_fails_with_its_exit_code() {
    let (_dir, h) = harness(ConfigFile {
        slots: Some(4),
        max_retries: Some(1),
        ..ConfigFile::default()
    })
    .await;
    submit(&h, job("fails")).await;
    for attempt in 1..=2 {
        wait_job(&h, "fails", |j| running(j) && j["attempt"] == attempt).await;
        assert!(h.executor.end("fails", attempt, Outcome::Exited(3)));
        wait_job(&h, "fails", |j| j["failures"] == attempt).await;
        // Past the retry's back-off.
        h.advance(60.0).await;
    }
    let failed = wait_job(&h, "fails", |j| j["state"] == "failed").await;
    assert_eq!(
        (
            &failed["failures"],
            &failed["exit_code"],
            &failed["attempt"]
        ),
        (&json!(2), &json!(3), &json!(2)),
        "{failed}"
    );
    assert_eq!(h.executor.launches().len(), 2);
}

/// An arrival shrinks a running job at the next periodic decision, in its cooldown too (a
/// cooldown never keeps an arrival waiting; the arrival's own decision only admits, holding
/// every running job alike); when it leaves, the job grows back only once its cooldown has
/// passed on the clock.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_grows_back_only_after_its_cooldown() {
    let (_dir, h) = harness(ConfigFile {
        slots: Some(4),
        cooldown_s: Some(60.0),
        interval_s: Some(1.0),
        min_gain: Some(0.05),
        restart_cost_s: Some(0.0),
        ..ConfigFile::default()
    })
    .await;
    let gpus = |j: &Value| j["gpus"].as_u64().unwrap();
    submit(&h, job("a")).await;
    let a1 = wait_job(&h, "a", running).await;
    assert_eq!((&a1["gpus"], &a1["batch_size"]), (&json!(4), &json!(256)));
    h.advance(1.0).await;
    submit(&h, job("b")).await;
    // The arrival's decision only admits, holding a; the periodic one after it shares the GPUs
    // (a's cooldown lets it shrink while b waits).
    h.advance(1.0).await;
    let a2 = wait_job(&h, "a", |j| running(j) && j["attempt"] == 2).await;
    let b1 = wait_job(&h, "b", running).await;
    assert!(gpus(&a2) < 4, "{a2}");
    assert_eq!(gpus(&a2) + gpus(&b1), 4);

    let (status, body) = call(&h.app, "DELETE", "/v1/jobs/b", Vec::new()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    wait_job(&h, "b", |j| j["state"] == "cancelled").await;
    // Decisions within a's cooldown leave it as it is, free GPUs or not.
    for _ in 0..5 {
        h.advance(1.0).await;
    }
    let held = wait_job(&h, "a", |_| true).await;
    assert_eq!(
        (&held["attempt"], gpus(&held)),
        (&json!(2), gpus(&a2)),
        "{held}"
    );

    h.advance(60.0).await;
    let a3 = wait_job(&h, "a", |j| running(j) && j["attempt"] == 3).await;
    assert_eq!(gpus(&a3), 4, "{a3}");
    assert_eq!(a3["restarts"], 2, "{a3}");
    let shapes: Vec<u32> = h.executor.launches().iter().map(|l| l.2.gpus).collect();
    assert_eq!(shapes, [4, gpus(&a2) as u32, gpus(&b1) as u32, 4]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_job_is_stopped_and_its_gpus_go_to_the_next() {
    let (_dir, h) = harness(ConfigFile {
        slots: Some(4),
        ..ConfigFile::default()
    })
    .await;
    let mut first = job("first");
    first["min_gpus"] = json!(4);
    submit(&h, first).await;
    wait_job(&h, "first", running).await;
    let mut next = job("next");
    next["min_gpus"] = json!(4);
    submit(&h, next).await;
    h.advance(1.0).await;
    assert_eq!(wait_job(&h, "next", |_| true).await["state"], "queued");

    let (status, body) = call(&h.app, "DELETE", "/v1/jobs/first", Vec::new()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let cancelled = wait_job(&h, "first", |j| j["state"] == "cancelled").await;
    assert_eq!(cancelled["gpus"], 0, "{cancelled}");
    wait_job(&h, "next", running).await;
    let running_now: Vec<String> = h.executor.running().keys().map(|k| k.0.clone()).collect();
    assert_eq!(running_now, ["next"]);
}

/// Teams a and b, four guaranteed GPUs each.
fn two_teams_of_four() -> std::collections::BTreeMap<String, dlscale_server::config::TeamFile> {
    let team = || dlscale_server::config::TeamFile {
        guaranteed_gpus: Some(4),
        ..Default::default()
    };
    [("a".into(), team()), ("b".into(), team())].into()
}

/// Two teams of four guaranteed GPUs on eight: team a idle lends its four to b; when a submits,
/// b's borrowed GPUs come back at once (b is stopped and relaunched on its own four), with no
/// clock advanced. A team the server does not know is refused, naming the field.
#[tokio::test(flavor = "multi_thread")]
async fn an_idle_teams_gpus_are_lent_and_come_back_when_it_submits() {
    let (_dir, h) = harness(ConfigFile {
        slots: Some(8),
        cooldown_s: Some(600.0),
        teams: Some(two_teams_of_four()),
        ..ConfigFile::default()
    })
    .await;
    let of_team = |id: &str, team: &str| {
        let mut j = job(id);
        j["max_gpus"] = json!(8);
        j["team"] = json!(team);
        j
    };
    submit(&h, of_team("b1", "b")).await;
    let borrowing = wait_job(&h, "b1", running).await;
    assert_eq!(borrowing["gpus"], 8, "{borrowing}");
    let metrics = router::text(&h.app, "/metrics").await;
    for line in [
        "dlscale_team_borrowed_gpus{team=\"b\"} 4",
        "dlscale_team_lent_gpus{team=\"a\"} 4",
        "dlscale_team_gpus{team=\"b\"} 8",
        "dlscale_job_gpus{job=\"b1\",team=\"b\"} 8",
    ] {
        assert!(metrics.contains(line), "{line} not in:\n{metrics}");
    }

    let (status, teams) = call(&h.app, "GET", "/v1/teams", Vec::new()).await;
    assert_eq!(status, StatusCode::OK, "{teams}");
    let stand = |teams: &Value, name: &str| {
        let t = teams
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["team"] == name)
            .unwrap();
        let gpus = |k: &str| t[k].as_u64().unwrap();
        (
            gpus("guaranteed_gpus"),
            gpus("gpus"),
            gpus("borrowed_gpus"),
            gpus("lent_gpus"),
        )
    };
    assert_eq!(stand(&teams, "a"), (4, 0, 0, 4), "{teams}");
    assert_eq!(stand(&teams, "b"), (4, 8, 4, 0), "{teams}");
    // Fair share is on by default: b has used GPUs, a none.
    assert_eq!(teams[0]["fair_share"], 1.0, "{teams}");

    submit(&h, of_team("a1", "a")).await;
    let a1 = wait_job(&h, "a1", running).await;
    let b1 = wait_job(&h, "b1", |j| running(j) && j["attempt"] == 2).await;
    assert_eq!((&a1["gpus"], &b1["gpus"]), (&json!(4), &json!(4)));
    let metrics = router::text(&h.app, "/metrics").await;
    for line in [
        "dlscale_team_borrowed_gpus{team=\"b\"} 0",
        "dlscale_team_lent_gpus{team=\"a\"} 0",
        "dlscale_team_gpus{team=\"a\"} 4",
    ] {
        assert!(metrics.contains(line), "{line} not in:\n{metrics}");
    }

    let (status, body) = call(
        &h.app,
        "POST",
        "/v1/jobs",
        of_team("c1", "nobody").to_string().into(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["field"], "team", "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("unknown team \"nobody\" (known: a, b, default)")),
        "{body}"
    );
}

/// `GET /v1/usage` adds up what the launches held: on the manual clock, a job on two GPUs for
/// 100 s, then the same id submitted again on one GPU and another job on four, both for 50 s
/// (still running), held exactly 200 + 50 + 200 GPU-seconds, the reused id's two submissions
/// each as its own job.
#[tokio::test(flavor = "multi_thread")]
async fn usage_is_the_gpu_seconds_the_launches_held() {
    let (_dir, h) = harness(ConfigFile {
        slots: Some(5),
        ..ConfigFile::default()
    })
    .await;
    let fixed = |id: &str, gpus: u32| {
        let mut spec = job(id);
        spec["min_gpus"] = json!(gpus);
        spec["max_gpus"] = json!(gpus);
        spec
    };
    submit(&h, fixed("u", 2)).await;
    wait_job(&h, "u", running).await;
    let t0 = dlscale_server::clock::Clock::now_s(&*h.clock);
    h.advance(100.0).await;
    assert!(h.executor.end("u", 1, Outcome::Exited(0)));
    wait_job(&h, "u", |j| j["state"] == "succeeded").await;
    submit(&h, fixed("u", 1)).await;
    wait_job(&h, "u", running).await;
    submit(&h, fixed("w", 4)).await;
    wait_job(&h, "w", running).await;
    h.advance(50.0).await;

    let (status, rows) = call(&h.app, "GET", "/v1/usage?by=job", Vec::new()).await;
    assert_eq!(status, StatusCode::OK, "{rows}");
    let held = |key: &str| -> Vec<(f64, u64)> {
        rows.as_array()
            .unwrap()
            .iter()
            .filter(|r| r["key"] == key)
            .map(|r| {
                let seconds = r["gpu_seconds"].as_f64().unwrap();
                (
                    (seconds * 1e3).round() / 1e3,
                    r["submission"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let u = held("u");
    assert_eq!(
        u.iter().map(|h| h.0).collect::<Vec<_>>(),
        [200.0, 50.0],
        "{rows}"
    );
    assert!(u[0].1 < u[1].1, "the first submission came first: {rows}");
    assert_eq!(
        held("w").iter().map(|h| h.0).collect::<Vec<_>>(),
        [200.0],
        "{rows}"
    );
    let (_, by_team) = call(&h.app, "GET", "/v1/usage", Vec::new()).await;
    assert_eq!(by_team[0]["key"], "default", "{by_team}");
    assert!((by_team[0]["gpu_seconds"].as_f64().unwrap() - 450.0).abs() < 1e-3);
    assert!(by_team[0].get("submission").is_none(), "{by_team}");
    // From t0 + 100 on: only the last 50 s.
    let since = format!("/v1/usage?since={}", t0 + 100.0);
    let (_, later) = call(&h.app, "GET", &since, Vec::new()).await;
    assert!(
        (later[0]["gpu_seconds"].as_f64().unwrap() - 250.0).abs() < 1e-3,
        "{later}"
    );
    let (status, bad) = call(&h.app, "GET", "/v1/usage?by=colour", Vec::new()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    // A time that is no time (NaN would count everything, an infinity nothing), or a time ago
    // as the CLI takes it: refused, saying what the API wants.
    for since in ["NaN", "1e400", "-inf", "7d", ""] {
        let path = format!("/v1/usage?since={since}");
        let (status, bad) = call(&h.app, "GET", &path, Vec::new()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{since}: {bad}");
        assert_eq!(bad["field"], "since", "{bad}");
        assert!(
            bad["error"]
                .as_str()
                .unwrap()
                .contains("'since' must be a time in seconds since the Unix epoch"),
            "{bad}"
        );
    }
}

/// Fair share counts what the accounting counts: the usage the driver accumulates is what a
/// restarted service would rebuild from the launch events, and a team that used the whole
/// cluster for half an hour of a one-hour half-life counts less than one that used nothing.
#[tokio::test(flavor = "multi_thread")]
async fn fair_share_weighs_the_usage_the_accounting_records() {
    let (_dir, h) = harness(ConfigFile {
        slots: Some(8),
        teams: Some(two_teams_of_four()),
        fair_share_half_life_s: Some(3600.0),
        ..ConfigFile::default()
    })
    .await;
    let mut b1 = job("b1");
    b1["min_gpus"] = json!(8);
    b1["max_gpus"] = json!(8);
    b1["team"] = json!("b");
    submit(&h, b1).await;
    wait_job(&h, "b1", running).await;
    h.advance(1800.0).await;

    let (_, teams) = call(&h.app, "GET", "/v1/teams", Vec::new()).await;
    let b = teams
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["team"] == "b")
        .unwrap();
    let shown_h = b["decayed_gpu_hours"].as_f64().unwrap();
    // 8 GPUs for half a half-life, decayed: 8 h/ln 2 (1 - 2^(-1/2)), in hours.
    let exact_h = 8.0 / std::f64::consts::LN_2 * (1.0 - 0.5f64.sqrt());
    assert!((shown_h - exact_h).abs() < 1e-6, "{shown_h} vs {exact_h}");
    // What a restart resumes from: the same, from the launch events.
    let config = &h.service.config;
    let events = h.service.store.usage_events().await.unwrap();
    let now_s = dlscale_server::clock::Clock::now_s(&*h.clock);
    let teams_config = config.teams.as_ref().unwrap();
    let rebuilt = dlscale_server::usage::team_usage(
        &events,
        teams_config,
        config.fair_share.as_ref().unwrap(),
        now_s,
    );
    let b_index = teams_config.find("b").unwrap();
    assert!((rebuilt.decayed_gpu_s[b_index] / 3600.0 - shown_h).abs() < 1e-6);
    // b used everything (its share: 4 of 4 + 4 + 1): 2^(-9/4); a used nothing.
    let factor = |name: &str| {
        let t = teams
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["team"] == name)
            .unwrap();
        t["fair_share"].as_f64().unwrap()
    };
    assert_eq!(factor("a"), 1.0);
    assert!((factor("b") - (-2.25f64).exp2()).abs() < 1e-12, "{teams}");
}

/// Two submissions of one id handled in one batch (two clients, or a client retrying a POST
/// that timed out): the autoscaler accepts the first and refuses the second, and what is stored,
/// shown and launched is the first's.
#[tokio::test(flavor = "multi_thread")]
async fn of_two_submissions_of_one_id_in_one_batch_the_accepted_one_is_stored() {
    use dlscale_autoscaler::Input;
    use dlscale_server::spec::JobSpec;
    use dlscale_server::store::Received;
    let (_dir, h) = harness(ConfigFile::default()).await;
    let submit = |launcher: &str, uid: &str, owner: &str| {
        let mut v = job("a");
        v["launcher"] = json!(launcher);
        let mut spec = JobSpec::from_value(v).unwrap();
        (spec.uid, spec.owner) = (uid.into(), Some(owner.into()));
        Input::Submit {
            job: Box::new(Received {
                spec,
                profile_model: None,
            }),
        }
    };
    // Both in one request: one batch for certain (the API refuses this within one request; two
    // requests that the driver takes together reach it so).
    let refusals = h
        .service
        .request(
            vec![
                submit("plain", "aaaaaaaaaaaa", "alice"),
                submit("srun", "bbbbbbbbbbbb", "bob"),
            ],
            Vec::new(),
            std::collections::BTreeMap::from([("a".to_string(), "token".to_string())]),
        )
        .await
        .unwrap();
    assert!(
        refusals[0].is_none() && refusals[1].is_some(),
        "{refusals:?}"
    );
    let view = wait_job(&h, "a", |v| v["state"] != Value::Null).await;
    assert_eq!(
        (&view["launcher"], &view["uid"], &view["owner"]),
        (&json!("plain"), &json!("aaaaaaaaaaaa"), &json!("alice")),
        "{view}"
    );
}

/// A runtime of its own for each start of a service on one data directory (a service's tasks
/// end with their runtime, as a server's with its process).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// After a restart an ended job is still known as ended: a cancel or a report for it is a
/// conflict, as before, not an unknown job (which `GET /v1/jobs/{id}` still shows).
#[test]
fn an_ended_job_is_a_conflict_after_a_restart_too() {
    let dir = tempfile::tempdir().unwrap();
    let cancel = |h: Harness| async move { call(&h.app, "DELETE", "/v1/jobs/x", Vec::new()).await };
    runtime().block_on(async {
        let h = router::harness(dir.path(), ConfigFile::default()).await;
        submit(&h, job("x")).await;
        let _ = call(&h.app, "DELETE", "/v1/jobs/x", Vec::new()).await;
        wait_job(&h, "x", |v| v["state"] == "cancelled").await;
        assert_eq!(cancel(h).await.0, StatusCode::CONFLICT);
    });
    runtime().block_on(async {
        let h = router::harness(dir.path(), ConfigFile::default()).await;
        let (status, answer) = cancel(h).await;
        assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    });
}

/// A second server on a data directory in use is refused, naming it: the two would each kill
/// the other's launches as stale. Once the first has stopped, the directory is free again.
#[test]
fn a_second_server_on_a_data_dir_in_use_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = || {
        dlscale_server::ServerConfig::resolve(
            ConfigFile {
                slots: Some(2),
                data_dir: Some(dir.path().to_path_buf()),
                ..ConfigFile::default()
            },
            Some(router::TOKEN.to_string()),
        )
        .unwrap()
    };
    runtime().block_on(async {
        let h = router::harness(dir.path(), ConfigFile::default()).await;
        submit(&h, job("x")).await;
        let err = dlscale_server::start(config()).await.unwrap_err();
        let err = format!("{err:#}");
        assert!(
            err.contains(&format!(
                "data dir {} is in use by another dlscale server",
                dir.path().display()
            )),
            "{err}"
        );
        // The first goes on.
        wait_job(&h, "x", running).await;
    });
    runtime().block_on(async {
        let h = router::harness(dir.path(), ConfigFile::default()).await;
        let (status, _) = call(&h.app, "GET", "/v1/jobs/x", Vec::new()).await;
        assert_eq!(status, StatusCode::OK);
    });
}

/// A live job whose stored submission no longer validates (an upgrade that checks more) is
/// ended as failed at the start, with its reason: its id can be submitted again, and the service
/// goes on (a live row left behind held the id, and the next write of it failed for ever).
#[test]
fn a_job_a_start_cannot_restore_is_failed_and_its_id_free() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let h = router::harness(dir.path(), ConfigFile::default()).await;
        submit(&h, job("w")).await;
        wait_job(&h, "w", running).await;
        h.service
            .store
            .write(|conn| {
                let spec: String =
                    conn.query_row("SELECT spec FROM jobs WHERE id = 'w'", [], |r| r.get(0))?;
                let mut v: Value = serde_json::from_str(&spec)?;
                v["entry"]["min_batch"] = json!(100_000);
                conn.execute("UPDATE jobs SET spec = ?1 WHERE id = 'w'", [v.to_string()])?;
                Ok(())
            })
            .await
            .unwrap();
    });
    runtime().block_on(async {
        let h = router::harness(dir.path(), ConfigFile::default()).await;
        let (_, old) = call(&h.app, "GET", "/v1/jobs/w", Vec::new()).await;
        assert_eq!(old["state"], "failed", "{old}");
        assert!(
            old.to_string().contains("no longer validates"),
            "its events say why: {old}"
        );
        submit(&h, job("w")).await;
        submit(&h, job("other")).await;
        wait_job(&h, "w", running).await;
        let (_, health) = call(&h.app, "GET", "/healthz", Vec::new()).await;
        assert_ne!(health["status"], "degraded", "{health}");
    });
}

/// A submission that resumes from an ended job's checkpoints and is then refused (a later check,
/// or a later job of its submission) leaves no copy of them behind; an accepted one has its own.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_submission_leaves_no_copy_of_the_checkpoints_it_resumed_from() {
    let dir = tempfile::tempdir().unwrap();
    let h = router::harness(dir.path(), ConfigFile::default()).await;
    submit(&h, job("old")).await;
    let _ = call(&h.app, "DELETE", "/v1/jobs/old", Vec::new()).await;
    let old = wait_job(&h, "old", |v| v["state"] == "cancelled").await;
    let jobs = dir.path().join("jobs");
    let saved = jobs
        .join("old")
        .join(old["uid"].as_str().unwrap())
        .join("checkpoints");
    std::fs::create_dir_all(&saved).unwrap();
    std::fs::write(saved.join("step-0000000010.pt"), b"x").unwrap();
    let resuming = |id: &str| {
        let mut v = job(id);
        v["resume_from"] = json!("old");
        v
    };
    let copies = |id: &str| std::fs::read_dir(jobs.join(id)).map_or(0, |d| d.count());
    // Refused after the checks that come before the copy: an unknown profile.
    let mut unknown = resuming("new");
    unknown.as_object_mut().unwrap().remove("model");
    unknown["profile"] = json!("nosuch");
    let (status, _) = call(&h.app, "POST", "/v1/jobs", unknown.to_string().into()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Refused whole: its second job is invalid, after the first's copy was made.
    let mut bad = job("other");
    bad["min_batch"] = json!(0);
    let both = json!([resuming("new"), bad]);
    let (status, _) = call(&h.app, "POST", "/v1/jobs", both.to_string().into()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(copies("new"), 0);
    // Accepted: its own copy.
    submit(&h, resuming("new")).await;
    let new = wait_job(&h, "new", |v| v["uid"].is_string()).await;
    let copied = jobs.join("new").join(new["uid"].as_str().unwrap());
    assert!(copied.join("checkpoints/step-0000000010.pt").is_file());
    assert_eq!(copies("new"), 1);
    // Launchers that name runs (Ray Train) find the copied checkpoints under the name they were
    // kept under, down a chain of resumes: old's runs are "old", new's too, newer's too.
    let _ = call(&h.app, "DELETE", "/v1/jobs/new", Vec::new()).await;
    wait_job(&h, "new", |v| v["state"] == "cancelled").await;
    let mut newer = job("newer");
    newer["resume_from"] = json!("new");
    submit(&h, newer).await;
    for id in ["old", "new", "newer"] {
        let stored = h.service.store.job(id.into()).await.unwrap().unwrap();
        assert_eq!(stored.spec.run_name(), "old", "{id}");
    }
}

/// While the database cannot be written, a request the driver took before its reply timed out
/// is kept and takes effect once a write goes through, and says so; one that came after the
/// write failed is refused saying nothing was done, and nothing of it appears later. A reload
/// whose teams were taken that way applies its users at once all the same (before, its users
/// were dropped while its teams took effect later).
#[tokio::test(flavor = "multi_thread")]
async fn while_the_database_cannot_be_written_what_was_taken_is_kept_and_the_rest_refused() {
    use dlscale_server::config::UserFile;
    use dlscale_server::ServerConfig;
    let file = || ConfigFile {
        slots: Some(8),
        teams: Some(two_teams_of_four()),
        ..ConfigFile::default()
    };
    let (dir, h) = harness(file()).await;
    // Another connection holds the write lock: every commit fails, as on a full disk.
    let lock = rusqlite::Connection::open(dir.path().join("dlscale.db")).unwrap();
    lock.busy_timeout(std::time::Duration::from_secs(10))
        .unwrap();
    lock.execute_batch("BEGIN EXCLUSIVE").unwrap();

    // A reload that renames team b to c and adds carol, of team c.
    let (_, token_hash) = dlscale_server::users::new_token("carol").unwrap();
    let mut teams = two_teams_of_four();
    let b = teams.remove("b").unwrap();
    teams.insert("c".into(), b);
    let new = ServerConfig::resolve(
        ConfigFile {
            data_dir: Some(dir.path().to_path_buf()),
            interval_s: Some(0.5),
            teams: Some(teams),
            users: Some(
                [(
                    "carol".to_string(),
                    UserFile {
                        team: Some("c".into()),
                        token_hash,
                    },
                )]
                .into(),
            ),
            ..file()
        },
        Some(router::TOKEN.to_string()),
    )
    .unwrap();
    let service = std::sync::Arc::clone(&h.service);
    let reloading =
        tokio::spawn(async move { dlscale_server::reload::reload(&service, new).await });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while h.service.storage_error().is_none() {
        assert!(std::time::Instant::now() < deadline, "no write failed");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (status, body) = call(&h.app, "POST", "/v1/jobs", job("late").to_string().into()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("nothing was done")),
        "{body}"
    );
    let changes = reloading.await.unwrap().unwrap();
    assert!(
        changes
            .iter()
            .any(|c| c.contains("teams: a guaranteed 4, c guaranteed 4")
                && c.contains("not yet written")),
        "{changes:?}"
    );
    assert!(
        h.service.users().all().any(|u| u.name == "carol"),
        "the reload's users are applied"
    );

    lock.execute_batch("ROLLBACK").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while h
        .service
        .view()
        .teams
        .as_ref()
        .is_none_or(|t| !t.named().iter().any(|(name, _)| name == "c"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the teams never took effect"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(h.service.storage_error().is_none());
    let (status, body) = call(&h.app, "GET", "/v1/jobs/late", Vec::new()).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}
