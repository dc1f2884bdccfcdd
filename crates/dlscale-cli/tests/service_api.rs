//! The service end to end without torch: a real `dlscale serve`, plain shell workers.

mod service_support;

use std::time::Duration;

use dlscale_autoscaler::Status as JobStatus;
use dlscale_server::api::dto::JobView;
use dlscale_server::client::{ApiClient, Method};
use serde_json::{json, Value};
use service_support::{assert_replays, assert_resumed_where_stopped, Server, TOKEN, WORKER};

const CONFIG: &str =
    "slots = 4\ncooldown_s = 1\ninterval_s = 0.5\ngrace_s = 5\nmin_gain = 0.05\nmax_retries = 1\n";

fn job(id: &str, script: &str) -> Value {
    json!({"id": id, "min_batch": 32, "max_batch": 256, "max_local_batch": 64, "max_gpus": 4,
           "model": {"compute_base_s": 0.01, "compute_per_sample_s": 0.001, "sync_intra_base_s": 0.002},
           "command": ["sh", "-c", script], "workdir": "/tmp", "launcher": "plain"})
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_get_json_errors_naming_the_field_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), CONFIG).await;
    server.submit(job("ok", "sleep 30")).await;

    let post = |body: &'static [u8]| {
        let client = server.client.clone();
        async move {
            let (s, b) = client
                .send(Method::POST, "/v1/jobs", Some(body.to_vec()))
                .await
                .unwrap();
            (s.as_u16(), serde_json::from_slice::<Value>(&b).unwrap())
        }
    };
    let (s, b) = post(b"{\"id\": \"x\",").await;
    assert_eq!(s, 400);
    assert!(
        b["error"].as_str().unwrap().contains("not valid JSON"),
        "{b}"
    );
    let (s, b) = post(b"[1, 2]").await;
    assert_eq!(
        (s, b["error"].as_str().unwrap().contains("object")),
        (400, true),
        "{b}"
    );

    let with = |key: &str, value: Value| {
        let mut j = job("bad", "true");
        if value.is_null() {
            j.as_object_mut().unwrap().remove(key);
        } else {
            j[key] = value;
        }
        j
    };
    let cases = [
        (
            "missing field",
            with("min_batch", Value::Null),
            400,
            "min_batch",
        ),
        (
            "missing command",
            with("command", Value::Null),
            400,
            "command",
        ),
        (
            "wrong type",
            with("max_batch", json!("big")),
            400,
            "max_batch",
        ),
        ("negative", with("min_batch", json!(-3)), 400, "min_batch"),
        ("min > max", with("min_batch", json!(512)), 400, "min_batch"),
        ("zero weight", with("weight", json!(0)), 400, "weight"),
        ("unknown field", with("colour", json!("red")), 400, "colour"),
        (
            "unknown model",
            with("model", json!("no-such-model")),
            400,
            "model",
        ),
        (
            "bad model param",
            with("model", json!({"compute_per_sample_s": -1.0})),
            400,
            "model.compute_per_sample_s",
        ),
        (
            "unknown profile",
            {
                let mut j = with("model", Value::Null);
                j["profile"] = json!("nope");
                j
            },
            400,
            "profile",
        ),
        (
            "bad launcher",
            with("launcher", json!("slurm")),
            400,
            "launcher",
        ),
        (
            "relative workdir",
            with("workdir", json!("tmp")),
            400,
            "workdir",
        ),
        (
            "missing workdir dir",
            with("workdir", json!("/no/such/dir")),
            400,
            "workdir",
        ),
        ("too many gpus", with("min_gpus", json!(5)), 400, "min_gpus"),
        ("bad id", with("id", json!("../../etc")), 400, "id"),
        (
            "reserved env",
            with("env", json!({"DLSCALE_JOB_ID": "x"})),
            400,
            "env.DLSCALE_JOB_ID",
        ),
        ("duplicate id", job("ok", "true"), 409, "id"),
    ];
    for (what, body, status, field) in cases {
        let (s, b) = server.json(Method::POST, "/v1/jobs", Some(body)).await;
        assert_eq!(s, status, "{what}: {b}");
        assert_eq!(b["field"], json!(field), "{what}: {b}");
        assert!(b["error"].as_str().unwrap().contains(field), "{what}: {b}");
    }

    // Authentication on every state-changing route.
    let anonymous = ApiClient::new(&format!("http://127.0.0.1:{}", server.port), None).unwrap();
    let wrong = ApiClient::new(
        &format!("http://127.0.0.1:{}", server.port),
        Some("nope".into()),
    )
    .unwrap();
    let metrics = json!({"step": 1, "samples_per_s": 1.0, "batch_size": 32, "world_size": 1, "loss": 1.0, "samples_seen": 32});
    for client in [&anonymous, &wrong] {
        for (method, path, body) in [
            (Method::POST, "/v1/jobs", Some(job("sneaky", "true"))),
            (Method::DELETE, "/v1/jobs/ok", None),
            (Method::POST, "/v1/jobs/ok/metrics", Some(metrics.clone())),
            (
                Method::PUT,
                "/v1/profiles/p",
                Some(json!({"model": {"compute_base_s": 0.0, "compute_per_sample_s": 0.001}})),
            ),
        ] {
            let (s, b) = client
                .send(
                    method.clone(),
                    path,
                    body.map(|b| serde_json::to_vec(&b).unwrap()),
                )
                .await
                .unwrap();
            let b: Value = serde_json::from_slice(&b).unwrap();
            assert_eq!(s.as_u16(), 401, "{method} {path}: {b}");
            assert!(b["error"].as_str().unwrap().contains("token"), "{b}");
        }
    }
    // Every /v1 route needs the token, reads included; /healthz does not, and /metrics does
    // not from loopback.
    for route in dlscale_server::api::ROUTES {
        let path = route.path.replace("{id}", "ok").replace("{name}", "p");
        let method = Method::from_bytes(route.verb.name().to_uppercase().as_bytes()).unwrap();
        let (s, _) = anonymous.send(method, &path, None).await.unwrap();
        let open = route.access == dlscale_server::api::Access::Open
            || route.access == dlscale_server::api::Access::Metrics;
        assert_eq!(
            s.as_u16() == 401,
            !open,
            "{} {path}: {s}",
            route.verb.name()
        );
    }
    // A job's workers get a token that reads and reports for that job only.
    let token_file = dir.path().join("tok-token");
    let script = format!(
        "echo \"$DLSCALE_TOKEN\" > {}; sleep 30",
        token_file.display()
    );
    server.submit(job("tok", &script)).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let tok_token = loop {
        let t = std::fs::read_to_string(&token_file).unwrap_or_default();
        if !t.trim().is_empty() {
            break t.trim().to_string();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job tok never wrote its token"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_ne!(tok_token, TOKEN);
    let scoped = ApiClient::new(
        &format!("http://127.0.0.1:{}", server.port),
        Some(tok_token),
    )
    .unwrap();
    let (s, _) = scoped
        .send(Method::GET, "/v1/jobs/tok", None)
        .await
        .unwrap();
    assert_eq!(s.as_u16(), 200);
    for (method, path) in [
        (Method::GET, "/v1/jobs"),
        (Method::GET, "/v1/jobs/ok"),
        (Method::DELETE, "/v1/jobs/tok"),
        (Method::GET, "/v1/jobs/tok/logs"),
        (Method::GET, "/v1/cluster"),
    ] {
        let (s, b) = scoped.send(method.clone(), path, None).await.unwrap();
        let b: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(s.as_u16(), 403, "{method} {path}: {b}");
        assert!(b["error"].as_str().unwrap().contains("job 'tok'"), "{b}");
    }
    // Cancelled, and ended before the crash below (a job still stopping would be listed).
    server.cancel("tok").await;

    // Unknown job ids.
    for (method, path, body) in [
        (Method::GET, "/v1/jobs/ghost", None),
        (Method::DELETE, "/v1/jobs/ghost", None),
        (Method::GET, "/v1/jobs/ghost/logs", None),
        (Method::GET, "/v1/jobs/ghost/allocations", None),
        (
            Method::POST,
            "/v1/jobs/ghost/metrics",
            Some(metrics.clone()),
        ),
    ] {
        let (s, b) = server.json(method.clone(), path, body).await;
        assert_eq!(s, 404, "{method} {path}: {b}");
        assert!(b["error"].as_str().unwrap().contains("ghost"), "{b}");
    }
    let (s, b) = server.json(Method::GET, "/v1/nope", None).await;
    assert_eq!((s, b["error"].clone()), (404, json!("no such route")));
    let (s, b) = server.json(Method::PUT, "/v1/jobs", None).await;
    assert_eq!(s, 405, "{b}");

    // Bad metrics reports.
    for (body, field) in [
        (
            json!({"step": 1, "samples_per_s": "fast", "batch_size": 32, "world_size": 1, "loss": 1.0, "samples_seen": 1}),
            "samples_per_s",
        ),
        (
            json!({"samples_per_s": 1.0, "batch_size": 32, "world_size": 1, "loss": 1.0, "samples_seen": 1}),
            "step",
        ),
        (
            json!({"step": 1, "samples_per_s": 1.0, "batch_size": 0, "world_size": 1, "loss": 1.0, "samples_seen": 1}),
            "batch_size",
        ),
        (
            json!({"step": 1, "samples_per_s": -1.0, "batch_size": 32, "world_size": 1, "loss": 1.0, "samples_seen": 1}),
            "samples_per_s",
        ),
        (
            json!({"step": u64::MAX, "samples_per_s": 1.0, "batch_size": 32, "world_size": 1, "loss": 1.0, "samples_seen": 1}),
            "step",
        ),
    ] {
        let (s, b) = server
            .json(Method::POST, "/v1/jobs/ok/metrics", Some(body))
            .await;
        assert_eq!((s, b["field"].clone()), (400, json!(field)), "{b}");
    }
    // Progress counts only from the current launch (its world size) of a job holding GPUs.
    let mut running = server.job("ok").await;
    for _ in 0..100 {
        if running.state == JobStatus::Running {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        running = server.job("ok").await;
    }
    assert_eq!(running.state, JobStatus::Running);
    let mut stale = metrics.clone();
    stale["world_size"] = json!(running.gpus + 1);
    stale["step"] = json!(7);
    let (s, b) = server
        .json(Method::POST, "/v1/jobs/ok/metrics", Some(stale))
        .await;
    assert_eq!(s, 202, "{b}");
    assert_eq!(server.job("ok").await.step, None);
    let mut metrics = metrics;
    metrics["world_size"] = json!(running.gpus);
    let (s, b) = server
        .json(Method::POST, "/v1/jobs/ok/metrics", Some(metrics))
        .await;
    assert_eq!(s, 202, "{b}");
    assert_eq!(server.job("ok").await.step, Some(1));

    // Nothing half-written: after a crash and restart there is exactly the one accepted job.
    server.kill9();
    server.restart().await;
    let jobs: Vec<Value> = server
        .client
        .call(Method::GET, "/v1/jobs", None)
        .await
        .unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0]["id"], "ok");
}

#[tokio::test(flavor = "multi_thread")]
async fn jobs_succeed_fail_after_retries_and_cancel() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), CONFIG).await;
    let mut fails = job("fails", "echo attempt; exit 3");
    fails["max_gpus"] = json!(1);
    server.submit(fails).await;
    let mut ok = job("ok", "echo \"hello from $DLSCALE_JOB_ID on $CUDA_VISIBLE_DEVICES batch $DLSCALE_LOCAL_BATCH_SIZE\"");
    ok["max_gpus"] = json!(1);
    server.submit(ok).await;
    let done = server
        .wait_job("ok", 20.0, "success", |j| j.state == JobStatus::Succeeded)
        .await;
    assert_eq!(done.exit_code, Some(0));
    let log = server.client.text("/v1/jobs/ok/logs").await.unwrap();
    assert!(log.contains("hello from ok on "), "{log}");
    assert!(log.contains("batch 64"), "{log}");

    let failed = server
        .wait_job("fails", 20.0, "failure", |j| j.state == JobStatus::Failed)
        .await;
    assert_eq!(
        (failed.failures, failed.exit_code, failed.attempt),
        (2, Some(3), 2)
    );

    server.submit(job("long", "sleep 60")).await;
    let running = server
        .wait_job("long", 20.0, "running", |j| {
            j.state == JobStatus::Running && j.engine_id("pgid").is_some()
        })
        .await;
    let (s, b) = server.json(Method::DELETE, "/v1/jobs/long", None).await;
    assert_eq!(s, 202, "{b}");
    let cancelled = server
        .wait_job("long", 20.0, "cancelled", |j| {
            j.state == JobStatus::Cancelled
        })
        .await;
    assert_eq!(cancelled.gpus, 0);
    let pgid = running.engine_id("pgid").unwrap().parse::<i32>().unwrap();
    assert!(
        !std::path::Path::new(&format!("/proc/{pgid}")).exists() || !is_alive(pgid),
        "job process survived cancel"
    );
    let (s, _) = server.json(Method::DELETE, "/v1/jobs/long", None).await;
    assert_eq!(s, 409);

    // Profiles: a stored one is used by name; a job without a model is fitted from its metrics.
    let model =
        json!({"compute_base_s": 0.01, "compute_per_sample_s": 0.001, "sync_intra_base_s": 0.003});
    let (s, b) = server
        .json(
            Method::PUT,
            "/v1/profiles/digits",
            Some(json!({"model": model})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let mut profiled = job("profiled", "sleep 30");
    profiled.as_object_mut().unwrap().remove("model");
    profiled["profile"] = json!("digits");
    assert_eq!(server.submit(profiled).await.model, "profile:digits");
    let mut fitted = job("fitted", "sleep 30");
    fitted.as_object_mut().unwrap().remove("model");
    assert_eq!(server.submit(fitted).await.model, "learned");
    for (ws, batch, sps) in [
        (1, 64, 1.0),
        (1, 64, 5000.0),
        (1, 64, 5000.0),
        (1, 32, 3000.0),
    ] {
        let report = json!({"step": 10, "samples_per_s": sps, "batch_size": batch, "world_size": ws, "loss": 1.0, "samples_seen": 640});
        let (s, b) = server
            .json(Method::POST, "/v1/jobs/fitted/metrics", Some(report))
            .await;
        assert_eq!(s, 202, "{b}");
    }
    let profiles: Vec<Value> = server
        .client
        .call(Method::GET, "/v1/profiles", None)
        .await
        .unwrap();
    let names: Vec<&str> = profiles
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["digits"], "{profiles:?}");
    for id in ["profiled", "fitted"] {
        let (s, _) = server
            .json(Method::DELETE, &format!("/v1/jobs/{id}"), None)
            .await;
        assert_eq!(s, 202);
    }

    // The service's own descriptions.
    let (s, doc) = server.json(Method::GET, "/v1/openapi.json", None).await;
    assert_eq!(s, 200);
    assert_eq!(doc["openapi"], "3.0.3");
    assert!(doc["paths"]["/v1/jobs/{id}/metrics"]["post"].is_object());
    let metrics = server.client.text("/metrics").await.unwrap();
    assert!(
        metrics.contains("dlscale_gpus 4")
            && metrics.contains("dlscale_http_request_seconds_bucket"),
        "{metrics}"
    );
    let (_, cluster) = server.json(Method::GET, "/v1/cluster", None).await;
    assert_eq!(cluster["slots"], json!([0, 1, 2, 3]));
    assert_eq!(cluster["policy"], "elastic-batch");
    // Every page of a paged list, followed to the oldest (`dlscale jobs --all` reads them all;
    // it had stopped at the first page).
    let pages: Vec<Value> = server
        .client
        .call_pages("/v1/jobs?all=true&limit=1")
        .await
        .unwrap();
    let mut ids: Vec<&str> = pages.iter().filter_map(|j| j["id"].as_str()).collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        ["fails", "fitted", "long", "ok", "profiled"],
        "{pages:?}"
    );
}

fn is_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread")]
async fn rescales_running_jobs_and_survives_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), CONFIG).await;
    let mut a = job("a", WORKER);
    a["env"] = json!({"TOTAL": "80"});
    server.submit(a).await;
    let first = server
        .wait_job("a", 20.0, "a on 4 slots", |j| {
            j.state == JobStatus::Running && j.engine_id("pgid").is_some()
        })
        .await;
    assert_eq!((first.gpus, first.batch_size), (4, 256));
    tokio::time::sleep(Duration::from_millis(1500)).await; // past the cooldown

    let mut b = job("b", WORKER);
    b["env"] = json!({"TOTAL": "60"});
    server.submit(b).await;
    let a2 = server
        .wait_job("a", 30.0, "a rescaled", |j| {
            j.attempt == 2 && j.state == JobStatus::Running && j.engine_id("pgid").is_some()
        })
        .await;
    assert!(a2.gpus < 4 && a2.batch_size < 256, "{a2:?}");
    assert_eq!(a2.restarts, 1);
    let b1 = server
        .wait_job("b", 30.0, "b running", |j| {
            j.state == JobStatus::Running && j.engine_id("pgid").is_some()
        })
        .await;
    assert_eq!(a2.gpus + b1.gpus, 4);

    // kill -9 the server while both run; the restarted one re-attaches to both.
    server.kill9();
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.restart().await;
    for (id, before) in [("a", &a2), ("b", &b1)] {
        let now = server.job(id).await;
        assert_eq!(now.state, JobStatus::Running, "{now:?}");
        assert_eq!(
            (now.attempt, now.engine_id("pgid"), now.gpus),
            (before.attempt, before.engine_id("pgid"), before.gpus),
            "{id} was relaunched instead of re-attached"
        );
    }
    for id in ["a", "b"] {
        let done = server
            .wait_job(id, 60.0, "success", |j| j.state == JobStatus::Succeeded)
            .await;
        assert_eq!(done.exit_code, Some(0), "{done:?}");
    }
    let allocations: Vec<Value> = server
        .client
        .call(Method::GET, "/v1/jobs/a/allocations", None)
        .await
        .unwrap();
    assert_eq!(allocations[0]["gpus"], 4);
    assert!(allocations.len() >= 2, "{allocations:?}");
    let log = server.client.text("/v1/jobs/a/logs").await.unwrap();
    assert_resumed_where_stopped(&log);
    assert!(log.contains("dlscale: done step=80"), "{log}");
    // `dlscale usage` adds up what the launches held, the kill -9 and the adoption included:
    // within a second a launch of what each job's allocations show.
    let usage: Vec<Value> = serde_json::from_str(&service_support::cli(
        &server,
        &["usage", "--by", "job", "--format", "json"],
    ))
    .unwrap();
    for id in ["a", "b"] {
        let (held, launches) = service_support::allocated_gpu_s(&server, id).await;
        let row = usage.iter().find(|r| r["key"] == id).unwrap();
        let counted = row["gpu_seconds"].as_f64().unwrap();
        let slack = 4.0 * launches as f64;
        assert!(
            (counted - held).abs() <= slack,
            "{id}: usage {counted}, allocations {held}"
        );
        assert_eq!(row["launches"].as_u64(), Some(launches as u64), "{id}");
    }
    service_support::assert_replays(&server);
}

/// A job that finishes while the server is down: the restarted server finds its launch ended
/// with exit 0 and shows the final step its workers logged (`dlscale: done step=N`).
#[tokio::test(flavor = "multi_thread")]
async fn a_job_that_finished_while_the_server_was_down_shows_its_final_step() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), CONFIG).await;
    let mut a = job("a", WORKER);
    a["env"] = json!({"TOTAL": "15"});
    server.submit(a).await;
    let running = server
        .wait_job("a", 20.0, "a running", |j| {
            j.state == JobStatus::Running && j.engine_id("pgid").is_some()
        })
        .await;
    server.kill9();
    // The job finishes (1.5 s of steps) with nobody watching.
    let log = std::path::PathBuf::from(&running.log);
    service_support::wait_until(30.0, "a's done line", || async {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("dlscale: done step=15"))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.restart().await;
    let done = server
        .wait_job("a", 30.0, "the end", |j| j.state.is_terminal())
        .await;
    assert_eq!(done.state, JobStatus::Succeeded, "{done:?}");
    assert_eq!(done.step, Some(15), "{done:?}");
    service_support::assert_replays(&server);
}

/// What a model family measured outlives its jobs and the server: after its only job ended and
/// a kill -9, a new job of the family starts from the family's pool (its start-of-training noise
/// scale and its exploration cap), and a replay of the log agrees with every action.
#[tokio::test(flavor = "multi_thread")]
async fn a_model_familys_measurements_outlive_its_jobs_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), CONFIG).await;
    let learned = |id: &str| {
        json!({"id": id, "min_batch": 32, "max_batch": 256, "max_local_batch": 64, "max_gpus": 4,
               "family": "f", "command": ["sleep", "60"], "workdir": "/tmp", "launcher": "plain"})
    };
    server.submit(learned("a")).await;
    let a = server
        .wait_job("a", 30.0, "a running", |j| j.state == JobStatus::Running)
        .await;
    // A warm-up report, then one measured.
    let report = json!({"step": 1, "samples_per_s": 400.0, "batch_size": a.batch_size,
                        "world_size": a.gpus, "loss": 1.0, "samples_seen": 64,
                        "grad": {"grad_sqr": 1.0, "grad_var": 2.0}});
    for _ in 0..2 {
        let (s, b) = server
            .json(Method::POST, "/v1/jobs/a/metrics", Some(report.clone()))
            .await;
        assert_eq!(s, 202, "{b}");
    }
    let measured = server
        .wait_job("a", 30.0, "a's model fitted", |j| {
            j.noise_scale.is_some()
                && j.predicted_samples_per_s
                    .is_some_and(|x| (x - 400.0).abs() < 1e-6)
        })
        .await;
    server.cancel("a").await;
    server.kill9();
    server.restart().await;
    let b = server.submit(learned("b")).await;
    assert_eq!(b.noise_scale, measured.noise_scale, "{b:#?}");
    let b = server
        .wait_job("b", 30.0, "b running", |j| j.state == JobStatus::Running)
        .await;
    // Trusted with twice the GPUs the family was measured on (the prior: only its request).
    assert_eq!(b.gpus, 2 * a.gpus, "{b:#?}");
    server.cancel("b").await;
    assert_replays(&server);
}

/// An id may be used again once its job has ended, but every submission has its own files: a
/// job submitted under the id of a cancelled one starts from nothing and writes its own log and
/// checkpoints; it starts from another job's checkpoints only when it says so (`resume_from`),
/// and then from a copy of them. Every submission keeps its own history row.
#[tokio::test(flavor = "multi_thread")]
async fn a_reused_id_starts_afresh_unless_it_resumes_from_the_ended_job() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), CONFIG).await;
    let worker = |total: u32| {
        let mut j = job("reuse", WORKER);
        j["max_gpus"] = json!(1);
        j["env"] = json!({"TOTAL": total.to_string()});
        j
    };
    let log = |j: &JobView| std::fs::read_to_string(&j.log).unwrap();
    let checkpoint = |j: &JobView| {
        let ck = j.log.parent().unwrap().join("checkpoints/step");
        std::fs::read_to_string(ck)
            .unwrap()
            .trim()
            .parse::<u32>()
            .unwrap()
    };

    // The first job runs a while and is cancelled: it checkpoints where it stopped.
    server.submit(worker(10_000)).await;
    server
        .wait_job("reuse", 20.0, "some steps", |j| {
            j.state == JobStatus::Running
                && std::fs::read_to_string(&j.log).is_ok_and(|l| l.contains("step=5 "))
        })
        .await;
    server.cancel("reuse").await;
    let first = server
        .wait_job("reuse", 20.0, "cancelled", |j| {
            j.state == JobStatus::Cancelled
        })
        .await;
    let stopped_at = checkpoint(&first);
    assert!(stopped_at >= 5, "{}", log(&first));

    // The same id again, without resume_from: a job of its own, from step 0.
    let second = server.submit(worker(3)).await;
    assert_ne!(second.uid, first.uid);
    assert_ne!(second.log, first.log);
    let second = server
        .wait_job("reuse", 30.0, "success", |j| {
            j.state == JobStatus::Succeeded
        })
        .await;
    let text = log(&second);
    assert!(text.contains("dlscale: resumed step=0 "), "{text}");
    assert!(!text.contains(&format!("step={stopped_at} ")), "{text}");
    assert_eq!(checkpoint(&second), 3);
    // Its launches are numbered after the first job's: no launch of it is taken for one of those.
    assert!(
        second.attempt > first.attempt,
        "{} after {}",
        second.attempt,
        first.attempt
    );
    assert_eq!(
        checkpoint(&first),
        stopped_at,
        "the first job's checkpoint is untouched"
    );
    assert!(
        !log(&first).contains("done step=3"),
        "the second job wrote into the first's log"
    );

    // Resuming from a job that has not ended, or from none, is refused naming the field.
    let mut live = job("live", "sleep 30");
    live["max_gpus"] = json!(1);
    server.submit(live).await;
    for (from, status) in [("live", 409), ("nobody", 400)] {
        let mut j = worker(6);
        j["id"] = json!(format!("from-{from}"));
        j["resume_from"] = json!(from);
        let (s, b) = server.json(Method::POST, "/v1/jobs", Some(j)).await;
        assert_eq!(
            (s, b["field"].as_str()),
            (status, Some("resume_from")),
            "{b}"
        );
    }

    // Asked to, it starts from a copy of the newest ended job's checkpoints (the second's).
    let mut third = worker(6);
    third["resume_from"] = json!("reuse");
    let third = server.submit(third).await;
    assert_eq!(third.resume_from.as_deref(), Some("reuse"));
    let third = server
        .wait_job("reuse", 30.0, "success", |j| {
            j.state == JobStatus::Succeeded
        })
        .await;
    assert!(
        log(&third).contains("dlscale: resumed step=3 "),
        "{}",
        log(&third)
    );
    assert_eq!(checkpoint(&third), 6);
    assert_eq!(
        checkpoint(&second),
        3,
        "a copy: the source's checkpoint is its own"
    );

    // Three submissions, three history rows.
    let all: Vec<JobView> = server
        .client
        .call(Method::GET, "/v1/jobs?all=true", None)
        .await
        .unwrap();
    let uids: std::collections::BTreeSet<&str> = all
        .iter()
        .filter(|j| j.id == "reuse")
        .map(|j| j.uid.as_str())
        .collect();
    assert_eq!(uids.len(), 3, "{all:#?}");
    assert_replays(&server);
}

/// `dlscale job X --format json | head` panicked on the broken pipe. Every command whose reader
/// has gone now ends quietly, as `cat` does: no panic, nothing on stderr, killed by SIGPIPE.
#[tokio::test(flavor = "multi_thread")]
async fn output_into_a_closed_pipe_ends_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), CONFIG).await;
    server.submit(job("ok", "echo hello")).await;
    server
        .wait_job("ok", 20.0, "success", |j| j.state == JobStatus::Succeeded)
        .await;
    let commands: [&[&str]; 6] = [
        &["job", "ok", "--format", "json"],
        &["job", "ok"],
        &["jobs", "--all", "--format", "json"],
        &["logs", "ok"],
        &["demo", "--format", "json"],
        &["--help"],
    ];
    for args in commands {
        // The reader is closed before the command starts: its first write finds no reader.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_dlscale"))
            .args(args)
            .env("DLSCALE_API", format!("http://127.0.0.1:{}", server.port))
            .env("DLSCALE_TOKEN", TOKEN)
            .stdout(writer)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.is_empty(), "dlscale {args:?}: {stderr}");
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGPIPE),
            "dlscale {args:?}: {:?}",
            out.status
        );
    }
}

/// A launcher that cannot be found (here torchrun, removed after the server checked it at its
/// start) refuses its jobs at submission, naming the field. One removed after a job was
/// accepted (it waited for GPUs meanwhile): the job fails after its retries, and its state
/// says why, not only `exit code 127`.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_whose_launcher_cannot_be_executed_fails_saying_why() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let torchrun = dir.path().join("torchrun");
    std::fs::write(&torchrun, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&torchrun, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = format!("{CONFIG}torchrun = \"{}\"\n", torchrun.display());
    let server = Server::start(dir.path(), &config).await;
    std::fs::remove_file(&torchrun).unwrap();
    std::fs::write(dir.path().join("train.py"), "").unwrap();
    let mut t = job("t", "");
    t["command"] = json!(["train.py"]);
    t["launcher"] = json!("torchrun");
    t["workdir"] = json!(dir.path());
    let (status, refused) = server.json(Method::POST, "/v1/jobs", Some(t.clone())).await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused
            .to_string()
            .contains("this server cannot start torchrun jobs"),
        "{refused}"
    );
    // Back, while a job holds every GPU: t, which needs them all too, waits, and torchrun
    // goes before it starts.
    std::fs::write(&torchrun, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&torchrun, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut all = job("all", "sleep 60");
    all["min_gpus"] = json!(4);
    server.submit(all).await;
    server
        .wait_job("all", 30.0, "its start", |j| j.state == JobStatus::Running)
        .await;
    t["min_gpus"] = json!(4);
    server.submit(t).await;
    std::fs::remove_file(&torchrun).unwrap();
    server.cancel("all").await;
    let failed = server
        .wait_job("t", 30.0, "its failure", |j| j.state == JobStatus::Failed)
        .await;
    let why = format!(
        "could not start: the program {} could not be executed: No such file or directory",
        torchrun.display()
    );
    assert_eq!(failed.message, format!("failed ({why})"), "{failed:?}");
    assert_eq!((failed.failures, failed.exit_code), (2, None));
    let shown = service_support::cli(&server, &["job", "t"]);
    assert!(shown.contains(&why), "{shown}");
}

/// A log read in pieces (`from=` the offset of the read before, a mebibyte at most each) joins
/// into the log's bytes as written, characters cut at a piece's end included: each piece had
/// been decoded alone, its cut characters replaced.
#[tokio::test(flavor = "multi_thread")]
async fn a_log_read_in_pieces_joins_into_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), CONFIG).await;
    // Three-byte characters over several mebibytes: the pieces' ends cut some.
    let content = "€".repeat(1_400_000) + "\n";
    let file = dir.path().join("euros.txt");
    std::fs::write(&file, &content).unwrap();
    let mut cat = job("euros", "");
    cat["command"] = json!(["cat", file]);
    cat["max_gpus"] = json!(1);
    server.submit(cat).await;
    server
        .wait_job("euros", 30.0, "success", |j| {
            j.state == JobStatus::Succeeded
        })
        .await;
    let mut log = Vec::new();
    let mut pieces = 0;
    loop {
        let path = format!("/v1/jobs/euros/logs?from={}", log.len());
        let (status, headers, bytes) = server
            .client
            .send_with_headers(Method::GET, &path, None)
            .await
            .unwrap();
        assert_eq!(status.as_u16(), 200);
        let end: usize = headers["x-log-offset"].to_str().unwrap().parse().unwrap();
        assert_eq!(
            end,
            log.len() + bytes.len(),
            "the offset counts the bytes sent"
        );
        if bytes.is_empty() {
            break;
        }
        log.extend_from_slice(&bytes);
        pieces += 1;
    }
    assert!(pieces >= 4, "{pieces} pieces");
    let log = String::from_utf8(log).expect("the joined pieces are the log's UTF-8");
    assert!(log.contains(&content), "the output, whole");
}
