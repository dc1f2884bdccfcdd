//! The API as a value, for the tests: a real service (its driver, store and router) on a fake
//! executor and a manual clock, driven without a socket. The fake executor starts no process:
//! a launch runs until the test ends it or dlscale stops it; the clock moves only when the test
//! advances it, so cooldowns and decision intervals pass at once.

#![allow(dead_code)] // each test file uses a different subset

pub mod fake;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use dlscale_server::api;
use dlscale_server::clock::ManualClock;
use dlscale_server::executor::Capacity;
use dlscale_server::{ConfigFile, ServerConfig, Service};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

pub use fake::FakeExecutor;

/// The admin token of [`service`].
pub const TOKEN: &str = "router-test-token";

/// When every test's manual clock starts, seconds since the epoch.
pub const START_S: f64 = 1_800_000_000.0;

/// A started service as a router, with the fake executor its launches run on and its clock.
pub struct Harness {
    /// The router.
    pub app: axum::Router,
    /// The service behind it.
    pub service: Arc<Service>,
    /// The executor: what runs, and ending it.
    pub executor: Arc<FakeExecutor>,
    /// The service's clock.
    pub clock: Arc<ManualClock>,
}

/// A started service with its data in `data_dir`, as a router.
pub async fn service(data_dir: &std::path::Path) -> axum::Router {
    harness(data_dir, ConfigFile::default()).await.app
}

/// A started service with the settings of `file` that it sets (slots, policy settings); two
/// slots unless it says otherwise.
pub async fn harness(data_dir: &std::path::Path, file: ConfigFile) -> Harness {
    let gpus = file.slots.unwrap_or(2);
    let capacity = Capacity::one_node(fake::NODE, gpus, "127.0.0.1");
    harness_on(data_dir, file, capacity).await
}

/// [`harness`] on the nodes of `capacity` (typed ones, say).
pub async fn harness_on(
    data_dir: &std::path::Path,
    file: ConfigFile,
    capacity: Capacity,
) -> Harness {
    let gpus = capacity.topology.total();
    // The fake executor stands for any executor; slots are the local one's key.
    let local = file.executor.as_deref().is_none_or(|e| e == "local");
    let file = ConfigFile {
        slots: local.then_some(gpus),
        data_dir: Some(data_dir.to_path_buf()),
        interval_s: Some(0.5),
        ..file
    };
    let config = ServerConfig::resolve(file, Some(TOKEN.to_string())).unwrap();
    let clock = ManualClock::new(START_S);
    let mut made = None;
    let service = dlscale_server::start_with(config, clock.clone(), |_, ctx, reports| {
        let executor = Arc::new(FakeExecutor::on(ctx, capacity, reports));
        made = Some(Arc::clone(&executor));
        Ok(executor)
    })
    .await
    .unwrap();
    Harness {
        app: api::router(Arc::clone(&service)),
        service,
        executor: made.unwrap(),
        clock,
    }
}

impl Harness {
    /// Moves the clock `by_s` seconds forward and waits until the driver has handled a batch
    /// at the new time (whatever was due by then, a decision included, is done), within 20 s of
    /// real time (the fake executor's observations come every 50 ms).
    pub async fn advance(&self, by_s: f64) {
        self.clock.advance(by_s);
        let now_s = dlscale_server::clock::Clock::now_s(&*self.clock);
        let mut views = self.service.watch();
        let reached = views.wait_for(|v| v.at_s >= now_s);
        tokio::time::timeout(std::time::Duration::from_secs(20), reached)
            .await
            .unwrap_or_else(|_| panic!("no batch at {now_s}"))
            .unwrap();
    }
}

/// One request with the admin token and a JSON body; the status and the JSON answer (Null if
/// none).
pub async fn call(
    app: &axum::Router,
    method: &str,
    path: &str,
    body: Vec<u8>,
) -> (StatusCode, Value) {
    call_as(app, TOKEN, method, path, body).await
}

/// [`call`] with `token`.
pub async fn call_as(
    app: &axum::Router,
    token: &str,
    method: &str,
    path: &str,
    body: Vec<u8>,
) -> (StatusCode, Value) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Job `id`'s view once `until` holds for it (polled; at most 20 s of wall time).
pub async fn wait_job(h: &Harness, id: &str, until: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (_, view) = call(&h.app, "GET", &format!("/v1/jobs/{id}"), Vec::new()).await;
        if until(&view) {
            return view;
        }
        assert!(std::time::Instant::now() < deadline, "{id}: {view}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// The text answer to a GET of `path` with the admin token (`/metrics`).
pub async fn text(app: &axum::Router, path: &str) -> String {
    let request = Request::builder()
        .uri(path)
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Body::empty())
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&bytes).into_owned()
}
