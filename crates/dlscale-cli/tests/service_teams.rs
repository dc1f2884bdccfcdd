//! Teams and users end to end: a real `dlscale serve` with two teams and a user in each, plain
//! shell workers that checkpoint on SIGTERM. Team a is idle, so b's job borrows a's GPUs; when
//! a's user submits, the borrowed GPUs come back within the bound (a decision plus the stop's
//! grace), no step lost or repeated; b's user may not cancel a's job; `dlscale usage` adds up
//! what the launches held.

mod service_support;

use std::time::{Duration, Instant};

use dlscale_autoscaler::Status as JobStatus;
use dlscale_server::client::{ApiClient, Method};
use dlscale_server::users::new_token;
use serde_json::{json, Value};
use service_support::{assert_resumed_where_stopped, Server, WORKER};

/// The stop's grace period, seconds: the reclaim's bound is a decision plus this.
const GRACE_S: f64 = 5.0;

fn job(id: &str, total_steps: u32) -> Value {
    json!({"id": id, "min_batch": 32, "max_batch": 256, "max_local_batch": 64, "max_gpus": 4,
           "model": {"compute_base_s": 0.01, "compute_per_sample_s": 0.001, "sync_intra_base_s": 0.002},
           "command": ["sh", "-c", WORKER], "env": {"TOTAL": total_steps.to_string()},
           "workdir": "/tmp", "launcher": "plain"})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_teams_lent_gpus_come_back_when_it_submits_and_only_its_users_change_its_jobs() {
    let (alice, alice_hash) = new_token("alice").unwrap();
    let (bob, bob_hash) = new_token("bob").unwrap();
    let config = format!(
        "slots = 4\ncooldown_s = 1\ninterval_s = 0.5\ngrace_s = {GRACE_S}\nmin_gain = 0.05\n\
         [teams.a]\nguaranteed_gpus = 3\n[teams.b]\nguaranteed_gpus = 1\n\
         [users.alice]\nteam = \"a\"\ntoken_hash = \"{alice_hash}\"\n\
         [users.bob]\nteam = \"b\"\ntoken_hash = \"{bob_hash}\"\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &config).await;
    let url = format!("http://127.0.0.1:{}", server.port);
    let as_user = |token: &str| ApiClient::new(&url, Some(token.to_string())).unwrap();
    let (alice, bob) = (as_user(&alice), as_user(&bob));
    let submit = |client: &ApiClient, job: Value| {
        let client = client.clone();
        async move {
            let (status, body) = client
                .send(
                    Method::POST,
                    "/v1/jobs",
                    Some(serde_json::to_vec(&job).unwrap()),
                )
                .await
                .unwrap();
            assert_eq!(status.as_u16(), 201, "{}", String::from_utf8_lossy(&body));
        }
    };

    // Team a is idle: bob's job borrows its three GPUs.
    submit(&bob, job("b1", 150)).await;
    let b1 = server
        .wait_job("b1", 20.0, "b1 on all four", |j| {
            j.state == JobStatus::Running
        })
        .await;
    assert_eq!(
        (b1.gpus, b1.team.as_deref(), b1.owner.as_deref()),
        (4, Some("b"), Some("bob"))
    );
    tokio::time::sleep(Duration::from_millis(1500)).await; // past b1's cooldown

    // Alice submits: team a's guarantee comes back within a decision and the stop's grace
    // (three GPUs, where fairness without teams would split the four evenly).
    let asked = Instant::now();
    submit(&alice, job("a1", 40)).await;
    let a1 = server
        .wait_job("a1", 20.0, "a1 running", |j| j.state == JobStatus::Running)
        .await;
    let waited_s = asked.elapsed().as_secs_f64();
    assert!(waited_s <= 1.0 + GRACE_S + 2.0, "a1 waited {waited_s} s");
    let b2 = server
        .wait_job("b1", 20.0, "b1 relaunched", |j| {
            j.attempt == 2 && j.state == JobStatus::Running
        })
        .await;
    assert_eq!((a1.gpus, b2.gpus), (3, 1));

    // Bob may not cancel alice's job.
    let (status, body) = bob.send(Method::DELETE, "/v1/jobs/a1", None).await.unwrap();
    assert_eq!(status.as_u16(), 403, "{}", String::from_utf8_lossy(&body));
    // `dlscale jobs --team` lists one team's jobs.
    for (team, expected) in [("a", "a1"), ("b", "b1")] {
        let listed: Vec<Value> = serde_json::from_str(&service_support::cli(
            &server,
            &["jobs", "--team", team, "--format", "json"],
        ))
        .unwrap();
        let ids: Vec<&str> = listed.iter().filter_map(|j| j["id"].as_str()).collect();
        assert_eq!(ids, [expected], "team {team}");
    }
    // A team the server does not have is refused, naming its teams (it listed nothing).
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dlscale"))
        .args(["jobs", "--team", "nosuch"])
        .env("DLSCALE_API", format!("http://127.0.0.1:{}", server.port))
        .env("DLSCALE_TOKEN", service_support::TOKEN)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--team nosuch: not a team of this server (its teams: a, b, default)"),
        "{stderr}"
    );

    for id in ["a1", "b1"] {
        let done = server
            .wait_job(id, 90.0, "success", |j| j.state == JobStatus::Succeeded)
            .await;
        assert_eq!(done.exit_code, Some(0), "{done:?}");
        let log = server
            .client
            .text(&format!("/v1/jobs/{id}/logs"))
            .await
            .unwrap();
        assert_resumed_where_stopped(&log);
    }
    let b_log = server.client.text("/v1/jobs/b1/logs").await.unwrap();
    assert!(
        b_log.contains("dlscale: stopped step="),
        "b1 was never stopped:\n{b_log}"
    );

    // `dlscale usage` by team: what each team's launches held, within a second a launch.
    let usage: Vec<Value> = serde_json::from_str(&service_support::cli(
        &server,
        &["usage", "--by", "team", "--format", "json"],
    ))
    .unwrap();
    for (team, id) in [("a", "a1"), ("b", "b1")] {
        let (held, launches) = service_support::allocated_gpu_s(&server, id).await;
        let row = usage.iter().find(|r| r["key"] == team).unwrap();
        let counted = row["gpu_seconds"].as_f64().unwrap();
        assert!(
            (counted - held).abs() <= 4.0 * launches as f64,
            "team {team}: usage {counted}, allocations {held}"
        );
    }
}

/// SIGHUP reloads the configuration without a restart: a new user's token is taken and a
/// removed user's refused, a team's new maximum shrinks its job in the decision it makes, and a
/// configuration that does not hold together changes nothing and says why in the log.
#[tokio::test(flavor = "multi_thread")]
async fn a_reloaded_configuration_changes_users_and_quotas_without_a_restart() {
    let (alice, alice_hash) = new_token("alice").unwrap();
    let (bob, bob_hash) = new_token("bob").unwrap();
    let config = |max_a: u32, users: &str| {
        format!(
            "slots = 4\ncooldown_s = 0\ninterval_s = 0.5\ngrace_s = {GRACE_S}\n\
             [teams.a]\nguaranteed_gpus = 2\nmax_gpus = {max_a}\n[teams.b]\nguaranteed_gpus = 2\n{users}"
        )
    };
    let alice_in_a = format!("[users.alice]\nteam = \"a\"\ntoken_hash = \"{alice_hash}\"\n");
    let bob_in_b = format!("[users.bob]\nteam = \"b\"\ntoken_hash = \"{bob_hash}\"\n");
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &config(4, &alice_in_a)).await;
    let url = format!("http://127.0.0.1:{}", server.port);
    let as_user = |token: &str| ApiClient::new(&url, Some(token.to_string())).unwrap();
    let (alice, bob) = (as_user(&alice), as_user(&bob));
    let status = |client: &ApiClient| {
        let client = client.clone();
        async move {
            let (status, _) = client.send(Method::GET, "/v1/jobs", None).await.unwrap();
            status.as_u16()
        }
    };
    assert_eq!((status(&alice).await, status(&bob).await), (200, 401));
    // a1 takes all four GPUs: two of a's, two borrowed from idle b.
    let (code, body) = alice
        .send(
            Method::POST,
            "/v1/jobs",
            Some(serde_json::to_vec(&job("a1", 100_000)).unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(code.as_u16(), 201, "{}", String::from_utf8_lossy(&body));
    server
        .wait_job("a1", 20.0, "a1 on four GPUs", |j| {
            j.state == JobStatus::Running && j.gpus == 4
        })
        .await;

    // Bob is added, alice removed, and team a may hold two GPUs at most.
    server.reload(&config(2, &bob_in_b));
    service_support::wait_until(10.0, "bob's token taken", || async {
        status(&bob).await == 200
    })
    .await;
    assert_eq!(status(&alice).await, 401);
    let a1 = server
        .wait_job("a1", 10.0 + GRACE_S, "a1 shrunk to a's new maximum", |j| {
            j.state == JobStatus::Running && j.gpus == 2
        })
        .await;
    assert!(a1.attempt >= 2, "{a1:?}");
    let (_, teams) = server.json(Method::GET, "/v1/teams", None).await;
    assert_eq!(teams[0]["team"], "a", "{teams}");
    assert_eq!(teams[0]["max_gpus"], 2, "{teams}");
    assert!(
        server
            .log()
            .contains("configuration reloaded: teams: a guaranteed 2"),
        "{}",
        server.log()
    );

    // Guarantees beyond the cluster: refused, nothing changes, the log says why.
    let too_much = config(4, &bob_in_b).replace(
        "[teams.a]\nguaranteed_gpus = 2",
        "[teams.a]\nguaranteed_gpus = 3",
    );
    server.reload(&too_much);
    service_support::wait_until(10.0, "the refusal in the log", || async {
        server.log().contains("configuration not reloaded")
    })
    .await;
    assert!(
        server
            .log()
            .contains("the guarantees add up to 5 GPUs, more than the 4"),
        "{}",
        server.log()
    );
    let (_, teams) = server.json(Method::GET, "/v1/teams", None).await;
    assert_eq!(
        (&teams[0]["guaranteed_gpus"], &teams[0]["max_gpus"]),
        (&json!(2), &json!(2)),
        "{teams}"
    );
    assert_eq!(status(&bob).await, 200);
    // Team a gone while a1 still runs in it: refused, naming the team and its job.
    server.reload(&config(4, &bob_in_b).replace("[teams.a]", "[teams.c]"));
    service_support::wait_until(10.0, "the refusal of team a's removal", || async {
        server
            .log()
            .contains("team 'a' is not configured, and 1 live job(s) of it remain (a1)")
    })
    .await;
    let (_, teams) = server.json(Method::GET, "/v1/teams", None).await;
    assert_eq!(teams[0]["team"], "a", "{teams}");
    // Settings read at the start only: each changed one is named, and waits.
    let later = config(2, &bob_in_b).replace(
        &format!("grace_s = {GRACE_S}\n"),
        &format!("grace_s = {}\nmin_gain = 0.2\n", GRACE_S + 1.0),
    );
    server.reload(&later);
    service_support::wait_until(10.0, "the settings that wait, named", || async {
        server.log().contains(
            "configuration reloaded: grace_s, settings.restart.min_gain changed: taken at \
             the next start",
        )
    })
    .await;
    server.cancel("a1").await;
    service_support::assert_replays(&server);
}
