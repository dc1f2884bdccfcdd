//! Bad input, fuzzed: the server's parsers on random bytes and on valid input with one field made
//! wrong — the configuration file, job submissions (as parsed, and through the API router with a
//! real service behind it), metrics and completion reports, profile uploads, and the `squeue
//! --json` / `sinfo --json` the Slurm executor reads. Never a panic nor a 5xx; a rejection names
//! the file, line or field; a rejected request changes nothing (no job, no profile, no progress).

mod router;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::http::StatusCode;
use dlscale_core::jobfile::{JOB_FIELDS, RUN_FIELDS};
use dlscale_server::api;
use dlscale_server::executor::squeue::{
    expand_hostlist, gres_gpus, interpret, parse_sinfo, parse_squeue,
};
use dlscale_server::spec::JobSpec;
use dlscale_server::{ConfigFile, ServerConfig};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use router::call;
use serde_json::{json, Map, Value};

/// Values of every JSON type, the edges of the number types among them.
fn wrong_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        prop::sample::select(vec![
            0i64,
            -1,
            1,
            i64::MIN,
            i64::MAX,
            1 << 32,
            1 << 53,
            (1 << 53) + 1
        ])
        .prop_map(Value::from),
        Just(Value::from(u64::MAX)),
        any::<i64>().prop_map(Value::from),
        prop::sample::select(vec![-0.5f64, 0.5, 1e308, -1e308, 2.0]).prop_map(Value::from),
        "\\PC{0,10}".prop_map(Value::from),
        prop::sample::select(vec![
            "", "torchrun", "plain", "srun", "/tmp", "rel", "p", "../x", "a\u{0}b"
        ])
        .prop_map(Value::from),
        Just(json!([])),
        Just(json!([""])),
        Just(json!(["true", 1])),
        Just(json!({})),
        Just(json!({"PATH": "/nowhere"})),
        Just(json!({"DLSCALE_TOKEN": "x"})),
        Just(json!({"A=B": "x"})),
        Just(json!({"grad_sqr": -1.0, "grad_var": 1.0})),
    ]
}

/// A field set to a value, removed, or misspelt (`None`: removed).
#[derive(Debug, Clone)]
enum Mutation {
    Set(String, Value),
    Remove(String),
    Misspell(String, String),
}

impl Mutation {
    /// The field the mutation is about, as a message names it.
    fn field(&self) -> &str {
        match self {
            Mutation::Set(f, _) | Mutation::Remove(f) => f,
            Mutation::Misspell(_, wrong) => wrong,
        }
    }

    fn apply(&self, object: &mut Map<String, Value>) {
        match self {
            Mutation::Set(path, v) => match path.split_once('.') {
                Some((outer, inner)) => {
                    if let Some(Value::Object(m)) = object.get_mut(outer) {
                        m.insert(inner.to_string(), v.clone());
                    }
                }
                None => {
                    object.insert(path.clone(), v.clone());
                }
            },
            Mutation::Remove(f) => {
                object.remove(f);
            }
            Mutation::Misspell(f, wrong) => {
                let v = object.remove(f).unwrap_or(json!(1));
                object.insert(wrong.clone(), v);
            }
        }
    }
}

/// `field` with one letter doubled, dropped or replaced.
fn misspell(field: &str, (kind, at, c): (u8, usize, char)) -> String {
    let mut chars: Vec<char> = field.chars().collect();
    let at = at % chars.len();
    match kind % 3 {
        0 => chars.insert(at, chars[at]),
        1 if chars.len() > 3 => {
            chars.remove(at);
        }
        _ => chars[at] = c,
    }
    chars.into_iter().collect()
}

/// Mutations of objects with the fields `fields` (`outer.inner` for nested ones); `top` are the
/// known top-level fields (a misspelling must not hit one).
fn mutation(fields: Vec<String>, top: Vec<String>) -> impl Strategy<Value = Mutation> {
    let top_for_filter = top.clone();
    prop_oneof![
        4 => (prop::sample::select(fields.clone()), wrong_value())
            .prop_map(|(f, v)| Mutation::Set(f, v)),
        1 => prop::sample::select(top.clone()).prop_map(Mutation::Remove),
        2 => (prop::sample::select(top), (any::<u8>(), any::<usize>(), prop::char::range('a', 'z')))
            .prop_map(|(f, e)| { let wrong = misspell(&f, e); Mutation::Misspell(f, wrong) })
            .prop_filter("a known field", move |m| match m {
                Mutation::Misspell(_, wrong) => !top_for_filter.contains(wrong),
                _ => true,
            }),
    ]
}

fn job_fields() -> Vec<String> {
    JOB_FIELDS
        .iter()
        .chain(&RUN_FIELDS)
        .map(|f| f.to_string())
        .chain(["env.PATH", "env.DLSCALE_TOKEN", "env.X"].map(String::from))
        .collect()
}

fn job_top_fields() -> Vec<String> {
    JOB_FIELDS
        .iter()
        .chain(&RUN_FIELDS)
        .map(|f| f.to_string())
        .collect()
}

/// A valid submission (runnable here: `true` on PATH, an existing workdir).
fn valid_job(id: &str, workdir: &str) -> Map<String, Value> {
    json!({"id": id, "min_batch": 16, "max_batch": 64, "max_local_batch": 32, "max_gpus": 2,
           "command": ["true"], "workdir": workdir, "launcher": "plain", "env": {"X": "1"},
           "max_retries": 0})
    .as_object()
    .unwrap()
    .clone()
}

/// Checks an API error naming the mutated field: in `field` or in the message.
fn names(error: &Value, field: &str) -> bool {
    let leaf = field.rsplit('.').next().unwrap();
    error["field"].as_str().is_some_and(|f| f.contains(leaf))
        || error["error"].as_str().is_some_and(|m| m.contains(leaf))
}

// ---------------------------------------------------------------------------------------------
// The configuration file.

/// The executor a generated configuration chooses: each reads keys of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExecutorChoice {
    /// `executor = "local"` with its top-level `slots`.
    Local,
    /// `executor = "slurm"` with a `[slurm]` table.
    Slurm,
    /// `executor = "ray"` with a `[ray]` table.
    Ray,
}

impl ExecutorChoice {
    /// Every executor, in the order of `dlscale_server::executor::EXECUTORS`.
    const ALL: [ExecutorChoice; 3] = [
        ExecutorChoice::Local,
        ExecutorChoice::Slurm,
        ExecutorChoice::Ray,
    ];

    /// The executor's name, as `executor = "…"` gives it.
    fn name(self) -> &'static str {
        match self {
            ExecutorChoice::Local => "local",
            ExecutorChoice::Slurm => "slurm",
            ExecutorChoice::Ray => "ray",
        }
    }
}

/// Names a misspelling must not produce to be refused as unknown, beyond the generated keys:
/// the tables and top-level keys the generated configurations leave out.
const OTHER_FIELDS: [&str; 10] = [
    "slurm",
    "ray",
    "slots",
    "slot_types",
    "counts",
    "consolidate",
    "learn_overlap",
    "teams",
    "users",
    "fair_share_half_life_s",
];

/// A valid configuration choosing `executor`, key by key: `(section, key, value)`, section ""
/// for the top level (the top-level keys come first, as TOML needs).
fn config_keys(executor: ExecutorChoice) -> Vec<(&'static str, &'static str, &'static str)> {
    let mut keys = vec![
        ("", "listen", "\"127.0.0.1:7878\""),
        ("", "data_dir", "\"/tmp/dlscale-fuzz\""),
        ("", "token", "\"s3cret\""),
        ("", "policy", "\"elastic-batch\""),
        ("", "utility", "\"speedup\""),
        ("", "admission", "\"queue\""),
        ("", "backfill", "false"),
        ("", "min_gain", "0.05"),
        ("", "restart_cost_s", "0.0"),
        ("", "remaining_exponent", "1.5"),
        ("", "remaining_scale_s", "3600.0"),
        ("", "cooldown_s", "60.0"),
        ("", "interval_s", "30.0"),
        ("", "grace_s", "30.0"),
        ("", "max_retries", "2"),
        // An executable that exists: the local executor checks it with the configuration.
        ("", "torchrun", "\"/bin/sh\""),
        ("", "metrics_without_token", "\"loopback\""),
        ("", "defragment_moves", "0"),
        ("", "tiresias_threshold_gpu_s", "3600.0"),
        ("", "api_url", "\"http://127.0.0.1:7878\""),
    ];
    match executor {
        ExecutorChoice::Local => {
            keys.extend([("", "executor", "\"local\""), ("", "slots", "4")]);
        }
        ExecutorChoice::Slurm => keys.extend([
            ("", "executor", "\"slurm\""),
            ("slurm", "partition", "\"gpu\""),
            ("slurm", "account", "\"proj\""),
            ("slurm", "nodes", "[\"n1\", \"n2\"]"),
            ("slurm", "poll_s", "2.0"),
            ("slurm", "pending_timeout_s", "120.0"),
            ("slurm", "sbatch_args", "[\"--time=24:00:00\"]"),
            ("slurm", "cpus_per_gpu", "4"),
            ("slurm", "rdzv_port_base", "29500"),
            ("slurm", "command_timeout_s", "30.0"),
        ]),
        ExecutorChoice::Ray => keys.extend([
            ("", "executor", "\"ray\""),
            ("ray", "address", "\"http://head:8265\""),
            ("ray", "resource", "\"GPU\""),
            ("ray", "python", "\"python3\""),
            ("ray", "poll_s", "2.0"),
            ("ray", "pending_timeout_s", "300.0"),
            ("ray", "request_timeout_s", "30.0"),
        ]),
    }
    keys
}

/// Wrong TOML values.
fn wrong_toml() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "\"x\"",
            "\"\"",
            "-1",
            "0",
            "1",
            "1.5",
            "-0.5",
            "nan",
            "inf",
            "-inf",
            "1e300",
            "9223372036854775807",
            "-9223372036854775808",
            "65535",
            "65536",
            "true",
            "[]",
            "{}",
            "[1, 2]",
            "[\"\"]",
            "\"http://\"",
            "\"https://x\"",
            "\"anyone\"",
            "\"nobody\"",
            "\"slurm\"",
            "\"local\"",
            "\"k8s\"",
            "\"tiresias\"",
            "\"fair:2\"",
            "\"fair:-1\"",
            "\"drop\"",
            "\"0.0.0.0:0\"",
            "\"[::1]:80\"",
            "\"a b\"",
            "\"a\\u0001b\"",
            "1979-05-27",
            // Edges of the `[ray]` table's keys: its address, resource and durations.
            "\"http://a b\"",
            "\"http://[::1\"",
            "\"http:///\"",
            "\"head:8265\"",
            "\" \"",
            "\"fake_gpu\"",
            "0.1",
            "1e10",
        ])
        .prop_map(String::from),
        "[a-z0-9 :._-]{0,12}".prop_map(|s| format!("\"{s}\"")),
        any::<i64>().prop_map(|i| i.to_string()),
    ]
}

/// A configuration's text with key `which` set to `value` (`None`: left out) or renamed to
/// `rename`; the line the key is on.
fn config_text(
    keys: &[(&str, &str, &str)],
    which: usize,
    value: Option<&str>,
    rename: Option<&str>,
) -> (String, u64) {
    let mut text = String::new();
    let mut line = 0;
    let mut key_line = 0;
    let mut section = "";
    for (i, (sec, key, v)) in keys.iter().enumerate() {
        if *sec != section {
            text.push_str(&format!("[{sec}]\n"));
            line += 1;
            section = sec;
        }
        let (key, v) = if i == which {
            (rename.unwrap_or(key), value.unwrap_or(v))
        } else {
            (*key, *v)
        };
        if i == which && value.is_none() && rename.is_none() {
            continue;
        }
        text.push_str(&format!("{key} = {v}\n"));
        line += 1;
        if i == which {
            key_line = line;
        }
    }
    (text, key_line)
}

fn config_tokens() -> impl Strategy<Value = String> {
    let tokens = vec![
        "[slurm]",
        "[[slurm]]",
        "[ray]",
        "[[ray]]",
        "address",
        "listen",
        "slots",
        "policy",
        "executor",
        "partition",
        "poll_s",
        " = ",
        "=",
        "\"x\"",
        "'y'",
        "1",
        "-1",
        "nan",
        "1e999",
        "[",
        "]",
        "{",
        "}",
        ",",
        "\n",
        " ",
        "\"",
        "'''",
        "#",
        ".",
        "true",
    ];
    prop::collection::vec(prop::sample::select(tokens), 0..40).prop_map(|t| t.concat())
}

proptest! {
    // More cases than elsewhere: three executors, some thirty keys, four edits each (a case
    // takes under a millisecond).
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    /// Random bytes or tokens as a configuration file: an error naming the file, never a panic.
    #[test]
    fn configs_of_random_text_are_rejected_naming_the_file(
        text in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..200)
                .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
            config_tokens(),
        ],
    ) {
        match ConfigFile::parse(&text, "dlscale.toml") {
            Ok(file) => {
                let _ = ServerConfig::resolve(file, None);
            }
            Err(e) => prop_assert!(e.to_string().starts_with("dlscale.toml"), "{}", e),
        }
    }

    /// A valid configuration (local, Slurm or Ray) with one key wrong, missing or misspelt: a
    /// parse error names the file, the key's line and the key; a resolve error names the key, a
    /// key of the executor's table as `table.key` (`ray.poll_s`).
    #[test]
    fn configs_with_one_wrong_key_name_it(
        executor in prop::sample::select(ExecutorChoice::ALL.to_vec()),
        in_table in any::<bool>(),
        which in any::<prop::sample::Index>(),
        how in 0u8..4,
        value in wrong_toml(),
        edit in (any::<u8>(), any::<usize>(), prop::char::range('a', 'z')),
    ) {
        let keys = config_keys(executor);
        // Half the cases edit a key of the executor's table (when it has one), outnumbered as
        // they are by the top-level keys.
        let table_keys: Vec<usize> = (0..keys.len()).filter(|&i| !keys[i].0.is_empty()).collect();
        let which = if in_table && !table_keys.is_empty() {
            table_keys[which.index(table_keys.len())]
        } else {
            which.index(keys.len())
        };
        let (section, key, _) = keys[which];
        let qualified = if section.is_empty() { key.to_string() } else { format!("{section}.{key}") };
        let misspelt = misspell(key, edit);
        let known = keys.iter().any(|k| k.1 == misspelt) || OTHER_FIELDS.contains(&misspelt.as_str());
        let (text, line) = match how {
            0 => config_text(&keys, which, None, None),
            1 if !known => config_text(&keys, which, None, Some(&misspelt)),
            _ => config_text(&keys, which, Some(&value), None),
        };
        let misspelling = how == 1 && !known;
        let named = if misspelling { misspelt.as_str() } else { qualified.as_str() };
        match ConfigFile::parse(&text, "dlscale.toml") {
            Err(e) => {
                let message = format!("{e:#}");
                prop_assert!(
                    message.starts_with(&format!("dlscale.toml:{line}:")),
                    "{}: not at line {}\n{}", message, line, text
                );
                prop_assert!(message.contains(named), "{}: does not name {}\n{}", message, named, text);
                // A misspelling that is itself a key was given a wrong value instead.
                if misspelling {
                    prop_assert!(message.contains(&format!("did you mean `{key}`")) || message.contains("expected"),
                        "{}: no hint", message);
                }
            }
            Ok(file) => {
                if let Err(e) = ServerConfig::resolve(file, None) {
                    let message = format!("{e:#}");
                    prop_assert!(
                        message.contains(&qualified) || (key == "executor" && message.contains("slurm")),
                        "{}: does not name {}\n{}", message, qualified, text
                    );
                }
            }
        }
    }
}

/// The valid configurations the property above edits resolve, each to the executor it chooses
/// with the table it gives: a rejection there is the edit's.
#[test]
fn valid_configs_of_every_executor_resolve() {
    // A new executor needs its keys generated here too.
    assert_eq!(
        ExecutorChoice::ALL.map(ExecutorChoice::name).to_vec(),
        dlscale_server::executor::names()
    );
    for executor in ExecutorChoice::ALL {
        let keys = config_keys(executor);
        // `which` past the last key: none is edited.
        let (text, _) = config_text(&keys, keys.len(), None, None);
        let file =
            ConfigFile::parse(&text, "dlscale.toml").unwrap_or_else(|e| panic!("{e:#}\n{text}"));
        let config = ServerConfig::resolve(file, None).unwrap_or_else(|e| panic!("{e:#}\n{text}"));
        assert_eq!(config.executor.name(), executor.name(), "{text}");
    }
}

// ---------------------------------------------------------------------------------------------
// Submissions as parsed.

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Random bytes as a submission body: rejected, never a panic.
    #[test]
    fn submissions_of_random_bytes_are_rejected(
        bytes in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        if let Err(e) = JobSpec::parse(&bytes) {
            prop_assert!(!e.message.is_empty());
            prop_assert!(e.status.is_client_error());
        }
    }

    /// A valid submission with one field wrong, missing or misspelt: the error names it.
    #[test]
    fn submissions_with_one_wrong_field_name_it(
        m in mutation(job_fields(), job_top_fields()),
    ) {
        let mut job = valid_job("a", "/tmp");
        m.apply(&mut job);
        let result = JobSpec::from_value(Value::Object(job.clone()))
            .and_then(|s| s.build_job(None).map(|_| s));
        if let Err(e) = result {
            let body = json!({"error": e.message, "field": e.field});
            prop_assert!(names(&body, m.field()), "{:?}: does not name {}", e, m.field());
            if let Mutation::Misspell(_, wrong) = &m {
                prop_assert!(
                    e.message.contains(&format!("field '{wrong}': unknown field")),
                    "{:?}", e
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The API, with a real service behind it.

/// The ids of every job the service has (live and ended).
async fn stored_ids(app: &axum::Router) -> BTreeSet<String> {
    let (status, jobs) = call(app, "GET", "/v1/jobs?all=true", Vec::new()).await;
    assert_eq!(status, StatusCode::OK, "{jobs}");
    jobs.as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_string())
        .collect()
}

/// What a report may change of a job.
async fn progress(app: &axum::Router, id: &str) -> Value {
    let (status, job) = call(app, "GET", &format!("/v1/jobs/{id}"), Vec::new()).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    json!([
        job["step"],
        job["samples_seen"],
        job["loss"],
        job["samples_per_s"]
    ])
}

/// A body for the API: random bytes, or a valid one with one field made wrong.
#[derive(Debug, Clone)]
enum Input {
    Bytes(Vec<u8>),
    Mutated(Mutation),
}

fn body(fields: Vec<String>, top: Vec<String>) -> impl Strategy<Value = Input> {
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..120).prop_map(Input::Bytes),
        4 => mutation(fields, top).prop_map(Input::Mutated),
    ]
}

/// Submissions, reports, completions and profile uploads through the router, random and
/// mutated: never a 5xx; a rejection names the field; a rejected request leaves the jobs, the
/// profiles and the live job's progress as they were. A submission of two jobs whose second is
/// bad stores neither.
#[test]
fn api_bodies_never_half_apply() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let workdir = dir.path().join("work");
    std::fs::create_dir(&workdir).unwrap();
    let workdir = workdir.display().to_string();
    let app = runtime.block_on(async { router::service(&dir.path().join("data")).await });
    // A live job for the reports.
    let live = runtime.block_on(async {
        let mut job = valid_job("live", &workdir);
        job.insert("command".into(), json!(["sleep", "60"]));
        let (status, body) = call(
            &app,
            "POST",
            "/v1/jobs",
            Value::Object(job).to_string().into_bytes(),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let (_, shown) = call(&app, "GET", "/v1/jobs/live", Vec::new()).await;
            if shown["state"] == "running" {
                break shown["attempt"].as_u64().unwrap();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "live never ran: {shown}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    });
    let config = ProptestConfig {
        cases: 96,
        ..ProptestConfig::default()
    };
    let counter = AtomicUsize::new(0);

    // POST /v1/jobs: one job, or [a valid new job, the mutated one].
    let mut runner = TestRunner::new(config.clone());
    runner
        .run(
            &(body(job_fields(), job_top_fields()), any::<bool>()),
            |(b, pair)| {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                runtime.block_on(async {
                    let before = stored_ids(&app).await;
                    let mutated = match &b {
                        Input::Bytes(_) => None,
                        Input::Mutated(m) => {
                            let mut job = valid_job(&format!("f{n}"), &workdir);
                            m.apply(&mut job);
                            Some(Value::Object(job))
                        }
                    };
                    let first = Value::Object(valid_job(&format!("g{n}"), &workdir));
                    let bytes = match (&b, &mutated, pair) {
                        (Input::Bytes(bytes), _, _) => bytes.clone(),
                        (_, Some(job), false) => job.to_string().into_bytes(),
                        (_, Some(job), true) => json!([first, job]).to_string().into_bytes(),
                        _ => unreachable!(),
                    };
                    let (status, answer) = call(&app, "POST", "/v1/jobs", bytes).await;
                    prop_assert!(!status.is_server_error(), "{}: {}", status, answer);
                    if status.is_success() {
                        return Ok(());
                    }
                    prop_assert!(answer["error"].is_string(), "{}", answer);
                    prop_assert_eq!(
                        &stored_ids(&app).await,
                        &before,
                        "a rejected submission stored jobs: {}",
                        answer
                    );
                    if let Input::Mutated(m) = &b {
                        prop_assert!(
                            names(&answer, m.field()),
                            "{}: does not name {}",
                            answer,
                            m.field()
                        );
                        if pair {
                            let field = answer["field"].as_str().unwrap_or("[1].");
                            prop_assert!(
                                field.starts_with("[1]."),
                                "{}: not the second job",
                                answer
                            );
                        }
                    }
                    Ok(())
                })
            },
        )
        .unwrap();

    // A job that is live already, second in a submission: nothing is stored.
    runtime.block_on(async {
        let before = stored_ids(&app).await;
        let body = json!([valid_job("fresh", &workdir), valid_job("live", &workdir)]);
        let (status, answer) = call(&app, "POST", "/v1/jobs", body.to_string().into_bytes()).await;
        assert_eq!(status, StatusCode::CONFLICT, "{answer}");
        assert_eq!(answer["field"], json!("[1].id"), "{answer}");
        assert_eq!(stored_ids(&app).await, before);
    });

    // POST /v1/jobs/live/metrics.
    let report = json!({"step": 3, "samples_per_s": 10.0, "batch_size": 32, "world_size": 1,
        "loss": 0.5, "samples_seen": 96, "attempt": live, "grad": {"grad_sqr": 1.0, "grad_var": 2.0},
        "compute_time_s": 0.05, "max_local_batch": 64, "micro_steps": 1});
    let report = report.as_object().unwrap().clone();
    let report_fields: Vec<String> = api::METRICS_FIELDS
        .iter()
        .map(|f| f.to_string())
        .chain(["grad.grad_sqr", "grad.grad_var", "grad.grad_vra"].map(String::from))
        .collect();
    let report_top: Vec<String> = api::METRICS_FIELDS.iter().map(|f| f.to_string()).collect();
    let mut runner = TestRunner::new(config.clone());
    runner
        .run(&body(report_fields, report_top), |b| {
            runtime.block_on(async {
                let before = progress(&app, "live").await;
                let bytes = match &b {
                    Input::Bytes(bytes) => bytes.clone(),
                    Input::Mutated(m) => {
                        let mut r = report.clone();
                        m.apply(&mut r);
                        Value::Object(r).to_string().into_bytes()
                    }
                };
                let (status, answer) = call(&app, "POST", "/v1/jobs/live/metrics", bytes).await;
                prop_assert!(!status.is_server_error(), "{}: {}", status, answer);
                if status.is_client_error() {
                    prop_assert_eq!(
                        progress(&app, "live").await,
                        before,
                        "a rejected report changed the job: {}",
                        answer
                    );
                    if let Input::Mutated(m) = &b {
                        prop_assert!(
                            names(&answer, m.field()),
                            "{}: does not name {}",
                            answer,
                            m.field()
                        );
                    }
                }
                Ok(())
            })
        })
        .unwrap();

    // Values a worker may send that imply no real step: refused, naming the field (a step time
    // of infinity had made the job's record unreadable at the next start).
    for (field, value, named) in [
        ("samples_per_s", json!(5e-324), "samples_per_s"),
        ("samples_per_s", json!(1e300), "samples_per_s"),
        ("compute_time_s", json!(1e300), "compute_time_s"),
        (
            "grad",
            json!({"grad_sqr": 1.0, "grad_var": 1e308}),
            "grad.grad_var",
        ),
    ] {
        runtime.block_on(async {
            let before = progress(&app, "live").await;
            let mut r = report.clone();
            r.insert(field.to_string(), value.clone());
            let bytes = Value::Object(r).to_string().into_bytes();
            let (status, answer) = call(&app, "POST", "/v1/jobs/live/metrics", bytes).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{field} {value}: {answer}");
            assert!(names(&answer, named), "{answer} does not name {named}");
            assert_eq!(progress(&app, "live").await, before);
        });
    }

    // POST /v1/jobs/live/complete: only the field naming is checked (a valid completion of
    // another launch is refused as such; the job keeps running).
    let completion = json!({"attempt": live + 7, "step": 1, "samples_seen": 1})
        .as_object()
        .unwrap()
        .clone();
    let completion_fields: Vec<String> = ["attempt", "step", "samples_seen"]
        .map(String::from)
        .to_vec();
    let mut runner = TestRunner::new(config.clone());
    runner
        .run(&body(completion_fields.clone(), completion_fields), |b| {
            runtime.block_on(async {
                let bytes = match &b {
                    Input::Bytes(bytes) => bytes.clone(),
                    Input::Mutated(m) => {
                        let mut c = completion.clone();
                        if let Mutation::Set(f, _) = m {
                            prop_assume!(f != "attempt");
                        }
                        m.apply(&mut c);
                        Value::Object(c).to_string().into_bytes()
                    }
                };
                let (status, answer) = call(&app, "POST", "/v1/jobs/live/complete", bytes).await;
                prop_assert!(!status.is_server_error(), "{}: {}", status, answer);
                prop_assert!(status.is_client_error(), "{}: {}", status, answer);
                // A valid completion of another launch is a 409 about `attempt`.
                if let (Input::Mutated(m), StatusCode::BAD_REQUEST) = (&b, status) {
                    prop_assert!(
                        names(&answer, m.field()),
                        "{}: does not name {}",
                        answer,
                        m.field()
                    );
                }
                Ok(())
            })
        })
        .unwrap();
    // Its own launch's completion beyond 2^53, as a metrics report's, names the field.
    runtime.block_on(async {
        for field in ["step", "samples_seen"] {
            let mut c = json!({"attempt": live, "step": 1, "samples_seen": 1});
            c[field] = json!(u64::MAX);
            let bytes = c.to_string().into_bytes();
            let (status, answer) = call(&app, "POST", "/v1/jobs/live/complete", bytes).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
            assert!(names(&answer, field), "{answer}");
        }
    });
    runtime.block_on(async {
        let (_, shown) = call(&app, "GET", "/v1/jobs/live", Vec::new()).await;
        assert_eq!(shown["state"], json!("running"), "{shown}");
    });

    // PUT /v1/profiles/{name}.
    let upload = json!({"model": {"compute_base_s": 0.0, "compute_per_sample_s": 0.001,
        "sync_intra_base_s": 0.01}, "quality": null})
    .as_object()
    .unwrap()
    .clone();
    let upload_fields: Vec<String> = [
        "model",
        "quality",
        "model.compute_base_s",
        "model.compute_per_sample_s",
        "model.sync_intra_base_s",
        "model.max_local_batch",
        "model.compute_per_sampel_s",
    ]
    .map(String::from)
    .to_vec();
    let upload_top: Vec<String> = ["model", "quality"].map(String::from).to_vec();
    let mut runner = TestRunner::new(config);
    runner
        .run(
            &(body(upload_fields, upload_top), "[a-z.]{1,6}"),
            |(b, name)| {
                runtime.block_on(async {
                    let (_, before) = call(&app, "GET", "/v1/profiles", Vec::new()).await;
                    let bytes = match &b {
                        Input::Bytes(bytes) => bytes.clone(),
                        Input::Mutated(m) => {
                            let mut u = upload.clone();
                            m.apply(&mut u);
                            Value::Object(u).to_string().into_bytes()
                        }
                    };
                    let (status, answer) =
                        call(&app, "PUT", &format!("/v1/profiles/{name}"), bytes).await;
                    prop_assert!(!status.is_server_error(), "{}: {}", status, answer);
                    if status.is_client_error() {
                        let (_, after) = call(&app, "GET", "/v1/profiles", Vec::new()).await;
                        prop_assert_eq!(
                            after,
                            before,
                            "a rejected upload changed the profiles: {}",
                            answer
                        );
                        if let (Input::Mutated(m), false) = (&b, name.starts_with('.')) {
                            prop_assert!(
                                names(&answer, m.field()),
                                "{}: does not name {}",
                                answer,
                                m.field()
                            );
                        }
                    }
                    Ok(())
                })
            },
        )
        .unwrap();

    runtime.block_on(async {
        let (status, _) = call(&app, "DELETE", "/v1/jobs/live", Vec::new()).await;
        assert_eq!(status, StatusCode::ACCEPTED);
    });
}

// ---------------------------------------------------------------------------------------------
// What Slurm prints.

const SQUEUE: &str = include_str!("data/squeue-22.05.json");
const SINFO: &str = include_str!("data/sinfo-22.05.json");

/// Strings Slurm's fields might hold, odd ones among them.
fn slurm_string() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(vec![
            "n[1-2]",
            "n[2-1]",
            "a]b[",
            "n[0-99999999999]",
            "n[1-3",
            "n1-3]",
            "[]",
            "n[-]",
            "n[01-03,x,5-]",
            "gpu:4",
            "gpu:4294967295,gpu:1",
            "gpu:a100:2(S:0-1)",
            "gres:gpu:x",
            "gpu:",
            "(null)",
            "dlscale:ab12:a:2",
            "dlscale:ab12::1",
            "dlscale:ab12:a:-1",
            "dlscale:ab12:a:4294967296",
            "dlscale::a:1",
            "RUNNING",
            "PENDING",
            "COMPLETED",
            "FAILED",
            "COMPLETING",
            "idle*",
            "DRAIN",
            "gpu",
            "",
        ])
        .prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
    ]
}

fn slurm_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(vec![0i64, -1, 1, i64::MIN, i64::MAX, i32::MIN as i64, 1 << 31, 35072, 15])
            .prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        Just(Value::from(u64::MAX)),
        Just(Value::from(1.5)),
        any::<i64>().prop_map(|n| json!({"set": true, "number": n})),
        Just(json!({"set": false, "number": 1})),
        any::<i64>().prop_map(|n| json!({"return_code": {"set": true, "number": n}, "signal": {"id": {"set": true, "number": n}}})),
    ]
}

/// A value for a Slurm field: of any shape.
fn slurm_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        slurm_string(),
        slurm_number(),
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

const SQUEUE_KEYS: [&str; 10] = [
    "job_id",
    "name",
    "job_state",
    "state_reason",
    "nodes",
    "gres_detail",
    "tres_per_node",
    "restart_cnt",
    "exit_code",
    "submit_time",
];
const SINFO_KEYS: [&str; 6] = [
    "name",
    "state",
    "state_flags",
    "partitions",
    "gres",
    "address",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Random bytes as `squeue --json` / `sinfo --json`: an error saying which, never a panic.
    #[test]
    fn slurm_json_of_random_bytes_is_rejected(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let text = String::from_utf8_lossy(&bytes);
        if let Err(e) = parse_squeue(&text, "ab12", 0) {
            prop_assert!(e.to_string().contains("squeue"), "{}", e);
        }
        if let Err(e) = parse_sinfo(&text, "gpu", None) {
            prop_assert!(e.to_string().contains("sinfo"), "{}", e);
        }
    }

    /// The recorded output with fields of its jobs and nodes given odd values: no panic, and the
    /// snapshot is still interpreted.
    #[test]
    fn recorded_slurm_json_with_odd_fields_is_read(
        edits in prop::collection::vec(
            (any::<prop::sample::Index>(), any::<prop::sample::Index>(), slurm_value()), 1..6),
        top in prop::option::of(slurm_value()),
    ) {
        let mut squeue: Value = serde_json::from_str(SQUEUE).unwrap();
        let mut sinfo: Value = serde_json::from_str(SINFO).unwrap();
        for (item, key, value) in &edits {
            let jobs = squeue["jobs"].as_array_mut().unwrap();
            let n = jobs.len();
            jobs[item.index(n)][SQUEUE_KEYS[key.index(SQUEUE_KEYS.len())]] = value.clone();
            let nodes = sinfo["nodes"].as_array_mut().unwrap();
            let n = nodes.len();
            nodes[item.index(n)][SINFO_KEYS[key.index(SINFO_KEYS.len())]] = value.clone();
        }
        if let Some(top) = &top {
            squeue["jobs"].as_array_mut().unwrap().push(top.clone());
            sinfo["nodes"].as_array_mut().unwrap().push(top.clone());
        }
        if let Ok(snap) = parse_squeue(&squeue.to_string(), "ab12", 0) {
            let believed: Vec<(String, u32)> = snap.ours.iter().map(|j| (j.job.clone(), j.attempt)).collect();
            let _ = interpret(&snap.ours, &believed, &Default::default(), |_, _| None, 0.0);
            for held in snap.foreign_gpus.values() {
                prop_assert!(*held > 0);
            }
        }
        let _ = parse_sinfo(&sinfo.to_string(), "gpu", None);
        let _ = parse_sinfo(&sinfo.to_string(), "gpu", Some(&["n1".to_string()]));
    }

    /// Whole documents of any shape: no panic.
    #[test]
    fn slurm_json_of_any_shape_is_read_without_panic(doc in slurm_value(), items in prop::collection::vec(slurm_value(), 0..4)) {
        let _ = parse_squeue(&doc.to_string(), "ab12", 0);
        let _ = parse_sinfo(&doc.to_string(), "gpu", None);
        let wrapped = json!({"jobs": items, "nodes": items});
        let _ = parse_squeue(&wrapped.to_string(), "ab12", 0);
        let _ = parse_sinfo(&wrapped.to_string(), "gpu", None);
    }

    /// Host lists and GRES strings of any text: no panic, and no expansion beyond Slurm's range
    /// limit per bracket.
    #[test]
    fn hostlists_and_gres_of_any_text(text in "[a-z0-9\\[\\],:()/-]{0,24}", any_text in "\\PC{0,24}") {
        for t in [&text, &any_text] {
            let names = expand_hostlist(t);
            prop_assert!(names.len() <= 65_536 * (t.matches(',').count() + 1), "{}", names.len());
            let _ = gres_gpus(t);
        }
    }
}
