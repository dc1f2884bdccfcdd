//! The job-file format: parsing, defaults and every refusal, each naming its field and line.

use super::*;

fn parse(text: &str) -> Result<Vec<Job>> {
    parse_jobs(text, FileFormat::Json, "jobs.json")
}

#[test]
fn gpu_types_are_read_from_bundled_tables_or_given_and_checked() {
    // A bundled model runs on every bundled type; T4 is its own profile.
    let job = parse(r#"{"id": "a", "model": "imagenet", "min_batch": 64, "max_batch": 1024}"#)
        .unwrap()
        .remove(0);
    for gpu_type in profiles::BUNDLED_TYPES {
        let typed = profiles::bundled_on_type("imagenet", gpu_type).unwrap();
        let (model, limit) = job.on_type(gpu_type).unwrap();
        assert_eq!(
            model.step_time_s(1, 1, 32),
            typed.throughput.step_time_s(1, 1, 32),
            "{gpu_type}"
        );
        assert_eq!(
            Some(limit),
            typed.throughput.max_local_batch(),
            "{gpu_type}"
        );
    }
    // T4 is its own profile; a type the tables do not cover runs its own model too.
    for gpu_type in ["t4", "h100"] {
        let (model, limit) = job.on_type(gpu_type).unwrap();
        assert_eq!(
            (model.step_time_s(1, 1, 200), limit),
            (job.throughput.step_time_s(1, 1, 200), job.max_local_batch)
        );
    }
    // An analytic job runs alike everywhere unless it lists its types.
    let text = |extra: &str| {
        format!(
            r#"{{"id": "b", "model": {{"compute_per_sample_s": 0.002}}, "min_batch": 16,
                "max_batch": 256, "max_local_batch": 32{extra}}}"#
        )
    };
    let alike = parse(&text("")).unwrap().remove(0);
    assert!(alike.types.on.is_empty() && alike.types.bundled.is_none());
    let job = parse(&text(
        r#", "types": {"a100": {"model": {"compute_per_sample_s": 0.0005}, "max_local_batch": 128},
            "t4": {}}, "current": {"gpus": 2, "batch": 64}, "current_type": "t4""#,
    ))
    .unwrap()
    .remove(0);
    let (a100, limit) = job.on_type("a100").unwrap();
    assert_eq!(limit, 128);
    assert!(a100.step_time_s(1, 1, 32).unwrap() < job.throughput.step_time_s(1, 1, 32).unwrap());
    assert_eq!(job.on_type("t4").unwrap().1, 32);
    assert!(job.on_type("v100").is_none());
    assert_eq!(job.types.current.as_deref(), Some("t4"));
    // Errors name the field.
    for (extra, field) in [
        (r#", "types": {"A100": {}}"#, "types.A100"),
        (
            r#", "types": {"a100": {"model": "resnet9000"}}"#,
            "types.a100.model",
        ),
        (
            r#", "types": {"a100": {"max_local_batch": 0}}"#,
            "types.a100.max_local_batch",
        ),
        (r#", "types": {"a100": {"memory": 3}}"#, "types.a100.memory"),
        (r#", "current_type": "t4""#, "current_type"),
        (
            r#", "types": {"t4": {}}, "current": {"gpus": 1, "batch": 32}, "current_type": "a100""#,
            "current_type",
        ),
    ] {
        let err = parse(&text(extra)).unwrap_err().to_string();
        assert!(err.contains(&format!("field '{field}")), "{extra}: {err}");
    }
}

#[test]
fn min_local_batch_is_read_defaulted_and_checked() {
    let text = |extra: &str| {
        format!(
            r#"{{"jobs": [{{"id": "a", "model": {{"compute_per_sample_s": 0.001}},
                "min_batch": 32, "max_batch": 512, "max_local_batch": 64{extra}}}]}}"#
        )
    };
    assert_eq!(parse(&text("")).unwrap()[0].min_local_batch, 1);
    let job = parse(&text(r#", "min_local_batch": 16"#))
        .unwrap()
        .remove(0);
    assert_eq!(job.min_local_batch, 16);
    // No GPU computes fewer than 16 samples a step: 4 GPUs need a batch of 64.
    assert!(!job.batch_fits(4, 63) && job.batch_fits(4, 64));
    let toml = "[[jobs]]\nid = 'a'\nmin_batch = 32\nmax_batch = 512\nmax_local_batch = 64\n\
                min_local_batch = 8\n[jobs.model]\ncompute_per_sample_s = 0.001\n";
    let jobs = parse_jobs(toml, FileFormat::Toml, "jobs.toml").unwrap();
    assert_eq!(jobs[0].min_local_batch, 8);
    // Errors name the field, on its line.
    for extra in [
        r#", "min_local_batch": 0"#,
        r#", "min_local_batch": 65"#,
        r#", "min_local_batch": "8""#,
        r#", "min_local_batch": -1"#,
    ] {
        let err = parse(&text(extra)).unwrap_err().to_string();
        assert!(
            err.starts_with("jobs.json:2: job 'a': field 'min_local_batch'"),
            "{extra}: {err}"
        );
    }
    // Larger than the largest batch: not even one GPU could run.
    let err = parse(
        r#"{"jobs": [{"id": "a", "model": {"compute_per_sample_s": 0.001},
            "min_batch": 1, "max_batch": 8, "max_local_batch": 64, "min_local_batch": 9}]}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with("jobs.json:2: job 'a': field 'min_local_batch'")
            && err.contains("max_batch"),
        "{err}"
    );
}

#[test]
fn accumulation_runs_batches_beyond_memory_in_micro_steps() {
    let text = |steps: &str| {
        format!(
            r#"{{"id": "a", "model": {{"compute_per_sample_s": 0.001, "sync_intra_base_s": 0.05,
            "overlap_gamma": 2}}, "min_batch": 16, "max_batch": 512, "max_local_batch": 32{steps}}}"#
        )
    };
    let job = parse(&text(r#", "max_accum_steps": 4"#)).unwrap().remove(0);
    assert_eq!(job.max_local_batch, 128);
    let model = &job.throughput;
    assert_eq!(model.memory_local_batch(), Some(32));
    assert_eq!(
        (
            model.micro_steps(32),
            model.micro_steps(33),
            model.micro_steps(128)
        ),
        (1, 2, 4)
    );
    // 4 micro-steps of 25 samples on 2 GPUs: 3 compute-only, one overlapped with the sync.
    let expected = 3.0 * 0.025 + (0.025f64.powi(2) + 0.05f64.powi(2)).sqrt();
    assert!((model.step_time_s(2, 1, 100).unwrap() - expected).abs() < 1e-12);
    assert!(model.step_time_s(2, 1, 129).is_none());
    let plain = parse(&text("")).unwrap().remove(0);
    assert_eq!(
        (plain.max_local_batch, plain.throughput.micro_steps(32)),
        (32, 1)
    );
    let err = parse(&text(r#", "max_accum_steps": 0"#))
        .unwrap_err()
        .to_string();
    assert!(err.contains("max_accum_steps"), "{err}");
}

#[test]
fn reads_the_documented_example() {
    let jobs = parse(r#"{"jobs": [{"id": "a", "model": "imagenet", "min_batch": 200, "max_batch": 3200, "max_local_batch": 200,
        "min_gpus": 1, "max_gpus": 16, "batch_size": 400, "gpus": 2, "work_samples": 12000000, "weight": 1.0}]}"#)
    .unwrap();
    assert_eq!(
        jobs[0].requested,
        Requested {
            gpus: 2,
            batch: 400
        }
    );
    assert_eq!(jobs[0].max_local_batch, 200);
    assert!(jobs[0].efficiency.is_some());
}

#[test]
fn toml_and_analytic_models() {
    let text = "[[jobs]]\nid = \"x\"\nmin_batch = 32\nmax_batch = 256\nmax_local_batch = 64\nepochs = 2\ndataset_samples = 1000\n\
                [jobs.model]\ncompute_per_sample_s = 0.001\nsync_intra_base_s = 0.01\nnoise_scale = 500\n";
    let jobs = parse_jobs(text, FileFormat::Toml, "jobs.toml").unwrap();
    assert_eq!(jobs[0].remaining_samples, Some(2000.0));
    assert_eq!(jobs[0].requested, Requested { gpus: 1, batch: 32 });
    assert_eq!(jobs[0].efficiency.unwrap().init_batch, 32);
}

#[test]
fn a_file_of_one_job_reads_as_a_list_of_one() {
    // The service's fields (how to run it, its family) are accepted and ignored.
    let one = r#"{"id": "a", "model": "imagenet", "min_batch": 200, "max_batch": 400,
                  "command": ["train.py"], "workdir": ".", "family": "resnet"}"#;
    let jobs = parse(one).unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].id, "a");
    let toml_one = "id = 'a'\nmodel = 'imagenet'\nmin_batch = 200\nmax_batch = 400\n";
    assert_eq!(
        parse_jobs(toml_one, FileFormat::Toml, "a.toml")
            .unwrap()
            .len(),
        1
    );
    let err = parse(r#"{"jobs": [], "id": "a"}"#).unwrap_err().to_string();
    assert!(
        err.contains("field 'id': a file with `jobs` holds nothing else"),
        "{err}"
    );
}

#[test]
fn unknown_fields_get_the_nearest_name_or_the_known_list() {
    let near = parse(r#"{"id": "a", "model": "imagenet", "min_batch": 200, "max_bach": 400}"#)
        .unwrap_err()
        .to_string();
    assert_eq!(
        near,
        "jobs.json:1: job 'a': field 'max_bach': unknown field; did you mean 'max_batch'?"
    );
    let far = parse(r#"{"id": "a", "model": "imagenet", "min_batch": 200, "colour": 1}"#)
        .unwrap_err()
        .to_string();
    for field in JOB_FIELDS.iter().chain(&RUN_FIELDS) {
        assert!(far.contains(field), "{far} lacks {field}");
    }
}

#[test]
fn toml_errors_name_the_line_of_the_field() {
    let text = "[[jobs]]\nid = 'a'\nmodel = 'imagenet'\nmin_batch = 200\nmax_batch = 400\n\n\
                [[jobs]]\nid = 'b'\nmodel = 'imagenet'\nmin_batch = 800\nmax_batch = 400\n";
    let err = parse_jobs(text, FileFormat::Toml, "j.toml")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("j.toml:10: job 'b': field 'min_batch'"),
        "{err}"
    );
    let misspelt = text.replace("max_batch = 400\n\n", "max_batch = 400\nweigth = 2\n");
    let err = parse_jobs(&misspelt, FileFormat::Toml, "j.toml")
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "j.toml:6: job 'a': field 'weigth': unknown field; did you mean 'weight'?"
    );
    let nested = "id = 'a'\nmin_batch = 1\nmax_batch = 2\nmax_local_batch = 2\n[model]\n\
                  compute_per_sample_s = 1\nsync_intra_base_s = -1\n";
    let err = parse_jobs(nested, FileFormat::Toml, "j.toml")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("j.toml:7: job 'a': field 'model.sync_intra_base_s'"),
        "{err}"
    );
    let nan = "id = 'a'\nmin_batch = 1\nmax_batch = 2\nweight = nan\n";
    let err = parse_jobs(nan, FileFormat::Toml, "j.toml")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("j.toml:4: field 'weight': must be a finite number"),
        "{err}"
    );
}

#[test]
fn errors_name_file_line_job_and_field() {
    let cases: &[(&str, &str)] = &[
        (
            r#"{"jobs": [{"id": "a", "model": "imagenet", "min_batch": 400, "max_batch": 200}]}"#,
            "jobs.json:1: job 'a': field 'min_batch': 400 is larger than max_batch 200",
        ),
        (
            r#"{"jobs": [{"id": "a", "model": "imagenet", "min_batch": 0, "max_batch": 200}]}"#,
            "jobs.json:1: job 'a': field 'min_batch': must be at least 1",
        ),
        (
            r#"{"jobs": [{"id": "a", "model": "nope", "min_batch": 1, "max_batch": 2}]}"#,
            "jobs.json:1: job 'a': field 'model': unknown model 'nope'",
        ),
        (
            r#"{"jobs": [{"id": "a", "model": "cifar10", "min_batch": 64, "max_batch": 128}, {"id": "a", "model": "cifar10", "min_batch": 64, "max_batch": 128}]}"#,
            "jobs.json:1: job 'a': field 'id': duplicate id",
        ),
        (
            r#"{"jobs": [{"id": "a", "model": "imagenet", "min_batch": 20000, "max_batch": 30000, "max_gpus": 8}]}"#,
            "jobs.json:1: job 'a': field 'min_batch': 20000 cannot run even alone",
        ),
        (
            r#"{"jobs": [{"id": "a", "model": "imagenet", "min_batch": -5, "max_batch": 200}]}"#,
            "jobs.json:1: job 'a': field 'min_batch': invalid value: integer `-5`, expected u32",
        ),
        (
            "{\"jobs\": [\n{\"id\": \"a\",, }]}",
            "jobs.json:2: key must be a string",
        ),
        (
            r#"{"jobs": [{"id": "a", "model": "imagenet", "min_batch": 1, "max_batch": 2, "colour": 1}]}"#,
            "jobs.json:1: job 'a': field 'colour': unknown field (known: id, model, ",
        ),
        (
            r#"{"jobs": [{"id": "a", "model": {"compute_per_sample": 1}, "min_batch": 1, "max_batch": 2}]}"#,
            "jobs.json:1: job 'a': field 'model.compute_per_sample': unknown field `compute_per_sample`; did you mean `compute_per_sample_s`? (expected one of",
        ),
        (
            r#"{"jobs": [{"id": "a", "model": "ncf", "min_batch": 256, "max_batch": 512, "min_gpus": 2147483649, "powers_of_two": true}]}"#,
            "jobs.json:1: job 'a': field 'powers_of_two'",
        ),
        (
            r#"{"jobs": [{"id": "a", "model": 7, "min_batch": 1, "max_batch": 2}]}"#,
            "jobs.json:1: job 'a': field 'model': invalid type: integer `7`, expected a bundled model name or a table",
        ),
        (
            r#"{"jobs": [{"id": "a", "model": {"compute_per_sample_s": -1}, "min_batch": 1, "max_batch": 2, "max_local_batch": 2}]}"#,
            "jobs.json:1: job 'a': field 'model.compute_per_sample_s'",
        ),
        (
            r#"{"jobs": [{"id": "a", "model": "imagenet", "min_batch": 200, "max_batch": 400, "weight": 0}]}"#,
            "jobs.json:1: job 'a': field 'weight'",
        ),
        (
            r#"{"jobs": [{"id": "a", "model": "imagenet", "min_batch": 200, "max_batch": 400, "weight": 1e308}]}"#,
            "jobs.json:1: job 'a': field 'weight': must be a positive number at most 1e6",
        ),
        (
            r#"{"jobs": [{"id": "a", "model": "imagenet", "min_batch": 200, "max_batch": 400, "min_gpus": 3, "max_gpus": 3, "powers_of_two": true}]}"#,
            "jobs.json:1: job 'a': field 'powers_of_two'",
        ),
        (
            r#"{"jobs": [{"id": "a", "model": "imagenet", "min_batch": 200, "max_batch": 400, "batch_size": 400, "gpus": 1}]}"#,
            "jobs.json:1: job 'a': field 'batch_size'",
        ),
    ];
    for (text, expected) in cases {
        let err = parse(text).unwrap_err().to_string();
        assert!(
            err.starts_with(expected),
            "got: {err}\nexpected prefix: {expected}"
        );
    }
}

#[test]
fn a_batch_fits_a_type_within_that_types_per_gpu_limit() {
    let text = r#"{"jobs": [{"id": "a", "model": {"compute_per_sample_s": 0.001},
        "min_batch": 32, "max_batch": 1024, "max_local_batch": 64,
        "types": {"t4": {}, "a100": {"max_local_batch": 256}}}]}"#;
    let job = parse(text).unwrap().remove(0);
    // 4 × 128 per GPU: beyond the job's own 64, within A100's 256; T4 and no type hold 64.
    assert!(job.batch_fits_on(Some("a100"), 4, 512));
    assert!(!job.batch_fits_on(Some("t4"), 4, 512));
    assert!(!job.batch_fits(4, 512) && job.batch_fits(4, 256));
    // A type it may not run on: its own limit.
    assert!(!job.batch_fits_on(Some("h100"), 4, 512));
}

#[test]
fn a_bundled_jobs_memory_measured_on_a_type_is_that_types_alone() {
    let mut job = parse(
        r#"{"id": "a", "model": "imagenet", "min_batch": 64, "max_batch": 1024,
            "max_accum_steps": 4}"#,
    )
    .unwrap()
    .remove(0);
    let limits = |job: &Job| -> Vec<BatchSize> {
        profiles::BUNDLED_TYPES
            .iter()
            .map(|t| job.on_type(t).unwrap().1)
            .collect()
    };
    let before = limits(&job);
    assert_eq!(job.on_type("a100").unwrap().0.micro_steps(64), 1);
    job.set_memory_on_type("a100", 16).unwrap();
    // A100's limit is the measured memory times the job's accumulation; the other types keep
    // their tables'.
    let (a100, limit) = job.on_type("a100").unwrap();
    assert_eq!((limit, a100.micro_steps(64)), (64, 4));
    let k = profiles::BUNDLED_TYPES
        .iter()
        .position(|&t| t == "a100")
        .unwrap();
    let mut expected = before.clone();
    expected[k] = 64;
    assert_eq!(limits(&job), expected);
    // A type the tables do not cover has no model of its own to take it; nothing changes.
    let err = job.set_memory_on_type("h100", 16).unwrap_err().to_string();
    assert!(
        err.contains("field 'types'") && err.contains("h100"),
        "{err}"
    );
    assert!(job.set_memory_on_type("v100", 0).is_err());
    assert_eq!(limits(&job), expected);
}

/// An id with control characters (a terminal's escape sequence, a line break) is refused,
/// named escaped: it was printed raw into `optimize`'s table and its errors.
#[test]
fn an_id_with_control_characters_is_refused() {
    let e = parse(
        r#"{"id": "a\n\u001b[31mRED", "model": "imagenet", "min_batch": 64, "max_batch": 1024}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains(r#"job 'a\n\u{1b}[31mRED': field 'id': holds control characters"#),
        "{e}"
    );
    assert!(!e.contains('\u{1b}'), "{e}");
    assert!(
        parse(r#"{"id": "é-ü.1", "model": "imagenet", "min_batch": 64, "max_batch": 1024}"#)
            .is_ok()
    );
}
