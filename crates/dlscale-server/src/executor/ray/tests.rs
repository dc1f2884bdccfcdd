use super::*;

/// A job list as Ray 2.60's `GET /api/jobs/` gives it (trimmed): jobs of this server (`abc`),
/// of another server, a user's own job and a driver that is no submission.
fn job_list() -> String {
    let job = |sid: &str, status: &str, start_ms: u64, code: Option<i32>, marker: Option<&str>| {
        json!({
            "type": "SUBMISSION", "job_id": null, "submission_id": sid, "status": status,
            "entrypoint": "cd /w && exec python train.py", "message": format!("{status} message"),
            "error_type": null, "start_time": start_ms, "end_time": null,
            "metadata": marker.map(|m| json!({"dlscale_launch": m})),
            "driver_exit_code": code,
        })
    };
    json!([
        job("dlscale-abc-a-1", "STOPPED", 1_000_000, None, Some("a:1:dlscale:abc")),
        job("dlscale-abc-a-2", "RUNNING", 2_000_000, None, Some("a:2:dlscale:abc")),
        job("dlscale-abc-b-1", "PENDING", 3_000_000, None, Some("b:1:dlscale:abc")),
        job("dlscale-abc-c-1", "FAILED", 4_000_000, Some(3), Some("c:1:dlscale:abc")),
        job("dlscale-abc-d-1", "SUCCEEDED", 5_000_000, Some(0), Some("d:1:dlscale:abc")),
        job("dlscale-zzz-a-1", "RUNNING", 6_000_000, None, Some("a:1:dlscale:zzz")),
        job("users-own", "RUNNING", 7_000_000, None, None),
        {"type": "DRIVER", "job_id": "02000000", "submission_id": null, "status": "RUNNING",
         "metadata": {}, "start_time": 1},
    ])
    .to_string()
}

#[test]
fn the_job_list_yields_this_servers_jobs_only() {
    let jobs = parse_jobs(&job_list(), "abc").unwrap();
    let ids: Vec<&str> = jobs.iter().map(|j| j.submission_id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "dlscale-abc-a-1",
            "dlscale-abc-a-2",
            "dlscale-abc-b-1",
            "dlscale-abc-c-1",
            "dlscale-abc-d-1"
        ]
    );
    let b = &jobs[2];
    assert_eq!((b.job.as_str(), b.attempt), ("b", 1));
    assert_eq!(b.submitted_s, Some(3000.0));
    assert!(parse_jobs("{\"not\": \"a list\"}", "abc").is_err());
}

#[test]
fn each_status_reads_as_the_autoscaler_expects() {
    let jobs = parse_jobs(&job_list(), "abc").unwrap();
    let believed = vec![
        ("a".to_string(), 2),
        ("c".to_string(), 1),
        ("d".to_string(), 1),
        ("e".to_string(), 1),
    ];
    let (obs, handles) = interpret(&jobs, &believed, 9000.0);
    let state = |id: &str, attempt: u32| {
        obs.launches
            .iter()
            .find(|l| l.id == id && l.attempt == attempt)
            .map(|l| l.state.clone())
    };
    assert_eq!(state("a", 2), Some(LaunchState::Running));
    // Launch 1 of a ended long ago and is not believed in: history, not news.
    assert_eq!(state("a", 1), None);
    assert_eq!(
        state("b", 1),
        Some(LaunchState::Pending {
            since_s: 3000.0,
            requeued: false
        })
    );
    assert_eq!(
        state("c", 1),
        Some(LaunchState::Ended {
            outcome: Outcome::Exited(3)
        })
    );
    assert_eq!(
        state("d", 1),
        Some(LaunchState::Ended {
            outcome: Outcome::Exited(0)
        })
    );
    // Not in the list at all: the autoscaler decides (absent after the snapshot: gone).
    assert_eq!(state("e", 1), None);
    assert_eq!(obs.asked.len(), 4);
    assert_eq!(
        handles.keys().cloned().collect::<Vec<_>>(),
        [("a".to_string(), 2), ("b".to_string(), 1)]
    );
    assert_eq!(handles[&("a".to_string(), 2)], "dlscale-abc-a-2");
}

#[test]
fn stopped_and_failed_jobs_end_as_a_slurm_job_would() {
    let job = |status: &str, code: Option<i32>| RayJob {
        submission_id: "s".into(),
        job: "a".into(),
        attempt: 1,
        status: status.into(),
        submitted_s: None,
        driver_exit_code: code,
        message: "runtime env setup failed".into(),
    };
    assert_eq!(job("STOPPED", None).outcome(), Outcome::CancelledOutside);
    assert_eq!(job("SUCCEEDED", Some(0)).outcome(), Outcome::Exited(0));
    assert_eq!(job("FAILED", Some(75)).outcome(), Outcome::Exited(75));
    let Outcome::Interrupted(why) = job("FAILED", None).outcome() else {
        panic!("a job that never ran its entrypoint was interrupted");
    };
    assert!(why.contains("runtime env setup failed"), "{why}");
    assert!(!job("RUNNING", None).is_terminal() && job("FAILED", None).is_terminal());
}

/// A node list as Ray 2.60's state API (`GET /api/v0/nodes?detail=1`) gives it (trimmed).
fn node_list() -> String {
    let node = |id: &str, ip: &str, state: &str, resources: Value| {
        json!({"node_id": id, "node_ip": ip, "is_head_node": false, "state": state,
               "node_name": ip, "resources_total": resources, "labels": {}})
    };
    json!({"result": true, "msg": "", "data": {"result": {"total": 4, "result": [
        node("1ec93c083d50aa", "10.0.0.1", "ALIVE", json!({"CPU": 8.0, "fake_gpu": 4.0})),
        node("9b0c1d2e3f4a55", "10.0.0.1", "ALIVE", json!({"CPU": 8.0, "fake_gpu": 2.5, "GPU": 8.0, "accelerator_type:A100": 1.0})),
        node("77aa00000000bb", "10.0.0.2", "DEAD", json!({"fake_gpu": 4.0})),
        node("55cc00000000dd", "10.0.0.3", "ALIVE", json!({"CPU": 8.0})),
    ]}}})
    .to_string()
}

#[test]
fn capacity_is_the_alive_nodes_units_of_the_worker_resource() {
    let nodes = parse_nodes(&node_list(), "fake_gpu").unwrap();
    let seen: Vec<(&str, u32, &str)> = nodes
        .iter()
        .map(|n| (n.name.as_str(), n.total_gpus, n.addr.as_str()))
        .collect();
    // Two nodes on one host keep apart by their ids; 2.5 units hold 2 workers; a dead node and
    // one without the resource offer nothing.
    assert_eq!(
        seen,
        [
            ("10.0.0.1-1ec93c", 4, "10.0.0.1"),
            ("10.0.0.1-9b0c1d", 2, "10.0.0.1")
        ]
    );
    let gpus = parse_nodes(&node_list(), "GPU").unwrap();
    assert_eq!(gpus.len(), 1);
    assert_eq!(gpus[0].gpu_type.as_deref(), Some("a100"));
    assert!(parse_nodes("{\"data\": {}}", "GPU").is_err());
}

#[test]
fn the_entrypoint_runs_the_script_in_the_jobs_directory() {
    let spec = |launcher: Launcher, command: &[&str]| {
        let mut s = JobSpec::from_value(json!({
            "id": "a", "min_batch": 2, "max_batch": 64, "max_local_batch": 64,
            "command": ["x"], "workdir": "/work dir"}))
        .unwrap();
        s.launcher = launcher;
        s.command = command.iter().map(|w| w.to_string()).collect();
        s
    };
    let torchrun = spec(Launcher::Torchrun, &["train.py", "--lr", "0.1 x"]);
    assert_eq!(
        entrypoint(&torchrun, "/venv/bin/python").unwrap(),
        "cd '/work dir' && exec /venv/bin/python train.py --lr '0.1 x'"
    );
    let plain = spec(Launcher::Plain, &["./run.sh"]);
    assert_eq!(
        entrypoint(&plain, "python").unwrap(),
        "cd '/work dir' && exec ./run.sh"
    );
    let err = entrypoint(&spec(Launcher::Srun, &["x"]), "python").unwrap_err();
    assert!(
        err.to_string().contains("launcher srun runs on Slurm only"),
        "{err}"
    );
}

#[test]
fn submission_ids_tell_launches_and_servers_apart() {
    assert_eq!(submission_id("abc", "a", 3), "dlscale-abc-a-3");
    assert_ne!(submission_id("abc", "a", 1), submission_id("xyz", "a", 1));
}

#[test]
fn logs_are_copied_once_each() {
    let dir = tempfile::tempdir().unwrap();
    let (log, run) = (dir.path().join("log"), dir.path().join("run-1"));
    std::fs::write(&log, "header\n").unwrap();
    append_new(&log, &run, "one\n").unwrap();
    append_new(&log, &run, "one\ntwo\n").unwrap();
    append_new(&log, &run, "one\ntwo\n").unwrap();
    // A shorter log (Ray forgot the job) copies nothing again.
    append_new(&log, &run, "x\n").unwrap();
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "header\none\ntwo\n");
}

#[test]
fn ray_errors_read_as_their_last_line() {
    let traceback = "Traceback (most recent call last):\n  File \"x\"\nValueError: Job with submission_id s already exists.\n.\n";
    assert_eq!(
        last_line(traceback),
        "ValueError: Job with submission_id s already exists."
    );
}

#[test]
fn the_token_leaves_the_runtime_env_for_a_file_only_its_owner_reads() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(TOKEN_FILE);
    let mut env: BTreeMap<String, String> = [
        ("DLSCALE_TOKEN".to_string(), "s3cret".to_string()),
        ("DLSCALE_JOB_ID".to_string(), "j".to_string()),
    ]
    .into();
    let token = token_to_file(&mut env, &path);
    assert_eq!(token.as_deref(), Some("s3cret"));
    assert!(!env.values().any(|v| v.contains("s3cret")), "{env:?}");
    assert_eq!(env["DLSCALE_TOKEN_FILE"], path.display().to_string());
    crate::write_private(&path, "s3cret").unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "s3cret");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // No token, no file named.
    let mut bare: BTreeMap<String, String> = BTreeMap::new();
    assert_eq!(token_to_file(&mut bare, &path), None);
    assert!(bare.is_empty());
}
