use super::*;
use std::path::Path;
use std::time::Duration;

fn ctx(dir: &Path) -> ExecContext {
    ExecContext {
        data_dir: dir.to_path_buf(),
        torchrun: PathBuf::from("/venv/bin/torchrun"),
        api_url: Some("http://127.0.0.1:1".into()),
        clock: std::sync::Arc::new(crate::clock::SystemClock),
        instance: "test".into(),
    }
}

fn spec(command: &[&str], launcher: &str) -> JobSpec {
    JobSpec::from_value(serde_json::json!({
        "id": "j", "min_batch": 2, "max_batch": 64, "max_local_batch": 64,
        "command": command, "workdir": "/tmp", "launcher": launcher,
        "env": {"OMP_NUM_THREADS": "2"}}))
    .unwrap()
}

fn shape(gpus: u32, batch: u32) -> Shape {
    Shape {
        gpus,
        batch_size: batch,
        local_batch_size: batch / gpus,
        micro_steps: 1,
        shares: vec![Share {
            node: NODE.into(),
            gpus,
        }],
    }
}

fn executor(dir: &Path, slots: Vec<Slot>) -> LocalExecutor {
    let (reports, _) = tokio::sync::mpsc::unbounded_channel();
    LocalExecutor::new(ctx(dir), slots, false, reports)
}

fn on(node: &str, gpus: u32) -> Vec<Share> {
    vec![Share {
        node: node.into(),
        gpus,
    }]
}

/// The slots `reserve_slots` gives launch `id`, or its error.
fn reserve(e: &LocalExecutor, id: &str, shares: &[Share]) -> Result<Vec<u32>, String> {
    e.reserve_slots(&(id.to_string(), 1), shares)
        .map_err(|err| err.to_string())
}

#[test]
fn launches_dispatched_at_once_get_slots_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let e = executor(dir.path(), Slot::untyped(4));
    assert_eq!(reserve(&e, "a", &on(NODE, 2)), Ok(vec![0, 1]));
    assert_eq!(reserve(&e, "b", &on(NODE, 1)), Ok(vec![2]));
    assert_eq!(
        reserve(&e, "c", &on(NODE, 2)),
        Err("2 slot(s) asked for on local, 1 free".into()),
        "one slot is left"
    );
    assert_eq!(reserve(&e, "c", &on(NODE, 1)), Ok(vec![3]));
    let held: Vec<Vec<u32>> = e.handles().values().map(|h| h.slots.clone()).collect();
    assert_eq!(held, [vec![0, 1], vec![2], vec![3]]);
    // Slots held by another launch (one being ended) are the cluster's doing, not the job's.
    let busy = e
        .reserve_slots(&("d".to_string(), 1), &on(NODE, 1))
        .unwrap_err();
    assert!(super::ClusterError::in_chain(&busy), "{busy:#}");
}

fn typed(types: &[&str]) -> Vec<Slot> {
    let types: Vec<String> = types.iter().map(|t| t.to_string()).collect();
    with_types(Slot::untyped(types.len() as u32), Some(&types), "slots is").unwrap()
}

/// Slots of two types, interleaved: a launch on one type's node gets that type's free slots
/// only, whatever the other type has free.
#[test]
fn a_launch_takes_slots_of_its_nodes_type_only() {
    let dir = tempfile::tempdir().unwrap();
    let e = executor(dir.path(), typed(&["a100", "t4", "a100", "t4"]));
    assert_eq!(reserve(&e, "a", &on("local-t4", 2)), Ok(vec![1, 3]));
    assert_eq!(reserve(&e, "b", &on("local-a100", 1)), Ok(vec![0]));
    assert_eq!(
        reserve(&e, "c", &on("local-t4", 1)),
        Err("1 slot(s) asked for on local-t4, 0 free".into()),
        "an A100 is free, but no T4"
    );
    assert_eq!(
        reserve(&e, "c", &on(NODE, 1)),
        Err("node local is not one of this machine's (local-a100, local-t4)".into())
    );
    assert_eq!(reserve(&e, "c", &on("local-a100", 1)), Ok(vec![2]));
    // Nothing was taken by the launches refused.
    let held: Vec<Vec<u32>> = e.handles().values().map(|h| h.slots.clone()).collect();
    assert_eq!(held, [vec![1, 3], vec![0], vec![2]]);
    // A launch across types (a policy that does not keep types) gets each share's own.
    let e = executor(dir.path(), typed(&["a100", "t4", "a100", "t4"]));
    let across = [on("local-a100", 1), on("local-t4", 2)].concat();
    assert_eq!(reserve(&e, "x", &across), Ok(vec![0, 1, 3]));
}

#[tokio::test]
async fn capacity_is_one_node_per_type_and_one_untyped_node_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let nodes = |slots: Vec<Slot>| async move {
        let c = executor(dir, slots).capacity().await.unwrap();
        let topology: Vec<(String, u32, Option<String>)> = c
            .topology
            .nodes
            .iter()
            .map(|n| {
                (
                    n.name.to_string(),
                    n.gpus,
                    n.gpu_type.as_deref().map(Into::into),
                )
            })
            .collect();
        let infos: Vec<(String, u32, Option<String>)> = c
            .nodes
            .iter()
            .map(|n| (n.name.clone(), n.total_gpus, n.gpu_type.clone()))
            .collect();
        assert_eq!(topology, infos);
        infos
    };
    let node = |name: &str, gpus: u32, t: Option<&str>| (name.to_string(), gpus, t.map(Into::into));
    assert_eq!(
        nodes(typed(&["t4", "a100", "a100", "t4", "a100"])).await,
        [
            node("local-t4", 2, Some("t4")),
            node("local-a100", 3, Some("a100"))
        ]
    );
    assert_eq!(nodes(Slot::untyped(4)).await, [node(NODE, 4, None)]);
    // One type: the one node it always was, typed.
    assert_eq!(
        nodes(typed(&["h100", "h100"])).await,
        [node(NODE, 2, Some("h100"))]
    );
    // Detected GPUs whose names say no type, beside typed ones: a node of no type.
    let mut detected = typed(&["a100", "a100", "a100"]);
    detected[1].gpu_type = None;
    assert_eq!(
        nodes(detected).await,
        [node("local-a100", 2, Some("a100")), node(NODE, 1, None)]
    );
}

#[test]
fn slot_types_must_be_one_per_slot() {
    let types = vec!["a100".to_string()];
    let err = with_types(Slot::untyped(2), Some(&types), "nvidia-smi found").unwrap_err();
    assert_eq!(
        err.to_string(),
        "slot_types names 1 GPU type(s) but nvidia-smi found 2: one type per slot"
    );
    assert_eq!(
        with_types(Slot::untyped(2), None, "slots is").unwrap(),
        Slot::untyped(2)
    );
}

#[test]
fn gpu_types_from_the_names_nvidia_smi_gives() {
    for (name, expected) in [
        ("NVIDIA A100-SXM4-80GB", Some("a100")),
        ("NVIDIA A100 80GB PCIe", Some("a100")),
        ("Tesla T4", Some("t4")),
        ("Tesla V100-SXM2-16GB", Some("v100")),
        ("Tesla P100-PCIE-16GB", Some("p100")),
        ("Tesla K80", Some("k80")),
        ("NVIDIA H100 80GB HBM3", Some("h100")),
        ("NVIDIA H100 NVL", Some("h100")),
        ("NVIDIA H200", Some("h200")),
        ("NVIDIA L4", Some("l4")),
        ("NVIDIA L40S", Some("l40s")),
        ("NVIDIA A10G", Some("a10g")),
        ("NVIDIA GeForce RTX 4090", Some("rtx4090")),
        ("NVIDIA GeForce RTX 3090 Ti", Some("rtx3090ti")),
        ("NVIDIA GeForce GTX 1080", Some("gtx1080")),
        ("Quadro RTX 8000", Some("rtx8000")),
        ("NVIDIA RTX A6000", Some("rtxa6000")),
        // No model of letters then digits: of no named type.
        ("NVIDIA TITAN RTX", None),
        ("Graphics Device", None),
        ("NVIDIA GeForce RTX", None),
        ("NVIDIA", None),
        ("", None),
    ] {
        assert_eq!(gpu_type_of_name(name).as_deref(), expected, "{name:?}");
    }
}

#[test]
fn detected_gpus_are_typed_by_their_names() {
    let csv = "0, NVIDIA A100-SXM4-80GB\n1, NVIDIA A100-SXM4-80GB\n2, Tesla T4\n\
               3, Graphics Device\nNo devices were found\n";
    let gpus = parse_gpus(csv);
    let types: Vec<(u32, Option<&str>)> =
        gpus.iter().map(|s| (s.id, s.gpu_type.as_deref())).collect();
    assert_eq!(
        types,
        [
            (0, Some("a100")),
            (1, Some("a100")),
            (2, Some("t4")),
            (3, None)
        ]
    );
    // An index without a name (as the query for indices only gave): untyped.
    assert_eq!(parse_gpus("0\n1\n"), Slot::untyped(2));
}

/// A launch started under the marker form of a version before this one is still its own.
#[test]
fn a_launch_is_found_under_either_marker_form() {
    let environ = b"PATH=/bin\0DLSCALE_LAUNCH=dlscale:test:j:3\0";
    assert!(carries_marker(environ, &launch_marker("test", "j", 3)));
    assert!(!carries_marker(environ, &launch_marker("test", "j", 4)));
    assert!(!carries_marker(environ, &launch_marker("other", "j", 3)));
    let environ = b"DLSCALE_LAUNCH=j:3:dlscale:test\0";
    assert!(carries_marker(environ, &launch_marker("test", "j", 3)));
}

#[test]
fn plans_torchrun_and_env() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan(
        &spec(&["train.py", "--x"], "torchrun"),
        3,
        &shape(2, 64),
        &[2, 3],
        "job-token",
        &ctx(dir.path()),
    );
    assert_eq!(
        p.argv,
        [
            "/venv/bin/torchrun",
            "--standalone",
            "--nnodes=1",
            "--nproc-per-node=2",
            "--max-restarts=0",
            "train.py",
            "--x"
        ]
    );
    assert_eq!(p.env["CUDA_VISIBLE_DEVICES"], "2,3");
    assert_eq!(p.env["DLSCALE_WORLD_SIZE"], "2");
    assert_eq!(p.env["DLSCALE_LOCAL_BATCH_SIZE"], "32");
    assert_eq!(p.env["DLSCALE_ACCUM_STEPS"], "1");
    assert_eq!(p.env["OMP_NUM_THREADS"], "2");
    assert_eq!(p.env["DLSCALE_TOKEN"], "job-token");
    assert_eq!(p.env["DLSCALE_LAUNCH"], "j:3:dlscale:test");
    // The slots are nvidia-smi's (PCI bus) indices: CUDA numbers devices the same way.
    assert_eq!(p.env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
    assert_eq!(p.env["DLSCALE_NODE_LIST"], NODE);
    assert!(p.run_dir.ends_with("jobs/j/run-3"));
}

#[test]
fn a_program_that_cannot_be_executed_is_not_started_and_the_error_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let mut ctx = ctx(dir.path());
    ctx.torchrun = dir.path().join("gone/torchrun");
    let p = plan(
        &spec(&["train.py"], "torchrun"),
        1,
        &shape(1, 2),
        &[0],
        "t",
        &ctx,
    );
    let err = spawn(&p, "header").unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "the program {} could not be executed: No such file or directory",
            ctx.torchrun.display()
        )
    );
    assert!(!p.log.exists(), "nothing started, nothing logged");
    // A bare name is looked up in the launch's PATH (its env may set one).
    let mut p = plan(&spec(&["sh"], "plain"), 1, &shape(1, 2), &[0], "t", &ctx);
    p.env
        .insert("PATH".into(), dir.path().display().to_string());
    let err = spawn(&p, "header").unwrap_err().to_string();
    assert_eq!(
        err,
        "the program sh could not be executed: not found in any directory of PATH"
    );
}

#[tokio::test]
async fn wrapper_records_exit_codes_survives_sigterm_and_is_found_by_its_marker() {
    let dir = tempfile::tempdir().unwrap();
    // A command that traps SIGTERM, prints, and exits 75 (like a checkpointing worker).
    let script = "trap 'echo stopping; exit 75' TERM; echo \"ws=$DLSCALE_WORLD_SIZE\"; while :; do sleep 0.05; done";
    let p = plan(
        &spec(&["sh", "-c", script], "plain"),
        1,
        &shape(1, 2),
        &[0],
        "t",
        &ctx(dir.path()),
    );
    let mut child = spawn(&p, "header").unwrap();
    let pid = child.id().unwrap() as i32;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let found = scan("test");
    let procs = &found[&("j".to_string(), 1)];
    assert!(
        procs
            .iter()
            .any(|p| p.pid == pid && p.leads_group && p.wrapper),
        "{procs:?}"
    );
    assert!(procs.iter().all(|p| p.slots == [0]));
    assert!(scan("other").is_empty());
    signal_group(pid, libc::SIGTERM).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status_code(status), 75);
    assert_eq!(read_exit(&p.run_dir), Some(75));
    assert!(launch_processes("dlscale:test:j:1").is_empty());
    let log = std::fs::read_to_string(&p.log).unwrap();
    assert!(log.starts_with("header\nws=1\n"), "{log}");
    assert!(log.contains("stopping"), "{log}");
}

/// A launch this process still waits for (its wrapper ended, its leftovers are being reaped) is
/// not answered for: its waiter reports the end with the exit code, and an answer meanwhile
/// would read as "vanished". A launch nobody waits for is answered from its `exit` file.
#[tokio::test]
async fn a_launch_its_waiter_still_reaps_is_left_to_the_waiter() {
    let dir = tempfile::tempdir().unwrap();
    let e = executor(dir.path(), Slot::untyped(2));
    let believed = |id: &str| Believed {
        id: id.into(),
        attempt: 1,
        files: JobFiles::new(dir.path(), id, "u"),
    };
    let exited = believed("exited");
    std::fs::create_dir_all(exited.files.run(1)).unwrap();
    std::fs::write(exited.files.run(1).join("exit"), "0\n").unwrap();
    lock(&e.waited).insert(("reaping".to_string(), 1));
    let obs = e
        .observe(&[believed("reaping"), exited, believed("gone")])
        .await
        .unwrap();
    let key = |id: &str| (id.to_string(), 1);
    assert_eq!(obs.asked, vec![key("exited"), key("gone")]);
    let states: Vec<_> = obs
        .launches
        .iter()
        .map(|l| (l.id.as_str(), l.state.clone()))
        .collect();
    assert_eq!(
        states,
        vec![
            (
                "exited",
                LaunchState::Ended {
                    outcome: Outcome::Exited(0)
                }
            ),
            (
                "gone",
                LaunchState::Ended {
                    outcome: Outcome::Vanished
                }
            ),
        ]
    );
}

/// The start's log line of the nodes says how many slots and their ranges, never every id: the
/// largest machine (1,048,576 slots) logs one short line, as does one of interleaved types.
#[test]
fn the_nodes_are_logged_as_counts_and_ranges() {
    let line = |slots: &[Slot]| nodes_summary(&nodes_of(slots));
    assert_eq!(line(&Slot::untyped(1)), "local (1 slot: 0)");
    assert_eq!(line(&Slot::untyped(4)), "local (4 slots: 0-3)");
    assert_eq!(
        line(&typed(&["a100", "t4", "a100", "a100", "t4"])),
        "local-a100 (a100: 3 slots: 0, 2-3), local-t4 (t4: 2 slots: 1, 4)"
    );
    let gaps: Vec<Slot> = [0, 1, 3, 5, 6, 7, 9, 11, 12]
        .map(|id| Slot { id, gpu_type: None })
        .to_vec();
    assert_eq!(
        line(&gaps),
        "local (9 slots: 0-1, 3, 5-7, 9, … and 1 more run(s), up to 12)"
    );
    let most = dlscale_core::cluster::MAX_TOTAL_GPUS;
    assert_eq!(
        line(&Slot::untyped(most)),
        format!("local ({most} slots: 0-{})", most - 1)
    );
    let alternating: Vec<String> = (0..most)
        .map(|k| if k % 2 == 0 { "a100" } else { "t4" }.to_string())
        .collect();
    let slots = with_types(Slot::untyped(most), Some(&alternating), "slots is").unwrap();
    let logged = line(&slots);
    assert!(logged.len() < 200, "{} bytes: {logged:.300}", logged.len());
    assert!(
        logged.starts_with(
            "local-a100 (a100: 524288 slots: 0, 2, 4, 6, … and 524284 more run(s), up to 1048574)"
        ),
        "{logged:.300}"
    );
}

/// The executor logs its nodes once at the start, in that one short line, with the most slots
/// a configuration may give.
#[test]
fn the_start_logs_one_short_line_of_the_most_slots() {
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            lock(&self.0).extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let dir = tempfile::tempdir().unwrap();
    let most = dlscale_core::cluster::MAX_TOTAL_GPUS;
    let config = LocalConfig {
        slots: Some(most),
        ..LocalConfig::default()
    };
    let (reports, _) = tokio::sync::mpsc::unbounded_channel();
    let e = tracing::subscriber::with_default(subscriber, || {
        LocalExecutor::from_config(&config, ctx(dir.path()), reports)
    })
    .unwrap();
    assert_eq!(e.slots.len(), most as usize);
    let log = String::from_utf8(lock(&captured.0).clone()).unwrap();
    let line = log
        .lines()
        .find(|l| l.contains("local executor:"))
        .unwrap_or_else(|| panic!("no line of the nodes in {log:.500}"));
    assert!(line.len() < 200, "{} bytes: {line:.300}", line.len());
    assert!(
        line.ends_with(&format!(
            "local executor: local ({most} slots: 0-{})",
            most - 1
        )),
        "{line}"
    );
}

/// A kept process-group id is signalled only while the group holds one of the launch's
/// processes: once they have ended the id may be another's.
#[test]
fn a_group_is_the_launchs_only_while_it_holds_one_of_its_processes() {
    use std::os::unix::process::CommandExt;
    let start = |marker: Option<&str>| {
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("30").process_group(0);
        if let Some(m) = marker {
            cmd.env("DLSCALE_LAUNCH", m);
        }
        cmd.spawn().unwrap()
    };
    let marker = "j:7:dlscale:group-test";
    let (mut ours, mut other) = (start(Some(marker)), start(None));
    // Its environment is read from /proc: wait until the child has exec'd.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !group_holds_launch(ours.id() as i32, marker) {
        assert!(
            std::time::Instant::now() < deadline,
            "the launch's process is never found"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!group_holds_launch(other.id() as i32, marker));
    assert!(!group_holds_launch(
        ours.id() as i32,
        "j:8:dlscale:group-test"
    ));
    ours.kill().unwrap();
    ours.wait().unwrap();
    assert!(!group_holds_launch(ours.id() as i32, marker));
    other.kill().unwrap();
    other.wait().unwrap();
}

/// A torchrun that cannot be found makes torchrun jobs refused at submission (they had failed
/// every launch with exit 127, then the job); plain jobs, and torchrun once it exists, are not.
#[test]
fn torchrun_jobs_are_refused_while_torchrun_cannot_be_found() {
    use crate::spec::Launcher;
    let dir = tempfile::tempdir().unwrap();
    let (reports, _) = tokio::sync::mpsc::unbounded_channel();
    let mut ctx = ctx(dir.path());
    ctx.torchrun = dir.path().join("torchrun");
    let local = LocalExecutor::new(ctx, Slot::untyped(1), false, reports);
    let why = local.cannot_launch(Launcher::Torchrun).expect("refused");
    assert!(
        why.starts_with("this server cannot start torchrun jobs: the program")
            && why.contains("torchrun = PATH"),
        "{why}"
    );
    assert_eq!(local.cannot_launch(Launcher::Plain), None);
    let torchrun = dir.path().join("torchrun");
    std::fs::write(&torchrun, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        &torchrun,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    assert_eq!(local.cannot_launch(Launcher::Torchrun), None);
}
