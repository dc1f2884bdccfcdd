//! `dlscale explain ID` and `dlscale jobs --watch` against a real `dlscale serve` with real jobs
//! (`examples/plain_job.py` on three slots).

mod service_support;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use dlscale_server::api::dto::ExplainView;
use dlscale_server::client::Method;
use serde_json::{json, Value};
use service_support::{cli, repo_root, Server, TOKEN};

const CONFIG: &str = "slots = 3\ncooldown_s = 0\ninterval_s = 0.5\ngrace_s = 3\n";

fn plain_job(id: &str, max_gpus: u32) -> Value {
    json!({"id": id, "min_batch": 32, "max_batch": 256, "max_local_batch": 64, "max_gpus": max_gpus,
           "model": {"compute_base_s": 0.01, "compute_per_sample_s": 0.001, "sync_intra_base_s": 0.002},
           "command": ["python3", repo_root().join("examples/plain_job.py").display().to_string(),
                       "--steps", "600", "--step-s", "0.1"],
           "workdir": "/tmp", "launcher": "plain"})
}

#[tokio::test(flavor = "multi_thread")]
async fn explain_says_why_and_jobs_watch_redraws() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), CONFIG).await;
    server.submit(plain_job("a", 2)).await;
    server
        .wait_job("a", 30.0, "a on 2 slots", |j| j.gpus == 2)
        .await;
    server.submit(plain_job("b", 2)).await;
    server
        .wait_job("b", 30.0, "b running", |j| j.state.name() == "running")
        .await;

    // a keeps its 2 slots (a rescale must gain 5 %; the two split the same either way): b's
    // second GPU would be a's. b started in a decision on its arrival, which held a (no job
    // could give a GPU up there); the periodic decision after it weighs a's GPUs too.
    // What the CLI prints is what the API says, with the numbers behind it.
    let mut api: Option<ExplainView> = None;
    for _ in 0..100 {
        let (_, body) = server.json(Method::GET, "/v1/jobs/b/explain", None).await;
        let view: ExplainView = serde_json::from_value(body).unwrap();
        let done = view.explanation.as_ref().is_some_and(|e| e.donor.is_some());
        api = Some(view);
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let api = api.unwrap();
    let e = api.explanation.as_ref().expect("b is in the last decision");
    assert_eq!((e.gpus, e.free_gpus), (1, 0), "{api:?}");
    assert_eq!(
        e.donor.as_ref().map(|d| d.id.as_str()),
        Some("a"),
        "{api:?}"
    );
    // A decision every 0.5 s may change the explanation between two reads: the CLI must say
    // what the API said just before or just after it (a few tries on a loaded machine).
    let summary = || async {
        let (_, body) = server.json(Method::GET, "/v1/jobs/b/explain", None).await;
        serde_json::from_value::<ExplainView>(body).unwrap().summary
    };
    let mut text = String::new();
    for _ in 0..5 {
        let before = summary().await;
        text = cli(&server, &["explain", "b"]);
        let after = summary().await;
        let first = text.lines().next().unwrap_or_default().to_string();
        if [before, after].iter().any(|s| first == format!("b: {s}")) {
            break;
        }
        text.clear();
    }
    assert!(!text.is_empty(), "the CLI never said what the API said");
    assert!(
        text.contains("  more GPUs:    2 GPUs, batch ")
            && text.contains("  would lose:   a (2 → 1 GPU, value -"),
        "{text}"
    );
    let json: ExplainView =
        serde_json::from_str(&cli(&server, &["explain", "b", "--format", "json"])).unwrap();
    assert!(
        json.summary.starts_with("at 1 GPU") || json.summary.starts_with("held at 1 GPU"),
        "{json:?}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_dlscale"))
        .args(["explain", "nobody"])
        .env("DLSCALE_API", format!("http://127.0.0.1:{}", server.port))
        .env("DLSCALE_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no job 'nobody'"));

    // --watch redraws until it is stopped.
    let mut watch = Command::new(env!("CARGO_BIN_EXE_dlscale"))
        .args(["jobs", "--watch", "0.3"])
        .env("DLSCALE_API", format!("http://127.0.0.1:{}", server.port))
        .env("DLSCALE_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    watch.kill().unwrap();
    watch.wait().unwrap();
    let mut shown = String::new();
    watch
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut shown)
        .unwrap();
    let frames: Vec<&str> = shown
        .split("\x1b[H\x1b[2J")
        .filter(|f| !f.is_empty())
        .collect();
    assert!(frames.len() >= 3, "{shown:?}");
    for frame in frames {
        assert!(frame.starts_with("every 0.3 s: dlscale jobs"), "{frame:?}");
        for id in ["a ", "b "] {
            assert!(frame.lines().any(|l| l.starts_with(id)), "{frame:?}");
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_dlscale"))
        .args(["jobs", "--watch", "0"])
        .env("DLSCALE_API", format!("http://127.0.0.1:{}", server.port))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a zero interval is bad input");
}
