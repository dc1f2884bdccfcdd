//! Users and teams through the router: a user's job is theirs and their team's; a user reads
//! every job's public state but cancels, and reads the logs of, only their own team's jobs (403
//! naming why); only the admin changes profiles; the event history says who did what.

use axum::http::StatusCode;
use dlscale_server::config::{TeamFile, UserFile};
use dlscale_server::users::new_token;
use dlscale_server::ConfigFile;
use serde_json::{json, Value};

mod router;

use router::{call, call_as, wait_job, Harness};

/// Teams a and b; alice is in a, bob in b. Their tokens.
async fn two_teams(dir: &std::path::Path) -> (Harness, String, String) {
    let (alice, alice_hash) = new_token("alice").unwrap();
    let (bob, bob_hash) = new_token("bob").unwrap();
    let team = |g| TeamFile {
        guaranteed_gpus: Some(g),
        ..TeamFile::default()
    };
    let user = |team: &str, token_hash: String| UserFile {
        team: Some(team.into()),
        token_hash,
    };
    let file = ConfigFile {
        slots: Some(4),
        teams: Some([("a".into(), team(2)), ("b".into(), team(2))].into()),
        users: Some(
            [
                ("alice".into(), user("a", alice_hash)),
                ("bob".into(), user("b", bob_hash)),
            ]
            .into(),
        ),
        ..ConfigFile::default()
    };
    (router::harness(dir, file).await, alice, bob)
}

fn job(id: &str) -> Value {
    json!({"id": id, "min_batch": 32, "max_batch": 64, "max_local_batch": 64,
           "model": {"compute_base_s": 0.01, "compute_per_sample_s": 0.001},
           "command": ["true"], "workdir": "/tmp", "launcher": "plain"})
}

fn events(view: &Value) -> Vec<String> {
    view["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["detail"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_user_changes_only_their_own_teams_jobs_and_the_history_says_who() {
    let dir = tempfile::tempdir().unwrap();
    let (h, alice, bob) = two_teams(dir.path()).await;
    let app = &h.app;

    // Alice's job is hers and team a's.
    let (status, view) =
        call_as(app, &alice, "POST", "/v1/jobs", job("j").to_string().into()).await;
    assert_eq!(status, StatusCode::CREATED, "{view}");
    assert_eq!(
        (&view["team"], &view["owner"]),
        (&json!("a"), &json!("alice"))
    );
    let (_, view) = call(app, "GET", "/v1/jobs/j", Vec::new()).await;
    assert!(
        events(&view).contains(&"j: submitted by alice".to_string()),
        "{view}"
    );

    // Not to another team.
    let mut other = job("k");
    other["team"] = json!("b");
    let (status, body) = call_as(app, &alice, "POST", "/v1/jobs", other.to_string().into()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["field"], "team");

    // Bob reads it, but neither cancels it nor reads its log.
    let (status, _) = call_as(app, &bob, "GET", "/v1/jobs/j", Vec::new()).await;
    assert_eq!(status, StatusCode::OK);
    for (method, path) in [("DELETE", "/v1/jobs/j"), ("GET", "/v1/jobs/j/logs")] {
        let (status, body) = call_as(app, &bob, method, path, Vec::new()).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {body}");
        assert_eq!(
            body["error"],
            "job j belongs to team a; user bob (team b) may change only their own team's jobs"
        );
    }
    // Only the admin stores profiles.
    let profile = json!({"model": {"compute_base_s": 0.0, "compute_per_sample_s": 0.001}});
    let (status, body) = call_as(
        app,
        &bob,
        "PUT",
        "/v1/profiles/p",
        profile.to_string().into(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    // A token nobody holds.
    let forged = format!("{}x", &alice[..alice.len() - 1]);
    let (status, _) = call_as(app, &forged, "GET", "/v1/jobs", Vec::new()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // Alice cancels her own; the history says she did.
    let (status, body) = call_as(app, &alice, "DELETE", "/v1/jobs/j", Vec::new()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (_, view) = call(app, "GET", "/v1/jobs/j", Vec::new()).await;
    assert!(
        events(&view)
            .iter()
            .any(|e| e.starts_with("j: cancelled") && e.contains("by alice")),
        "{view}"
    );

    // Its checkpoints are team a's: bob starts no job from them, alice does.
    let ended = wait_job(&h, "j", |v| v["state"] == "cancelled").await;
    let saved = dir
        .path()
        .join("jobs/j")
        .join(ended["uid"].as_str().unwrap())
        .join("checkpoints");
    std::fs::create_dir_all(&saved).unwrap();
    let mut resuming = job("j2");
    resuming["resume_from"] = json!("j");
    let (status, body) = call_as(app, &bob, "POST", "/v1/jobs", resuming.to_string().into()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["field"], "resume_from", "{body}");
    let (status, body) =
        call_as(app, &alice, "POST", "/v1/jobs", resuming.to_string().into()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}
