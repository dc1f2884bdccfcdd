//! The API as a value, for the tests: a real service (local executor, two slots) behind its
//! router, driven without a socket.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use dlscale_server::api;
use dlscale_server::{ConfigFile, ServerConfig};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

/// The admin token of [`service`].
pub const TOKEN: &str = "router-test-token";

/// A started service with its data in `data_dir`, as a router.
pub async fn service(data_dir: &std::path::Path) -> axum::Router {
    service_with(data_dir, ConfigFile::default()).await
}

/// [`service`] with the settings of `file` that it sets (slots, policy settings).
pub async fn service_with(data_dir: &std::path::Path, file: ConfigFile) -> axum::Router {
    let file = ConfigFile {
        slots: Some(file.slots.unwrap_or(2)),
        data_dir: Some(data_dir.to_path_buf()),
        interval_s: Some(0.5),
        ..file
    };
    let config = ServerConfig::resolve(file, Some(TOKEN.to_string())).unwrap();
    api::router(dlscale_server::start(config).await.unwrap())
}

/// One request with the token and a JSON body; the status and the JSON answer (Null if none).
pub async fn call(
    app: &axum::Router,
    method: &str,
    path: &str,
    body: Vec<u8>,
) -> (StatusCode, Value) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {TOKEN}"))
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
