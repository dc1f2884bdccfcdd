//! Shared helpers of the tests that run on a real Ray cluster (`eval "$(scripts/ray-local.sh up
//! --nodes 2 --gpus-per-node 1)"`: `DLSCALE_RAY_ADDRESS`, the dashboard, and
//! `DLSCALE_RAY_RESOURCE`, the custom resource that stands for GPUs, exported).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

/// The tests share one Ray cluster and assert on its capacity: one at a time.
pub static RAY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Whether a missing Ray cluster fails the tests (`DLSCALE_REQUIRE_RAY=1`) instead of skipping
/// them.
pub fn required() -> bool {
    std::env::var("DLSCALE_REQUIRE_RAY").as_deref() == Ok("1")
}

/// The dashboard's address (`http://127.0.0.1:8265`).
pub fn address() -> String {
    std::env::var("DLSCALE_RAY_ADDRESS").unwrap_or_else(|_| "http://127.0.0.1:8265".into())
}

/// The resource a worker takes one unit of.
pub fn resource() -> String {
    std::env::var("DLSCALE_RAY_RESOURCE").unwrap_or_else(|_| "fake_gpu".into())
}

/// The server configuration of a test on the cluster: the Ray executor and `common` keys.
pub fn config(common: &str) -> String {
    format!(
        "executor = \"ray\"\n{common}\n[ray]\naddress = \"{}\"\nresource = \"{}\"\npoll_s = 0.5\n",
        address(),
        resource()
    )
}

/// `method path` on the dashboard, blocking (for watchers on threads of their own); the
/// answer's body, or why there is none.
pub fn request(method: &str, path: &str) -> Result<String, String> {
    let base = address();
    let host = base
        .strip_prefix("http://")
        .ok_or_else(|| format!("DLSCALE_RAY_ADDRESS is not http://: {base}"))?;
    let mut stream = TcpStream::connect(host).map_err(|e| format!("{host}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .map_err(|e| format!("{path}: {e}"))?;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{path}: no HTTP answer"))?;
    if !head.starts_with("HTTP/1.1 2") && !head.starts_with("HTTP/1.0 2") {
        return Err(format!("{path}: {}", head.lines().next().unwrap_or("")));
    }
    Ok(body.to_string())
}

/// Why the cluster cannot be used, if it cannot: its dashboard answers, and two alive nodes
/// offer 1 unit of the resource each.
pub fn ray_unusable() -> Option<String> {
    let listed = match request("GET", "/api/v0/nodes?detail=1") {
        Ok(text) => text,
        Err(why) => {
            return Some(format!(
                "the Ray dashboard at {} does not answer: {why}",
                address()
            ))
        }
    };
    let v: Value = serde_json::from_str(&listed).unwrap_or(Value::Null);
    let units: Vec<f64> = v
        .pointer("/data/result/result")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|n| n["state"] == "ALIVE")
        .filter_map(|n| n["resources_total"][resource()].as_f64())
        .collect();
    (units != [1.0, 1.0]).then(|| {
        format!(
            "the Ray cluster must have 2 alive nodes with 1 {} each; it has {units:?}",
            resource()
        )
    })
}

/// Whether the test may run; prints SKIP or panics (with `DLSCALE_REQUIRE_RAY=1`) if not.
pub fn ray_ready(test: &str) -> bool {
    const START: &str = "eval \"$(scripts/ray-local.sh up --nodes 2 --gpus-per-node 1)\"";
    match ray_unusable() {
        None => true,
        Some(why) if required() => {
            panic!("DLSCALE_REQUIRE_RAY=1 but Ray is not usable: {why} (run: {START})")
        }
        Some(why) => {
            eprintln!("SKIP {test}: {why}; start it with: {START} (set DLSCALE_REQUIRE_RAY=1 to fail instead)");
            false
        }
    }
}

/// A Ray job of a dlscale server.
#[derive(Debug, Clone, PartialEq)]
pub struct RayJob {
    /// Its submission id.
    pub submission_id: String,
    /// The launch number.
    pub attempt: u32,
    /// Ray's status.
    pub status: String,
}

/// Whether process `pid` (command line `cmd`) is Ray supervising a job rather than the job's own
/// code. Ray gives its supervision the job's runtime environment, the launch marker included:
/// the job's supervisor actor (a Ray worker process), and the orphan watcher the supervisor
/// starts in a session of its own (`while kill -s 0 <supervisor>; do sleep 1; done; ...`), which
/// outlives the supervisor, and so the job's end, by up to a second.
pub fn is_supervision(pid: i32, cmd: &str) -> bool {
    // A Ray worker process: titled `ray::…` once its actor runs, `default_worker.py` before.
    if cmd.starts_with("ray::") || cmd.contains("/workers/default_worker.py") {
        return true;
    }
    // The session (field 6 of `stat`, after the command in parentheses) and its leader's command.
    let session = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s[s.rfind(')')? + 1..]
                .split_whitespace()
                .nth(3)?
                .parse::<i32>()
                .ok()
        });
    session.is_some_and(|sid| {
        std::fs::read(format!("/proc/{sid}/cmdline"))
            .is_ok_and(|c| c.starts_with(b"/bin/sh\0-c\0while kill -s 0 "))
    })
}

/// The Ray jobs of server `instance` that are not over (pending or running), by dlscale job.
pub fn live(instance: &str) -> BTreeMap<String, Vec<RayJob>> {
    let Ok(text) = request("GET", "/api/jobs/") else {
        return BTreeMap::new();
    };
    let listed: Vec<Value> = serde_json::from_str(&text).unwrap_or_default();
    let mut by_job: BTreeMap<String, Vec<RayJob>> = BTreeMap::new();
    for j in listed {
        let status = j["status"].as_str().unwrap_or("").to_string();
        if !matches!(status.as_str(), "PENDING" | "RUNNING") {
            continue;
        }
        let Some(marker) = j["metadata"]["dlscale_launch"].as_str() else {
            continue;
        };
        let Some((ours, id, attempt)) = dlscale_server::executor::parse_launch_marker(marker)
        else {
            continue;
        };
        if ours == instance {
            by_job.entry(id.to_string()).or_default().push(RayJob {
                submission_id: j["submission_id"].as_str().unwrap_or("").to_string(),
                attempt,
                status,
            });
        }
    }
    by_job
}

/// Stops the live Ray jobs of the server in `data_dir` when dropped (test cleanup).
pub struct StopOnDrop(pub std::path::PathBuf);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let Ok(instance) = std::fs::read_to_string(self.0.join("instance")) else {
            return;
        };
        for job in live(instance.trim()).into_values().flatten() {
            let _ = request("POST", &format!("/api/jobs/{}/stop", job.submission_id));
        }
    }
}
