//! The local executor on a machine of two GPU types, end to end without torch: a real `dlscale
//! serve` whose four slots are configured as two A100s and two T4s (`slot_types`) shows one node
//! per type, runs each job on its type's slots only (its `CUDA_VISIBLE_DEVICES`), and finds the
//! launches on them again after a kill -9.

mod service_support;

use dlscale_autoscaler::Status as JobStatus;
use dlscale_server::api::dto::JobView;
use dlscale_server::client::Method;
use serde_json::{json, Value};
use service_support::Server;

/// Slots 0 and 1 are A100s, 2 and 3 T4s; a type written as a vendor writes it is lower-cased.
const CONFIG: &str = "slots = 4\nslot_types = [\"A100\", \"a100\", \"t4\", \"t4\"]\n\
                      cooldown_s = 1\ninterval_s = 0.5\ngrace_s = 3\n";

/// A job that may run on `gpu_type` only, printing the devices and nodes it was given.
fn job(id: &str, gpu_type: &str) -> Value {
    json!({"id": id, "min_batch": 32, "max_batch": 256, "max_local_batch": 64, "max_gpus": 4,
           "model": {"compute_base_s": 0.01, "compute_per_sample_s": 0.001},
           "types": {gpu_type: {}},
           "command": ["sh", "-c",
                       "echo \"devices=$CUDA_VISIBLE_DEVICES nodes=$DLSCALE_NODE_LIST\"; sleep 60"],
           "workdir": "/tmp", "launcher": "plain"})
}

/// Where job `id` runs: its type, slots and shares.
fn placed(j: &JobView) -> (Option<&str>, Vec<u32>, Vec<(String, u32)>) {
    let shares = j
        .nodes
        .iter()
        .map(|s| (s.node.to_string(), s.gpus))
        .collect();
    (j.gpu_type.as_deref(), j.slots.clone(), shares)
}

async fn running(server: &Server, id: &str, attempt: u32) -> JobView {
    server
        .wait_job(id, 20.0, "running on its slots", |j| {
            j.state == JobStatus::Running
                && j.attempt == attempt
                && j.engine_id("pgid").is_some()
                && !j.slots.is_empty()
        })
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn each_job_runs_on_its_types_slots_and_is_found_there_after_a_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), CONFIG).await;

    let (_, cluster) = server.json(Method::GET, "/v1/cluster", None).await;
    let nodes: Vec<(&Value, &Value, &Value)> = cluster["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (&n["name"], &n["gpu_type"], &n["gpus"]))
        .collect();
    assert_eq!(
        nodes,
        [
            (&json!("local-a100"), &json!("a100"), &json!(2)),
            (&json!("local-t4"), &json!("t4"), &json!(2)),
        ],
        "{cluster}"
    );
    assert_eq!(cluster["slots"], json!([0, 1, 2, 3]), "{cluster}");

    // The T4 job first: the free slots it is given are the T4s, not the first ones.
    server.submit(job("on-t4", "t4")).await;
    server.submit(job("on-a100", "a100")).await;
    let t4 = running(&server, "on-t4", 1).await;
    let a100 = running(&server, "on-a100", 1).await;
    let t4_place = (Some("t4"), vec![2, 3], vec![("local-t4".to_string(), 2)]);
    let a100_place = (
        Some("a100"),
        vec![0, 1],
        vec![("local-a100".to_string(), 2)],
    );
    assert_eq!(placed(&t4), t4_place, "{t4:?}");
    assert_eq!(placed(&a100), a100_place, "{a100:?}");
    for (id, line) in [
        ("on-t4", "devices=2,3 nodes=local-t4"),
        ("on-a100", "devices=0,1 nodes=local-a100"),
    ] {
        let client = &server.client;
        service_support::wait_until(10.0, "the job's line in its log", || async move {
            let log = client.text(&format!("/v1/jobs/{id}/logs")).await;
            log.is_ok_and(|l| l.contains(line))
        })
        .await;
    }

    // After a kill -9 the launches are found again where they run: the same launch, slots and
    // type, not a relaunch.
    server.kill9();
    server.restart().await;
    let (_, cluster) = server.json(Method::GET, "/v1/cluster", None).await;
    assert_eq!(cluster["nodes"][1]["name"], json!("local-t4"), "{cluster}");
    let t4 = running(&server, "on-t4", 1).await;
    let a100 = running(&server, "on-a100", 1).await;
    assert_eq!(placed(&t4), t4_place, "{t4:?}");
    assert_eq!(placed(&a100), a100_place, "{a100:?}");
    assert_eq!((t4.restarts, a100.restarts), (0, 0));
}
