//! End-to-end runs of the real `dlscale` binary: `optimize` and `demo`, good and bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn dlscale(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dlscale"))
        .args(args)
        .output()
        .expect("dlscale runs")
}

/// Runs `dlscale` expecting success and one JSON document on stdout.
fn dlscale_json(args: &[&str]) -> serde_json::Value {
    let out = dlscale(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn optimize_prints_the_documented_json() {
    let jobs = examples().join("jobs.json");
    let cluster = examples().join("cluster.json");
    let doc = dlscale_json(&[
        "optimize",
        "--jobs",
        jobs.to_str().unwrap(),
        "--cluster",
        cluster.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(doc["policy"], "elastic-batch");
    assert_eq!(doc["utility"], "speedup");
    assert!(doc["objective"].as_f64().unwrap() > 0.0);
    assert!(doc["solve_ms"].as_f64().unwrap() >= 0.0);
    // Seven jobs on 16 GPUs: the full DP, exact.
    assert_eq!(doc["solver"], "exact-dp");
    assert_eq!(doc["gap"], 0.0);
    let jobs = doc["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 7);
    let mut used = 0;
    for job in jobs {
        for field in [
            "id",
            "state",
            "gpus",
            "nodes",
            "batch_size",
            "local_batch_size",
            "throughput_samples_per_s",
            "utility",
        ] {
            assert!(job.get(field).is_some(), "missing {field} in {job}");
        }
        used += job["gpus"].as_u64().unwrap();
    }
    assert!(used <= 16);
    let total: f64 = jobs.iter().map(|j| j["utility"].as_f64().unwrap()).sum();
    assert!((total - doc["objective"].as_f64().unwrap()).abs() < 1e-9);
}

#[test]
fn a_large_cluster_takes_the_banded_dp_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = write(
        &dir,
        "jobs.json",
        &dlscale_core::synthetic::measured_job_file(300, 64, 1),
    );
    for utility in ["speedup", "fair"] {
        let doc = dlscale_json(&[
            "optimize",
            "--jobs",
            &jobs,
            "--nodes",
            "128",
            "--gpus-per-node",
            "8",
            "--utility",
            utility,
            "--format",
            "json",
        ]);
        assert_eq!(doc["solver"], "lagrangian-dp", "{utility}");
        assert_eq!(doc["gap"], 0.0, "{utility}");
        assert_eq!(doc["jobs"].as_array().unwrap().len(), 300);
        assert!(doc["gpus_used"].as_u64().unwrap() <= 1024);
    }
}

#[test]
fn every_policy_and_the_toml_form_work() {
    let jobs = examples().join("jobs.toml");
    for policy in dlscale_core::policy_names() {
        let out = dlscale(&[
            "optimize",
            "--jobs",
            jobs.to_str().unwrap(),
            "--nodes",
            "2",
            "--gpus-per-node",
            "4",
            "--policy",
            policy,
            "--utility",
            "goodput",
            "--admission",
            "queue",
        ]);
        assert!(
            out.status.success(),
            "{policy}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let table = String::from_utf8_lossy(&out.stdout);
        assert!(
            table.contains(&format!("policy {policy}")) && table.contains("resnet50"),
            "{table}"
        );
    }
}

/// A file of one job (its fields at the top level, as `dlscale submit` takes it) is optimized like
/// a list of that one job, in JSON and TOML; the run fields of the service are accepted and
/// ignored; a misspelt field gets the nearest name (issue 13.6f, a, b).
#[test]
fn optimize_takes_a_single_job_file() {
    let dir = tempfile::tempdir().unwrap();
    let job = r#"{"id": "solo", "model": "imagenet", "min_batch": 200, "max_batch": 3200,
        "max_local_batch": 200, "max_gpus": 16, "batch_size": 400, "gpus": 2,
        "command": ["train.py"], "workdir": ".", "launcher": "torchrun"}"#;
    let single = write(&dir, "one.json", job);
    let listed = write(&dir, "list.json", &format!("{{\"jobs\": [{job}]}}"));
    let toml = write(
        &dir,
        "one.toml",
        "id = 'solo'\nmodel = 'imagenet'\nmin_batch = 200\nmax_batch = 3200\nmax_local_batch = 200\n\
         max_gpus = 16\nbatch_size = 400\ngpus = 2\ncommand = ['train.py']\n",
    );
    let run = |path: &str| {
        let mut doc = dlscale_json(&[
            "optimize",
            "--jobs",
            path,
            "--nodes",
            "2",
            "--gpus-per-node",
            "4",
            "--format",
            "json",
        ]);
        doc.as_object_mut().unwrap().remove("solve_ms");
        doc
    };
    let expected = run(&listed);
    assert_eq!(expected["jobs"][0]["id"], "solo");
    assert_eq!(run(&single), expected);
    assert_eq!(run(&toml), expected);

    let misspelt = write(
        &dir,
        "typo.toml",
        "id = 'solo'\nmodel = 'imagenet'\nmin_bach = 200\n",
    );
    let out = dlscale(&[
        "optimize",
        "--jobs",
        &misspelt,
        "--nodes",
        "1",
        "--gpus-per-node",
        "4",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "typo.toml:3: job 'solo': field 'min_bach': unknown field; did you mean 'min_batch'?"
        ),
        "{stderr}"
    );
}

#[test]
fn help_lists_every_policy_of_the_registry() {
    for command in ["optimize", "simulate"] {
        let out = dlscale(&[command, "--help"]);
        let help = String::from_utf8_lossy(&out.stdout);
        for policy in dlscale_core::REGISTRY {
            assert!(
                help.contains(policy.name) && help.contains(policy.about),
                "{command} --help lacks {}: {help}",
                policy.name
            );
        }
    }
    let out = dlscale(&[
        "optimize",
        "--jobs",
        "x",
        "--nodes",
        "1",
        "--gpus-per-node",
        "1",
        "--policy",
        "nope",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tiresias"));
}

#[test]
fn demo_runs_on_built_in_defaults() {
    let out = dlscale(&["demo", "--format", "json"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let docs: Vec<serde_json::Value> = serde_json::Deserializer::from_str(&text)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let policies: Vec<&str> = docs.iter().map(|d| d["policy"].as_str().unwrap()).collect();
    assert_eq!(policies, dlscale_core::policy_names());
    // Folding the batch into the decision never loses to a fixed batch under the same objective.
    let objective = |i: usize| docs[i]["objective"].as_f64().unwrap();
    assert!(objective(0) >= objective(1));
}

#[test]
fn bad_input_exits_2_with_a_message_naming_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = examples().join("cluster.json");
    let cluster = cluster.to_str().unwrap();
    let cases: Vec<(String, &str)> = vec![
        (
            write(&dir, "syntax.json", "{\"jobs\": [\n  {\"id\": \"a\",\n"),
            "syntax.json:3",
        ),
        (
            write(
                &dir,
                "minmax.json",
                r#"{"jobs": [{"id": "a", "model": "imagenet", "min_batch": 400, "max_batch": 200}]}"#,
            ),
            "job 'a': field 'min_batch'",
        ),
        (
            write(
                &dir,
                "negative.json",
                r#"{"jobs": [{"id": "a", "model": "imagenet", "min_batch": 200, "max_batch": 400, "weight": -1}]}"#,
            ),
            "job 'a': field 'weight'",
        ),
        (
            write(
                &dir,
                "alone.json",
                r#"{"jobs": [{"id": "a", "model": "imagenet", "min_batch": 3200, "max_batch": 6400, "max_gpus": 4}]}"#,
            ),
            "cannot run even alone",
        ),
        (
            write(
                &dir,
                "unknown.json",
                r#"{"jobs": [{"id": "a", "model": "alexnet", "min_batch": 1, "max_batch": 2}]}"#,
            ),
            "unknown model 'alexnet'",
        ),
        (
            write(
                &dir,
                "dup.json",
                r#"{"jobs": [{"id": "a", "model": "ncf", "min_batch": 256, "max_batch": 512}, {"id": "a", "model": "ncf", "min_batch": 256, "max_batch": 512}]}"#,
            ),
            "duplicate id",
        ),
        (
            write(&dir, "bad.toml", "[[jobs]]\nid = 'a'\nmin_batch = 'x'\n"),
            "bad.toml:3",
        ),
        (
            write(&dir, "empty.json", r#"{"jobs": []}"#),
            "field 'jobs': no jobs",
        ),
        (
            dir.path().join("missing.json").display().to_string(),
            "cannot read",
        ),
        // What jobs run on now must fit the machines (it was taken, and decided as idle).
        (
            write(
                &dir,
                "current.json",
                r#"{"jobs": [{"id": "a", "model": "imagenet", "min_batch": 200, "max_batch": 3200, "current": {"gpus": 32, "batch": 3200}}]}"#,
            ),
            "job 'a': field 'current.gpus': 32 is more than the cluster's 16 GPUs",
        ),
        (
            write(
                &dir,
                "currents.json",
                r#"{"jobs": [{"id": "a", "model": "ncf", "min_batch": 256, "max_batch": 512, "current": {"gpus": 10, "batch": 256}},
                            {"id": "b", "model": "ncf", "min_batch": 256, "max_batch": 512, "current": {"gpus": 10, "batch": 256}}]}"#,
            ),
            "job 'b': field 'current.gpus': the jobs' current allocations add up to 20 GPUs",
        ),
        // A model whose steps or throughput overflow (it was decided at inf).
        (
            write(
                &dir,
                "overflow.json",
                r#"{"jobs": [{"id": "a", "model": {"compute_per_sample_s": 1e-308}, "min_batch": 200, "max_batch": 3200, "max_local_batch": 200}]}"#,
            ),
            "field 'model.compute_per_sample_s'",
        ),
    ];
    for (path, expected) in cases {
        let out = dlscale(&["optimize", "--jobs", &path, "--cluster", cluster]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{path}: {stderr}");
        assert!(
            stderr.contains(expected),
            "{path}: expected '{expected}' in: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let jobs = examples().join("jobs.json");
    let bad_cluster = write(&dir, "cluster.json", r#"{"nodes": 0, "gpus_per_node": 4}"#);
    let out = dlscale(&[
        "optimize",
        "--jobs",
        jobs.to_str().unwrap(),
        "--cluster",
        &bad_cluster,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cluster.json: cluster: field 'nodes'"));
    // The example jobs on the cluster with one flag more.
    let with_flag = |flag: &str| {
        dlscale(&[
            "optimize",
            "--jobs",
            jobs.to_str().unwrap(),
            "--cluster",
            cluster,
            flag,
        ])
    };
    assert_eq!(with_flag("--utility=fair:2").status.code(), Some(2));
    // A weighing lever out of range names its flag; in range, it decides.
    let weighed = |exponent: &str| with_flag(&format!("--service-exponent={exponent}"));
    let out = weighed("-1");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(2) && stderr.contains("--service-exponent"),
        "{stderr}"
    );
    assert!(weighed("1").status.success());
    // Levers whose values would overflow the knapsack's sums are refused, named.
    for (flag, expected) in [
        (
            "--utility=fair:-200",
            "fair:P needs an exponent P in [-10, 0)",
        ),
        ("--min-gain=1e303", "--min-gain must be a number in [0, 10]"),
    ] {
        let out = with_flag(flag);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.code() == Some(2) && stderr.contains(expected),
            "{flag}: {stderr}"
        );
    }
    // On a fleet, the type a job runs on now must be one of its types.
    let fleet = examples().join("fleet.toml");
    let on_h100 = write(
        &dir,
        "h100.json",
        r#"{"jobs": [{"id": "a", "model": "imagenet", "min_batch": 200, "max_batch": 3200, "current": {"gpus": 16, "batch": 3200}, "current_type": "h100"}]}"#,
    );
    let out = dlscale(&[
        "optimize",
        "--jobs",
        &on_h100,
        "--fleet",
        fleet.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(2)
            && stderr.contains("job 'a': field 'current_type': \"h100\" is not one of the fleet's types (t4, v100, a100)"),
        "{stderr}"
    );
}

#[test]
fn consolidate_decides_as_the_autoscaler_does() {
    // On 2 × 4 GPUs, a and c take 3 GPUs each, one node each; b's 2 GPUs would be one on each
    // node. With --consolidate, b is capped at what fits on one node, as `serve` and `simulate`
    // decide; `nodes` says where the placement put each job.
    let dir = tempfile::tempdir().unwrap();
    let jobs = write(
        &dir,
        "jobs.json",
        r#"{"jobs": [
          {"id": "a", "model": {"compute_per_sample_s": 0.001}, "min_batch": 64, "max_batch": 2048,
           "max_local_batch": 64, "max_gpus": 3},
          {"id": "c", "model": {"compute_per_sample_s": 0.001}, "min_batch": 64, "max_batch": 2048,
           "max_local_batch": 64, "max_gpus": 3},
          {"id": "b", "model": {"compute_per_sample_s": 0.001}, "min_batch": 64, "max_batch": 2048,
           "max_local_batch": 64, "max_gpus": 2}]}"#,
    );
    let decide = |consolidate: &str| {
        let doc = dlscale_json(&[
            "optimize",
            "--jobs",
            &jobs,
            "--nodes",
            "2",
            "--gpus-per-node",
            "4",
            "--consolidate",
            consolidate,
            "--format",
            "json",
        ]);
        doc["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| {
                (
                    j["id"].as_str().unwrap().to_string(),
                    j["gpus"].as_u64().unwrap(),
                    j["nodes"].as_u64().unwrap(),
                )
            })
            .collect::<Vec<_>>()
    };
    let job = |id: &str, gpus: u64, nodes: u64| (id.to_string(), gpus, nodes);
    assert_eq!(
        decide("false"),
        [job("a", 3, 1), job("c", 3, 1), job("b", 2, 2)]
    );
    assert_eq!(
        decide("true"),
        [job("a", 3, 1), job("c", 3, 1), job("b", 1, 1)]
    );
}

/// `--fleet`: the example mix on the example fleet of three GPU types. Every running job runs on
/// one of the fleet's types, within each type's GPUs, bundled models on the types their tables
/// cover, the analytic one anywhere; policies that do not decide across types, and bad fleets,
/// are refused naming what is wrong.
#[test]
fn optimize_decides_across_the_gpu_types_of_a_fleet() {
    let fleet = examples().join("fleet.toml");
    let jobs = examples().join("jobs.json");
    let (fleet, jobs) = (fleet.to_str().unwrap(), jobs.to_str().unwrap());
    let capacity: std::collections::BTreeMap<&str, u64> =
        [("t4", 24), ("v100", 24), ("a100", 16)].into();
    for utility in ["speedup", "fair"] {
        let doc = dlscale_json(&[
            "optimize",
            "--fleet",
            fleet,
            "--jobs",
            jobs,
            "--utility",
            utility,
            "--format",
            "json",
        ]);
        assert_eq!(doc["solver"], "typed-dp", "{utility}: {doc}");
        assert_eq!(doc["gap"], 0.0);
        assert!(doc.get("cluster").is_none() && doc["fleet"]["types"][2]["name"] == "a100");
        let mut used: std::collections::BTreeMap<&str, u64> = Default::default();
        for job in doc["jobs"].as_array().unwrap() {
            if job["state"] == "running" {
                let gpu_type = job["gpu_type"].as_str().expect("a running job's type");
                *used.entry(gpu_type).or_default() += job["gpus"].as_u64().unwrap();
            } else {
                assert!(job.get("gpu_type").is_none(), "{job}");
            }
        }
        assert!(
            used.iter()
                .all(|(t, &u)| capacity.get(t).is_some_and(|&c| u <= c)),
            "{utility}: {used:?}"
        );
        assert_eq!(doc["gpus_used"].as_u64(), Some(used.values().sum::<u64>()));
    }
    // The fleet philly.csv runs on (BENCHMARKS.md): the same mix, 2,048 GPUs.
    let large = examples().join("fleet-philly.toml");
    let doc = dlscale_json(&[
        "optimize",
        "--fleet",
        large.to_str().unwrap(),
        "--jobs",
        jobs,
        "--format",
        "json",
    ]);
    let types = doc["fleet"]["types"].as_array().unwrap();
    let gpus: u64 = types
        .iter()
        .map(|t| t["nodes"].as_u64().unwrap() * t["gpus_per_node"].as_u64().unwrap())
        .sum();
    let names: Vec<&str> = types.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!((gpus, names), (2048, vec!["t4", "v100", "a100"]), "{doc}");
    let table = dlscale(&["optimize", "--fleet", fleet, "--jobs", jobs]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.status.success() && text.lines().nth(1).unwrap().contains("type"),
        "{text}"
    );
    let dir = tempfile::tempdir().unwrap();
    let twice = write(
        &dir,
        "twice.toml",
        "[[types]]\nname = \"t4\"\nnodes = 1\ngpus_per_node = 4\nmemory_gib = 16\n\
         [[types]]\nname = \"t4\"\nnodes = 1\ngpus_per_node = 8\nmemory_gib = 16\n",
    );
    for (args, expected) in [
        (
            vec!["--fleet", fleet, "--policy", "static"],
            "does not decide across GPU types",
        ),
        (vec!["--fleet", &twice], "given twice"),
        (
            vec!["--fleet", fleet, "--nodes", "2"],
            "cannot be used with",
        ),
    ] {
        let out = dlscale(&[&["optimize", "--jobs", jobs][..], &args[..]].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

/// `--teams`: each team's quota holds in the decision, and the JSON says what each team holds.
/// Without teams, team b's two BERT jobs take 13 of the 16 GPUs; capped at 6 they take 6, and
/// team a's job gets at least its guarantee of 8. A job of a team the file does not configure,
/// and a policy that keeps no quotas, are refused.
#[test]
fn optimize_keeps_the_teams_quotas() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = write(
        &dir,
        "jobs.json",
        r#"{"jobs": [
            {"id": "a1", "model": "cifar10", "team": "a", "min_batch": 128, "max_batch": 1024, "max_gpus": 16},
            {"id": "b1", "model": "bert", "team": "b", "min_batch": 12, "max_batch": 384, "max_gpus": 16},
            {"id": "b2", "model": "bert", "team": "b", "min_batch": 12, "max_batch": 384, "max_gpus": 16}
        ]}"#,
    );
    let teams = write(
        &dir,
        "teams.json",
        r#"{"a": {"guaranteed_gpus": 8}, "b": {"guaranteed_gpus": 2, "max_gpus": 6}}"#,
    );
    let cluster = ["--nodes", "2", "--gpus-per-node", "8", "--format", "json"];
    let held = |doc: &serde_json::Value, prefix: &str| -> u64 {
        doc["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|j| j["id"].as_str().unwrap().starts_with(prefix))
            .map(|j| j["gpus"].as_u64().unwrap())
            .sum()
    };
    let mut args = vec!["optimize", "--jobs", &jobs];
    args.extend(cluster);
    let free = dlscale_json(&args);
    assert!(held(&free, "b") > 6 && held(&free, "a") < 8, "{free}");
    assert!(free.get("teams").is_none());
    args.extend(["--teams", &teams]);
    let kept = dlscale_json(&args);
    assert!(held(&kept, "b") <= 6 && held(&kept, "a") >= 8, "{kept}");
    let team = |name: &str| {
        kept["teams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["team"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(team("b")["max_gpus"], 6);
    assert_eq!(team("b")["gpus"].as_u64(), Some(held(&kept, "b")));
    assert_eq!(team("a")["max_gpus"], serde_json::Value::Null);
    let refused = |extra: &[&str], file: &str| {
        let mut args = vec!["optimize", "--jobs", file, "--teams", &teams];
        args.extend(cluster);
        args.extend(extra);
        let out = dlscale(&args);
        assert_eq!(out.status.code(), Some(2));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let stranger = write(
        &dir,
        "stranger.json",
        r#"{"id": "c1", "model": "cifar10", "team": "c", "min_batch": 128, "max_batch": 1024}"#,
    );
    let e = refused(&[], &stranger);
    assert!(e.contains("job 'c1' names team 'c', which "), "{e}");
    let e = refused(&["--policy", "tiresias"], &jobs);
    assert!(
        e.contains("--teams: quotas are kept by the policies"),
        "{e}"
    );
}
