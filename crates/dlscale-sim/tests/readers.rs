//! Workload readers: formats, mapping rules, bad rows.

use dlscale_sim::workload::{
    bundled_pollux_workload, generate, parse_timestamp, read_itp, read_native, read_philly,
    read_pollux, GeneratorSpec, Work, Workload,
};
use dlscale_sim::{parse_workload, ReadOptions, SimError, WorkloadFormat};

fn skip() -> ReadOptions {
    ReadOptions {
        skip_bad_rows: true,
        seed: 0,
    }
}

#[test]
fn bundled_pollux_workloads_load_sorted_with_user_requests() {
    for n in 1..=8 {
        let w = bundled_pollux_workload(n).unwrap();
        assert_eq!(w.jobs.len(), 160, "workload {n}");
        assert!(w.jobs.windows(2).all(|p| p[0].arrival_s <= p[1].arrival_s));
        assert!(w.jobs.iter().all(|j| j.work == Work::FullTraining));
    }
    let w = bundled_pollux_workload(1).unwrap();
    let first = &w.jobs[0];
    assert_eq!(first.job.id, "cifar10-0");
    assert_eq!(first.arrival_s, 107.0);
    assert_eq!(
        (first.job.requested.gpus, first.job.requested.batch),
        (6, 2048)
    );
    // cifar10's validated batches span 128..4096.
    assert_eq!((first.job.batch.min, first.job.batch.max), (128, 4096));
    // BERT at 384 on few GPUs needs accumulation: its per-GPU limit is raised just enough.
    let bert = w.jobs.iter().find(|j| j.job.model_name == "bert").unwrap();
    let r = bert.job.requested;
    assert_eq!(bert.job.max_local_batch, r.batch.div_ceil(r.gpus));
    assert!(bundled_pollux_workload(9).is_err());
}

#[test]
fn malformed_rows_name_file_and_line_or_are_skipped_and_counted() {
    let text = "name,time,application,num_replicas,batch_size\n\
                a,10,cifar10,4,512\n\
                b,oops,cifar10,4,512\n\
                c,20,nosuchmodel,4,512\n\
                d,30,ncf,1,32768\n";
    let err = read_pollux(text.as_bytes(), "w.csv", &ReadOptions::default()).unwrap_err();
    assert!(matches!(err, SimError::BadRow { line: 3, .. }), "{err}");
    assert!(
        err.to_string().starts_with("w.csv:3: column 'time'"),
        "{err}"
    );
    let w = read_pollux(text.as_bytes(), "w.csv", &skip()).unwrap();
    assert_eq!(w.jobs.len(), 2);
    assert_eq!(w.skipped_rows, 2);

    let philly = "timestamp,duration,num_gpus,gpu_time,cluster\n\
                  2017-10-09 07:01:55,66.0,1,66.0,x\n\
                  2017-10-09 06:13:03,-5,1,0,x\n";
    let err = read_philly(philly.as_bytes(), "philly.csv", &ReadOptions::default()).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("philly.csv:3: column 'duration': must be a number of seconds > 0"),
        "{err}"
    );
    let short = "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0\n";
    let err = read_philly(short.as_bytes(), "p.csv", &ReadOptions::default()).unwrap_err();
    assert!(err.to_string().starts_with("p.csv:2:"), "{err}");
    assert_eq!(
        read_philly(short.as_bytes(), "p.csv", &skip())
            .unwrap()
            .skipped_rows,
        1
    );
}

/// The error `read` gives for `text`, in words.
fn at(text: &str, read: &dyn Fn(&[u8]) -> dlscale_sim::Result<Workload>) -> String {
    let err: SimError = read(text.as_bytes()).unwrap_err();
    err.to_string()
}

/// A time so far out that the simulated clock could not step past it (an f64 near 1e18 s steps
/// by 128 s) is refused where it is read, naming the file, line and column, as are a trace whose
/// arrivals span more than the horizon, a trace job longer than `MAX_DURATION_S` and a job whose
/// declared work could not end within the horizon (both were simulated one decision interval at
/// a time up to the horizon before failing).
#[test]
fn times_beyond_the_horizon_are_refused() {
    let pollux = "name,time,application,num_replicas,batch_size
a,1e18,cifar10,2,128
";
    let err = at(pollux, &|b| {
        read_pollux(b, "w.csv", &ReadOptions::default())
    });
    assert!(
        err.starts_with("w.csv:2: column 'time': must be a number of seconds ≥ 0 and at most 1e10"),
        "{err}"
    );
    let itp = "job_id,submission_time,duration,num_gpu
j,0,1e18,1
k,1e11,5,1
";
    let err = at(itp, &|b| read_itp(b, "i.csv", &ReadOptions::default()));
    assert!(err.starts_with("i.csv:2: column 'duration'"), "{err}");
    let itp = "job_id,submission_time,duration,num_gpu
k,1e11,5,1
";
    let err = at(itp, &|b| read_itp(b, "i.csv", &ReadOptions::default()));
    assert!(
        err.starts_with("i.csv:2: column 'submission_time'"),
        "{err}"
    );
    let native = r#"{"jobs": [{"id": "x", "model": "cifar10", "min_batch": 128, "max_batch": 1024, "arrival_s": 1e18}]}"#;
    let err = read_native(native, "n.json", &ReadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("n.json:1") && err.contains("'arrival_s'"),
        "{err}"
    );
    let itp = "job_id,submission_time,duration,num_gpu
j,0,1e9,1
";
    let err = at(itp, &|b| read_itp(b, "i.csv", &ReadOptions::default()));
    assert!(
        err.starts_with(
            "i.csv:2: column 'duration': must be a number of seconds > 0 and at most 1e8"
        ),
        "{err}"
    );
    let native = r#"{"jobs": [{"id": "x", "model": "cifar10", "min_batch": 128, "max_batch": 1024,
        "arrival_s": 0, "work_samples": 1e300}]}"#;
    let err = read_native(native, "n.json", &ReadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("job 'x': its work (work_samples, steps or epochs) takes")
            && err.contains("beyond the 1e10 s"),
        "{err}"
    );
    // At the horizon itself a time is still read.
    let edge = "name,time,application,num_replicas,batch_size
a,1e10,cifar10,2,128
";
    assert!(read_pollux(edge.as_bytes(), "w.csv", &ReadOptions::default()).is_ok());

    // Philly's arrivals come from timestamps: one four centuries after the other.
    let philly = "timestamp,duration,num_gpus,gpu_time,cluster
\
                  2017-10-09 07:01:55,60,1,60,a
\
                  2417-10-09 07:01:55,60,1,60,a
";
    let err = at(philly, &|b| {
        read_philly(b, "p.csv", &ReadOptions::default())
    });
    assert!(
        err.starts_with("p.csv:3: column 'timestamp': more than 1e10 s after the earliest"),
        "{err}"
    );
    let w = read_philly(philly.as_bytes(), "p.csv", &skip()).unwrap();
    assert_eq!((w.jobs.len(), w.skipped_rows), (1, 1));
}

/// Empty lines between rows are skipped, and the rows after them keep their own lines (one was
/// taken for a stray quote running from the empty line, and skipping it lost the next row).
#[test]
fn empty_lines_are_skipped_and_lines_stay_right() {
    let text = "name,time,application,num_replicas,batch_size\na,0,cifar10,1,128\n\n\r\nb,0,cifar10,1,128\n\nc,0,cifar10,0,128\n";
    let err = at(text, &|b| read_pollux(b, "w.csv", &ReadOptions::default()));
    assert!(err.starts_with("w.csv:7: "), "{err}");
    let w = read_pollux(text.as_bytes(), "w.csv", &skip()).unwrap();
    let ids: Vec<&str> = w.jobs.iter().map(|j| j.job.id.as_str()).collect();
    assert_eq!((ids, w.skipped_rows), (vec!["a", "b"], 1));
    // A stray quote is still named, from its own line.
    let stray =
        "name,time,application,num_replicas,batch_size\n\na,0,cifar10,1,\"\nb,0,cifar10,1,128\n";
    let err = at(stray, &|b| read_pollux(b, "w.csv", &ReadOptions::default()));
    assert!(
        err.starts_with("w.csv:3: a quoted value runs from this line"),
        "{err}"
    );
}

/// A key given twice in a native workload's job is refused, as in every job file (the last
/// was taken silently).
#[test]
fn a_native_jobs_repeated_key_is_refused() {
    let native = r#"{"jobs": [{"id": "a", "arrival_s": 0, "model": "cifar10", "min_batch": 128,
        "max_batch": 4096, "epochs": 1, "epochs": 100}]}"#;
    let err = read_native(native, "n.json", &ReadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("n.json:2") && err.contains("epochs"), "{err}");
    let not_object = r#"{"jobs": [3]}"#;
    let err = read_native(not_object, "n.json", &ReadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("job entry 1: must be a JSON object"), "{err}");
}

#[test]
fn philly_rows_are_sorted_and_mapped_by_gpu_time() {
    let text = "timestamp,duration,num_gpus,gpu_time,cluster\n\
                2017-10-09 07:01:55,600,1,600,a\n\
                2017-10-09 06:00:00,7200,2,14400,a\n\
                2017-10-10 06:00:00,36000,8,288000,b\n\
                2017-10-09 06:30:00,3600,12,43200,b\n\
                2017-10-09 06:40:00,100000,128,1,c\n";
    let w = read_philly(text.as_bytes(), "p.csv", &ReadOptions::default()).unwrap();
    let arrivals: Vec<f64> = w.jobs.iter().map(|j| j.arrival_s).collect();
    assert_eq!(arrivals, vec![0.0, 1800.0, 2400.0, 3715.0, 86400.0]);
    let models: Vec<&str> = w.jobs.iter().map(|j| j.job.model_name.as_str()).collect();
    assert!(["deepspeech2", "bert"].contains(&models[0]), "4 GPU-h");
    assert_eq!(models[1], "yolov3", "12 GPU-h");
    assert_eq!(models[2], "imagenet", "3,556 GPU-h");
    assert!(["cifar10", "ncf"].contains(&models[3]), "1/6 GPU-h");
    assert_eq!(models[4], "yolov3", "80 GPU-h");
    // 12 GPUs round up to 16; 128 are capped at 64; GPU counts are powers of two.
    assert_eq!(w.jobs[1].job.requested.gpus, 16);
    assert_eq!(w.jobs[2].job.requested.gpus, 64);
    assert!(w.jobs.iter().all(|j| j.job.gpus.powers_of_two));
    assert_eq!(
        w.jobs[0].work,
        Work::RequestedDuration { duration_s: 7200.0 }
    );
    // The model coin is seeded.
    let again = read_philly(text.as_bytes(), "p.csv", &ReadOptions::default()).unwrap();
    let models_again: Vec<&str> = again
        .jobs
        .iter()
        .map(|j| j.job.model_name.as_str())
        .collect();
    assert_eq!(models, models_again);
}

#[test]
fn itp_and_native_formats() {
    let itp = "job_id,submission_time,duration,num_gpu\nb,50,100,2\na,10,3600,1\n";
    let w = read_itp(itp.as_bytes(), "cluster01.csv", &ReadOptions::default()).unwrap();
    assert_eq!(w.jobs[0].job.id, "a");
    assert_eq!(w.jobs[1].arrival_s, 50.0);
    let native = r#"{"jobs": [
        {"id": "x", "model": "cifar10", "min_batch": 128, "max_batch": 1024, "arrival_s": 5, "epochs": 2},
        {"id": "y", "model": "imagenet", "min_batch": 200, "max_batch": 800, "arrival_s": 1},
        {"id": "z", "model": "imagenet", "min_batch": 200, "max_batch": 100, "arrival_s": 1}
    ]}"#;
    let err = read_native(native, "jobs.json", &ReadOptions::default()).unwrap_err();
    assert!(
        err.to_string().starts_with("jobs.json:4: job entry 3:"),
        "{err}"
    );
    let w = read_native(native, "jobs.json", &skip()).unwrap();
    assert_eq!(w.skipped_rows, 1);
    assert_eq!(w.jobs[0].job.id, "y");
    assert_eq!(w.jobs[0].work, Work::FullTraining);
    assert!(matches!(w.jobs[1].work, Work::Samples(s) if s > 0.0));
    let missing =
        r#"{"jobs": [{"id": "x", "model": "cifar10", "min_batch": 128, "max_batch": 1024}]}"#;
    let err = read_native(missing, "j.json", &ReadOptions::default()).unwrap_err();
    assert!(err.to_string().contains("arrival_s"), "{err}");
}

#[test]
fn formats_are_detected_from_the_header() {
    assert_eq!(
        WorkloadFormat::detect("name,time,application,num_replicas,batch_size"),
        Some(WorkloadFormat::Pollux)
    );
    assert_eq!(
        WorkloadFormat::detect("timestamp,duration,num_gpus,gpu_time,cluster"),
        Some(WorkloadFormat::Philly)
    );
    assert_eq!(
        WorkloadFormat::detect("job_id,submission_time,duration,num_gpu"),
        Some(WorkloadFormat::Itp)
    );
    assert_eq!(
        WorkloadFormat::detect("{\"jobs\": []}"),
        Some(WorkloadFormat::Native)
    );
    assert_eq!(WorkloadFormat::detect("a,b"), None);
    let path = std::path::Path::new("/data/mine.csv");
    let itp = "job_id,submission_time,duration,num_gpu\nj,0,60,1\n";
    let w = parse_workload(path, itp, None, &ReadOptions::default()).unwrap();
    assert_eq!((w.name.as_str(), w.jobs.len()), ("mine", 1));
    let err = parse_workload(path, "what,ever\n1,2\n", None, &ReadOptions::default()).unwrap_err();
    assert!(
        err.to_string().contains("mine.csv:1: unknown header"),
        "{err}"
    );
}

#[test]
fn timestamps_are_utc_seconds() {
    assert_eq!(parse_timestamp("1970-01-01 00:00:00"), Some(0.0));
    assert_eq!(
        parse_timestamp("2017-10-09 07:01:55"),
        Some(1_507_532_515.0)
    );
    assert_eq!(parse_timestamp("2000-03-01 00:00:00"), Some(951_868_800.0));
    assert_eq!(parse_timestamp("2017-13-09 07:01:55"), None);
    // Days that are not in their month (they were moved to the next one).
    for no_such_day in ["2017-02-29", "2017-02-31", "2017-04-31", "1900-02-29"] {
        assert_eq!(parse_timestamp(&format!("{no_such_day} 00:00:00")), None);
    }
    assert_eq!(
        parse_timestamp("2016-02-29 00:00:00"),
        Some(1_456_704_000.0)
    );
    assert_eq!(parse_timestamp("2000-02-29 00:00:00"), Some(951_782_400.0));
    assert_eq!(parse_timestamp("2017-10-09T07:01:55"), None);
}

#[test]
fn the_generator_is_seeded_and_poisson() {
    let spec = GeneratorSpec::pollux_mix(2000, 10.0, 3);
    let a = generate(&spec).unwrap();
    let b = generate(&spec).unwrap();
    let key = |w: &dlscale_sim::Workload| -> Vec<(String, u64)> {
        w.jobs
            .iter()
            .map(|j| (j.job.id.clone(), j.arrival_s.to_bits()))
            .collect()
    };
    assert_eq!(key(&a), key(&b));
    let c = generate(&GeneratorSpec::pollux_mix(2000, 10.0, 4)).unwrap();
    assert_ne!(key(&a), key(&c));
    // Mean inter-arrival ≈ 360 s at 10 jobs/h.
    let mean_gap = a.jobs.last().unwrap().arrival_s / 2000.0;
    assert!((mean_gap - 360.0).abs() < 30.0, "{mean_gap}");
    let ncf = a.jobs.iter().filter(|j| j.job.model_name == "ncf").count() as f64 / 2000.0;
    assert!((ncf - 0.39).abs() < 0.05, "{ncf}");
}
