//! Load benchmark of the API (ignored by default; run on demand):
//!
//! ```text
//! cargo test --release -p dlscale-cli --test service_load -- --ignored --nocapture
//! ```
//!
//! 1,000 job submissions from 50 concurrent clients against a real `dlscale serve` on
//! 127.0.0.1 (4 slots; the jobs run `true`, so launches are real but cheap). Prints p50/p99/max
//! latency of the submissions and of job reads.

mod service_support;

use std::time::{Duration, Instant};

use dlscale_server::client::Method;
use serde_json::json;
use service_support::Server;

const CLIENTS: usize = 50;
const PER_CLIENT: usize = 20;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(what: &str, mut lat: Vec<Duration>, wall: Duration) {
    lat.sort();
    println!(
        "{what}: n={} p50={:.2} ms p99={:.2} ms max={:.2} ms throughput={:.0} req/s",
        lat.len(),
        percentile(&lat, 0.50).as_secs_f64() * 1e3,
        percentile(&lat, 0.99).as_secs_f64() * 1e3,
        lat[lat.len() - 1].as_secs_f64() * 1e3,
        lat.len() as f64 / wall.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: run with --ignored --nocapture"]
async fn thousand_submissions_from_fifty_clients() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "slots = 4\ninterval_s = 5\ncooldown_s = 5\n").await;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let client = server.client.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(PER_CLIENT);
            for i in 0..PER_CLIENT {
                let body = json!({"id": format!("load-{c}-{i}"), "min_batch": 32, "max_batch": 64,
                    "max_local_batch": 64, "max_gpus": 1, "model": "cifar10",
                    "command": ["true"], "workdir": "/tmp", "launcher": "plain"});
                let t = Instant::now();
                let (status, bytes) = client
                    .send(
                        Method::POST,
                        "/v1/jobs",
                        Some(serde_json::to_vec(&body).unwrap()),
                    )
                    .await
                    .unwrap();
                lat.push(t.elapsed());
                assert_eq!(status.as_u16(), 201, "{}", String::from_utf8_lossy(&bytes));
            }
            lat
        }));
    }
    let mut submit = Vec::new();
    for t in tasks {
        submit.extend(t.await.unwrap());
    }
    report("POST /v1/jobs", submit, start.elapsed());

    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let client = server.client.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(PER_CLIENT);
            for i in 0..PER_CLIENT {
                let t = Instant::now();
                let (status, _) = client
                    .send(Method::GET, &format!("/v1/jobs/load-{c}-{i}"), None)
                    .await
                    .unwrap();
                lat.push(t.elapsed());
                assert_eq!(status.as_u16(), 200);
            }
            lat
        }));
    }
    let mut reads = Vec::new();
    for t in tasks {
        reads.extend(t.await.unwrap());
    }
    report("GET /v1/jobs/{id}", reads, start.elapsed());
    let jobs: Vec<serde_json::Value> = server
        .client
        .call(Method::GET, "/v1/jobs", None)
        .await
        .unwrap();
    assert_eq!(jobs.len(), CLIENTS * PER_CLIENT);
}
