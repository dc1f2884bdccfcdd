//! The API as a value: a real service (a fake executor with two GPUs, a manual clock, a
//! temporary data directory) driven through its router without a socket. Checks that the router serves exactly the routes
//! of the table, that the OpenAPI document lists exactly those routes, and that every schema
//! lists exactly the fields its DTO serialises.

use std::collections::BTreeSet;

use axum::http::StatusCode;
use dlscale_server::api::{self, openapi, ROUTES};
use serde_json::{json, Value};

mod router;

use router::service;

/// [`router::call`] with an optional JSON value as the body.
async fn call(
    app: &axum::Router,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    router::call(app, method, path, bytes).await
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect()
}

/// The schema's properties equal the keys of `sample` (a serialised DTO).
fn assert_schema(name: &str, sample: &Value) {
    assert_schema_without(name, sample, &[]);
}

/// The schema's properties but `absent` (fields a DTO leaves out where they do not apply, as
/// GPU types on a cluster that names none) equal the keys of `sample`; none of those is
/// required.
fn assert_schema_without(name: &str, sample: &Value, absent: &[&str]) {
    let schemas = openapi::schemas();
    let schema = &schemas[name];
    assert!(schema.is_object(), "no schema {name}");
    let mut documented = keys(&schema["properties"]);
    for field in absent {
        assert!(documented.remove(*field), "schema {name} has no {field}");
        assert!(
            !schema["required"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|r| r == field),
            "schema {name} requires {field}, which may be absent"
        );
    }
    assert_eq!(
        documented,
        keys(sample),
        "schema {name} and what the API sends differ: {sample}"
    );
    for required in schema["required"].as_array().into_iter().flatten() {
        let field = required.as_str().unwrap();
        assert!(
            !sample[field].is_null(),
            "schema {name} requires {field}: {sample}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_router_the_document_and_the_dtos_agree() {
    let dir = tempfile::tempdir().unwrap();
    let app = service(dir.path()).await;

    // The document lists exactly the routes of the table, each with its method.
    let doc = openapi::document();
    let documented: BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, ops)| {
            ops.as_object()
                .unwrap()
                .keys()
                .map(|m| (m.clone(), path.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    let table: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|r| (r.verb.name().to_string(), r.path.to_string()))
        .collect();
    assert_eq!(documented, table);
    for r in ROUTES {
        let op = &doc["paths"][r.path][r.verb.name()];
        assert!(
            op["responses"]
                .as_object()
                .is_some_and(|m| m.contains_key("200")
                    || m.contains_key("201")
                    || m.contains_key("202")),
            "{} {} has no documented responses",
            r.verb.name(),
            r.path
        );
    }
    let text = doc.to_string();
    for part in text.split("\"#/components/schemas/").skip(1) {
        let name = part.split('"').next().unwrap();
        assert!(
            doc["components"]["schemas"].get(name).is_some(),
            "dangling $ref {name}"
        );
    }

    // The router serves each of them (the fallback answers "no such route", 405 a wrong
    // method) and nothing else.
    for r in ROUTES {
        let path = r.path.replace("{id}", "ghost").replace("{name}", "p");
        let (status, body) = call(&app, &r.verb.name().to_uppercase(), &path, None).await;
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{path}");
        assert_ne!(
            body["error"],
            json!("no such route"),
            "{} {path}",
            r.verb.name()
        );
    }
    let (status, body) = call(&app, "GET", "/v1/nothing", None).await;
    assert_eq!(
        (status, body["error"].clone()),
        (StatusCode::NOT_FOUND, json!("no such route"))
    );

    // Real answers against their schemas.
    let (status, body) = call(
        &app,
        "PUT",
        "/v1/profiles/p",
        Some(json!({"model": {"compute_base_s": 0.0, "compute_per_sample_s": 0.001}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_schema("Profile", &body);
    let job = json!({"id": "j", "min_batch": 16, "max_batch": 64, "max_local_batch": 32,
        "max_gpus": 2, "profile": "p", "command": ["sleep", "60"], "workdir": "/tmp",
        "launcher": "plain"});
    let (status, body) = call(&app, "POST", "/v1/jobs", Some(job)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let shown = loop {
        let (_, shown) = call(&app, "GET", "/v1/jobs/j", None).await;
        if shown["state"] == "running" {
            break shown;
        }
        assert!(std::time::Instant::now() < deadline, "j never ran: {shown}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_schema_without("Job", &shown, &["gpu_type"]);
    assert_schema("Event", &shown["events"][0]);
    assert_schema("Share", &shown["nodes"][0]);
    let (_, allocations) = call(&app, "GET", "/v1/jobs/j/allocations", None).await;
    assert_schema("Allocation", &allocations[0]);
    let (status, explained) = call(&app, "GET", "/v1/jobs/j/explain", None).await;
    assert_eq!(status, StatusCode::OK, "{explained}");
    assert_schema("Explain", &explained);
    assert_schema_without("Explanation", &explained["explanation"], &["types"]);
    assert_schema("Alternative", &explained["explanation"]["fewer"]);
    let (status, decisions) = call(&app, "GET", "/v1/decisions", None).await;
    assert_eq!(status, StatusCode::OK, "{decisions}");
    assert_schema("Decisions", &decisions);
    assert_schema("DecisionEntry", &decisions["decisions"][0]);
    assert_schema_without(
        "DecisionJob",
        &decisions["decisions"][0]["jobs"][0],
        &["gpu_type"],
    );
    assert_eq!(
        decisions["explanations"][0], explained,
        "one explanation, two routes"
    );
    let donor = serde_json::to_value(dlscale_autoscaler::explain::Donor {
        id: "k".into(),
        gpus: 2,
        to_gpus: 1,
        value_change: -0.5,
    })
    .unwrap();
    assert_schema("Donor", &donor);
    let (_, cluster) = call(&app, "GET", "/v1/cluster", None).await;
    assert_schema("Cluster", &cluster);
    assert_schema_without("Node", &cluster["nodes"][0], &["gpu_type"]);
    assert_schema("Policy", &cluster["policies"][0]);
    assert_schema("Decision", &cluster["last_decision"]);
    assert_schema_without(
        "DecidedJob",
        &cluster["last_decision"]["jobs"][0],
        &["gpu_type"],
    );
    let attempt = shown["attempt"].as_u64().unwrap();
    let report = json!({"step": 3, "samples_per_s": 10.0, "batch_size": 64, "world_size": 2,
        "loss": 0.5, "samples_seen": 192, "attempt": attempt,
        "grad": {"grad_sqr": 1.0, "grad_var": 2.0}, "compute_time_s": 0.05, "max_local_batch": 64, "micro_steps": 2});
    assert_schema("MetricsReport", &report);
    assert_schema("GradNoise", &report["grad"]);
    let (status, answer) = call(&app, "POST", "/v1/jobs/j/metrics", Some(report)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    let answer = serde_json::to_value(api::ReportAnswer {
        accepted: true,
        reason: Some("x".into()),
        batch: Some(api::BatchAnswer {
            batch_size: 64,
            local_batch_size: 32,
            micro_steps: 1,
        }),
    })
    .unwrap();
    assert_schema("ReportAnswer", &answer);
    let completion = serde_json::to_value(api::CompletionReport {
        attempt: 1,
        step: 2,
        samples_seen: 3,
    })
    .unwrap();
    assert_schema("CompletionReport", &completion);
    let session = serde_json::to_value(api::session::SessionView {
        open: true,
        expires_at: Some(1.0),
    })
    .unwrap();
    assert_schema("Session", &session);
    let (status, error) = call(
        &app,
        "POST",
        "/v1/jobs/j/complete",
        Some(json!({"attempt": 99, "step": 1, "samples_seen": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
    assert_schema("Error", &error);
    let model = serde_json::to_value(dlscale_server::spec::PRIOR).unwrap();
    assert_schema("AnalyticModel", &model);
    assert_schema("ProfileUpload", &json!({"model": model, "quality": null}));
    let (status, _) = call(&app, "DELETE", "/v1/jobs/j", None).await;
    assert_eq!(status, StatusCode::ACCEPTED);
}

/// The submission schema lists exactly the fields a submission may carry: the job file's and
/// the service's (`current` and `current_type` are the server's own: both are refused at
/// submission).
#[test]
fn the_submission_schema_lists_every_accepted_field() {
    use dlscale_core::jobfile::{JOB_FIELDS, RUN_FIELDS};
    let schemas = openapi::schemas();
    let accepted: BTreeSet<String> = JOB_FIELDS
        .iter()
        .chain(&RUN_FIELDS)
        .filter(|&&f| !["current", "current_type"].contains(&f))
        .map(|f| f.to_string())
        .collect();
    assert_eq!(keys(&schemas["JobSubmission"]["properties"]), accepted);
    for field in ["family", "min_local_batch", "types"] {
        assert!(accepted.contains(field), "{field}");
    }
}

/// A job may name its model family; a bad name is refused naming `family`.
#[tokio::test(flavor = "multi_thread")]
async fn a_submission_names_its_family_or_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let app = service(dir.path()).await;
    let job = |id: &str, family: &str| {
        json!({"id": id, "min_batch": 8, "max_batch": 16, "max_local_batch": 8,
               "min_local_batch": 4, "family": family, "command": ["sleep", "60"],
               "workdir": "/tmp", "launcher": "plain"})
    };
    let (status, body) = call(&app, "POST", "/v1/jobs", Some(job("a", "resnet-50"))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, view) = call(&app, "GET", "/v1/jobs/a", None).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(
        view["family"],
        json!("resnet-50"),
        "the job view names it: {view}"
    );
    let (status, error) = call(&app, "POST", "/v1/jobs", Some(job("b", "no spaces"))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert_eq!(error["field"], json!("family"), "{error}");
    assert!(
        error["error"]
            .as_str()
            .unwrap_or_default()
            .contains("family"),
        "{error}"
    );
    let (status, _) = call(&app, "GET", "/v1/jobs/b", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "nothing was submitted");
    call(&app, "DELETE", "/v1/jobs/a", None).await;
}

/// An executor refuses a launcher it cannot run when the job is submitted, naming the field:
/// the Ray executor runs no `srun` job.
#[tokio::test(flavor = "multi_thread")]
async fn a_launcher_the_executor_cannot_run_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dlscale_server::ConfigFile::parse(
        "executor = \"ray\"\n[ray]\naddress = \"http://127.0.0.1:1\"\n",
        "dlscale.toml",
    )
    .unwrap();
    let app = router::harness(dir.path(), file).await.app;
    let job = |id: &str, launcher: &str| {
        json!({"id": id, "min_batch": 8, "max_batch": 16, "max_local_batch": 8,
               "command": ["sleep", "60"], "workdir": "/tmp", "launcher": launcher})
    };
    let (status, error) = call(&app, "POST", "/v1/jobs", Some(job("a", "srun"))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert_eq!(error["field"], json!("launcher"), "{error}");
    assert!(
        error["error"]
            .as_str()
            .unwrap_or_default()
            .contains("Slurm only"),
        "{error}"
    );
    let (status, body) = call(&app, "POST", "/v1/jobs", Some(job("b", "plain"))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    call(&app, "DELETE", "/v1/jobs/b", None).await;
}

/// The state of job `id` once `until` holds of the job views (within 30 s), or a panic naming
/// what was seen.
async fn await_states(
    app: &axum::Router,
    until: impl Fn(&Value, &Value) -> bool,
) -> (Value, Value) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (_, long) = call(app, "GET", "/v1/jobs/long", None).await;
        let (_, short) = call(app, "GET", "/v1/jobs/short", None).await;
        if until(&long["state"], &short["state"]) {
            return (long, short);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "long: {long}\nshort: {short}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// One slot, a job running with much work left, and a job arriving with little: with shortest
/// remaining first the short one takes the slot from the long one at the next periodic
/// decision; first come first served, it waits.
#[tokio::test(flavor = "multi_thread")]
async fn shortest_remaining_first_gives_the_slot_to_the_job_with_least_work_left() {
    let job = |id: &str, work_samples: f64| {
        json!({"id": id, "min_batch": 8, "max_batch": 8, "max_local_batch": 8,
               "work_samples": work_samples, "command": ["sleep", "600"],
               "workdir": "/tmp", "launcher": "plain"})
    };
    for shortest_first in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let file = dlscale_server::ConfigFile {
            slots: Some(1),
            remaining_exponent: Some(if shortest_first { 1.5 } else { 0.0 }),
            ..Default::default()
        };
        let harness = router::harness(dir.path(), file).await;
        let app = &harness.app;
        let (status, body) = call(app, "POST", "/v1/jobs", Some(job("long", 1e9))).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        await_states(app, |long, _| long == "running").await;
        let (status, body) = call(app, "POST", "/v1/jobs", Some(job("short", 1e3))).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        if shortest_first {
            // At the next periodic decision (an arrival's decision only admits, holding the
            // running job).
            harness.advance(1.0).await;
            await_states(app, |long, short| long == "queued" && short == "running").await;
        } else {
            // Several decisions later the long job still holds the slot.
            for _ in 0..6 {
                harness.advance(1.0).await;
            }
            let (long, short) = await_states(app, |_, _| true).await;
            assert_eq!(
                (&long["state"], &short["state"]),
                (&json!("running"), &json!("queued"))
            );
        }
        for id in ["long", "short"] {
            call(app, "DELETE", &format!("/v1/jobs/{id}"), None).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_500_never_carries_its_cause() {
    let e = dlscale_server::error::ApiError::internal("disk I/O error at /secret/path");
    assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(!e.message.contains("secret"), "{}", e.message);
}

/// An id can be used again once its job has ended; the history keeps both jobs.
#[tokio::test(flavor = "multi_thread")]
async fn an_id_is_free_again_once_its_job_ended_and_the_history_keeps_both() {
    let dir = tempfile::tempdir().unwrap();
    let app = service(dir.path()).await;
    let job = json!({"id": "a", "min_batch": 8, "max_batch": 8, "max_local_batch": 8,
                     "command": ["sleep", "60"], "workdir": "/tmp", "launcher": "plain"});
    let (status, first) = call(&app, "POST", "/v1/jobs", Some(job.clone())).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    let (status, error) = call(&app, "POST", "/v1/jobs", Some(job.clone())).await;
    assert_eq!(status, StatusCode::CONFLICT, "a live id is taken: {error}");
    let (status, _) = call(&app, "DELETE", "/v1/jobs/a", None).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (_, view) = call(&app, "GET", "/v1/jobs/a", None).await;
        if view["state"] == "cancelled" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not cancelled: {view}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (status, second) = call(&app, "POST", "/v1/jobs", Some(job)).await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "an ended job's id is free: {second}"
    );
    let (_, view) = call(&app, "GET", "/v1/jobs/a", None).await;
    assert_ne!(
        view["state"], "cancelled",
        "the id names the new job: {view}"
    );
    let (_, all) = call(&app, "GET", "/v1/jobs?all=true", None).await;
    let states: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["id"] == "a")
        .map(|j| j["state"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(states.len(), 2, "{all}");
    assert!(states.contains(&"cancelled"), "{states:?}");
    let (status, _) = call(&app, "DELETE", "/v1/jobs/a", None).await;
    assert_eq!(status, StatusCode::ACCEPTED);
}

/// A job the last decision left without GPUs says why, and until when at the latest.
#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_job_says_why_and_until_when() {
    let dir = tempfile::tempdir().unwrap();
    let app = service(dir.path()).await;
    let job = |id: &str| {
        json!({"id": id, "min_batch": 8, "max_batch": 16, "max_local_batch": 8, "min_gpus": 2,
               "max_gpus": 2, "command": ["sleep", "60"], "workdir": "/tmp", "launcher": "plain"})
    };
    let (status, a) = call(&app, "POST", "/v1/jobs", Some(job("a"))).await;
    assert_eq!(status, StatusCode::CREATED, "{a}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while call(&app, "GET", "/v1/jobs/a", None).await.1["state"] != "running" {
        assert!(std::time::Instant::now() < deadline, "a never ran");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (status, b) = call(&app, "POST", "/v1/jobs", Some(job("b"))).await;
    assert_eq!(status, StatusCode::CREATED, "{b}");
    let (_, b) = call(&app, "GET", "/v1/jobs/b", None).await;
    let waiting = b["waiting"].as_str().unwrap_or_default();
    assert!(
        waiting.starts_with(
            "the last decision gave it no GPUs; decided for again when a job \
                             arrives or ends, at the latest when a's cooldown ends at "
        ),
        "{b}"
    );
    assert!(waiting.ends_with(" UTC"), "{waiting}");
    // The same time as data: a's cooldown end, after now.
    let until = b["waiting_until"].as_f64().unwrap_or_else(|| panic!("{b}"));
    assert!(until > b["submitted_at"].as_f64().unwrap(), "{b}");
    assert!(
        waiting.ends_with(&dlscale_server::api::dto::utc_clock(until)),
        "{waiting} vs {until}"
    );
    for id in ["a", "b"] {
        call(&app, "DELETE", &format!("/v1/jobs/{id}"), None).await;
    }
}

/// `GET /v1/jobs/{id}` until `id` runs; its view.
async fn running(app: &axum::Router, id: &str) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (_, shown) = call(app, "GET", &format!("/v1/jobs/{id}"), None).await;
        if shown["state"] == "running" {
            return shown;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{id} never ran: {shown}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// On nodes of two GPU types, each node and each job shows its type, and explain says why a job
/// runs on the type it does, or that it may run on one type only; the schemas list those
/// fields.
#[tokio::test(flavor = "multi_thread")]
async fn on_typed_nodes_the_api_shows_each_nodes_and_jobs_type_and_explains_it() {
    use dlscale_core::placement::{Node, Topology};
    use dlscale_server::executor::{Capacity, NodeInfo};
    let node = |name: &str, gpus: u32, gpu_type: &str| {
        let node = Node {
            name: name.into(),
            gpus,
            gpu_type: Some(gpu_type.into()),
        };
        let info = NodeInfo {
            name: name.into(),
            total_gpus: gpus,
            addr: "127.0.0.1".into(),
            gpu_type: Some(gpu_type.into()),
        };
        (node, info)
    };
    let (nodes, infos) = [node("t4-1", 4, "t4"), node("a100-1", 2, "a100")]
        .into_iter()
        .unzip();
    let capacity = Capacity {
        topology: Topology { nodes },
        nodes: infos,
    };
    let dir = tempfile::tempdir().unwrap();
    // No cooldown: nothing holds a job where it runs.
    let file = dlscale_server::ConfigFile {
        cooldown_s: Some(0.0),
        ..Default::default()
    };
    let h = router::harness_on(dir.path(), file, capacity).await;
    let app = &h.app;
    // Batch 240 without sync: 0.005 s a sample on a T4 (800 samples/s on four), 0.001 s on an
    // A100 (2000 on two). x may run on either; y on the T4s only.
    let job = |id: &str, types: Value| {
        json!({"id": id, "min_batch": 240, "max_batch": 240, "max_local_batch": 240,
               "max_gpus": 4, "model": {"compute_base_s": 0.0, "compute_per_sample_s": 0.005},
               "types": types, "command": ["sleep", "60"], "workdir": "/tmp", "launcher": "plain"})
    };
    let a100 = json!({"model": {"compute_base_s": 0.0, "compute_per_sample_s": 0.001}});
    for body in [
        job("x", json!({"t4": {}, "a100": a100})),
        job("y", json!({"t4": {}})),
    ] {
        let (status, answer) = call(app, "POST", "/v1/jobs", Some(body)).await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
    }
    // A job runs on one type's nodes: more GPUs than the types it may use have is refused at
    // submission, naming the field (there are 6 GPUs in all, 4 T4 and 2 A100).
    for (id, min_gpus, types) in [
        ("z5", 5, json!({"t4": {}, "a100": a100})),
        ("z3", 3, json!({"a100": a100})),
    ] {
        let mut body = job(id, types);
        body["min_gpus"] = json!(min_gpus);
        body["max_gpus"] = json!(min_gpus);
        body["min_batch"] = json!(240);
        let (status, answer) = call(app, "POST", "/v1/jobs", Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{id}: {answer}");
        assert_eq!(answer["field"], json!("min_gpus"), "{id}: {answer}");
    }
    let (x, y) = (running(app, "x").await, running(app, "y").await);
    assert_eq!(
        (&x["gpu_type"], &y["gpu_type"]),
        (&json!("a100"), &json!("t4"))
    );
    assert_eq!((&x["gpus"], &y["gpus"]), (&json!(2), &json!(4)));
    assert_schema("Job", &x);

    let (_, cluster) = call(app, "GET", "/v1/cluster", None).await;
    let types: Vec<&Value> = cluster["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| &n["gpu_type"])
        .collect();
    assert_eq!(types, [&json!("t4"), &json!("a100")], "{cluster}");
    assert_schema("Node", &cluster["nodes"][0]);
    let decided = &cluster["last_decision"]["jobs"][0];
    assert_eq!(decided["gpu_type"], json!("a100"), "{cluster}");
    assert_schema("DecidedJob", decided);

    let (status, explained) = call(app, "GET", "/v1/jobs/x/explain", None).await;
    assert_eq!(status, StatusCode::OK, "{explained}");
    let types = &explained["explanation"]["types"];
    assert_eq!(types["gpu_type"], json!("a100"), "{explained}");
    let other = &types["others"][0];
    assert_eq!(
        (
            &other["gpu_type"],
            &other["best"]["gpus"],
            &other["free_gpus"]
        ),
        (&json!("t4"), &json!(4), &json!(0)),
        "{explained}"
    );
    assert_eq!(
        other["reason"],
        json!({"reason": "no-faster"}),
        "{explained}"
    );
    let summary = explained["summary"].as_str().unwrap();
    assert!(
        summary.starts_with(
            "at 2 GPUs, all the a100 GPUs there are: the type's size is the limit, not its GPU \
             range;"
        ) && summary.ends_with(
            "; 2 × a100 rather than 4 × t4: 2 × a100 gives 2000 samples/s of progress against \
             800, for fewer GPUs"
        ),
        "{summary}"
    );
    assert_schema("Explanation", &explained["explanation"]);
    assert_schema_without("TypeChoice", types, &["only_on"]);
    assert_schema("OnOtherType", other);
    assert_schema("TypeOption", &other["best"]);

    let (_, pinned) = call(app, "GET", "/v1/jobs/y/explain", None).await;
    assert_eq!(
        pinned["explanation"]["types"]["only_on"],
        json!(["t4"]),
        "{pinned}"
    );
    let summary = pinned["summary"].as_str().unwrap();
    assert!(summary.ends_with("; it may run only on t4"), "{summary}");
    assert_schema_without("TypeChoice", &pinned["explanation"]["types"], &[]);

    // The decisions carry the same explanations, and each job's type.
    let (_, decisions) = call(app, "GET", "/v1/decisions", None).await;
    assert_eq!(
        decisions["explanations"],
        json!([explained, pinned]),
        "one explanation, two routes"
    );
    assert_schema("DecisionJob", &decisions["decisions"][0]["jobs"][0]);
    // The service keeps them as it keeps explanations where the GPUs are alike: a poll of the
    // dashboard does not explain the decision again.
    let (inputs, kept) = h.service.explanations().await.expect("a decision was made");
    assert!(inputs.fleet.is_some(), "the policy decided across types");
    assert!(kept.iter().all(|e| e.types.is_some()), "{kept:?}");
    let (_, again) = h.service.explanations().await.expect("a decision was made");
    assert!(std::sync::Arc::ptr_eq(&kept, &again), "explained once");
}

/// Submits job `j` (a plain `true`) to `app`; its view.
async fn submit_j(app: &axum::Router) -> Value {
    let (status, job) = router::call(
        app,
        "POST",
        "/v1/jobs",
        json!({"id": "j", "min_batch": 32, "max_batch": 64, "max_local_batch": 64,
               "model": {"compute_base_s": 0.01, "compute_per_sample_s": 0.001},
               "command": ["true"], "workdir": "/tmp", "launcher": "plain"})
        .to_string()
        .into(),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    job
}

/// Every answer says it must not be sniffed: the dashboard's assets, a job's log (text its owner
/// writes, which a browser that sniffs could run as a same-origin script), the API's JSON and
/// the not-found fallback.
#[tokio::test(flavor = "multi_thread")]
async fn every_answer_forbids_sniffing_its_type() {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;
    let dir = tempfile::tempdir().unwrap();
    let app = service(dir.path()).await;
    submit_j(&app).await;
    for path in [
        "/",
        "/dashboard.js",
        "/v1/jobs/j/logs",
        "/v1/jobs",
        "/no/such/route",
    ] {
        let request = Request::builder()
            .uri(path)
            .header("authorization", format!("Bearer {}", router::TOKEN))
            .body(Body::empty())
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let header = response.headers().get("x-content-type-options");
        assert_eq!(
            header.and_then(|v| v.to_str().ok()),
            Some("nosniff"),
            "{path}: {}",
            response.status()
        );
    }
}

/// A log's end comes back in one answer of at most `MAX_LOG_TAIL` bytes, however many are
/// asked for: a log is as large as its job made it, and an answer is held in memory whole.
#[tokio::test(flavor = "multi_thread")]
async fn a_logs_tail_is_bounded() {
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let dir = tempfile::tempdir().unwrap();
    let app = service(dir.path()).await;
    let job = submit_j(&app).await;
    let log = std::path::PathBuf::from(job["log"].as_str().unwrap());
    let size = api::MAX_LOG_TAIL + 1000;
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    std::fs::write(&log, vec![b'x'; size as usize]).unwrap();
    let request = Request::builder()
        .uri("/v1/jobs/j/logs?tail_bytes=99999999999")
        .header("authorization", format!("Bearer {}", router::TOKEN))
        .body(Body::empty())
        .unwrap();
    let response = app.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let offset = response.headers()[api::LOG_OFFSET_HEADER]
        .to_str()
        .unwrap()
        .to_string();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body.len() as u64, api::MAX_LOG_TAIL);
    assert_eq!(offset, size.to_string());
}
