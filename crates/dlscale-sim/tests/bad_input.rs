//! Bad input, fuzzed: the trace readers (Pollux, Philly, ITP CSVs and the native JSON workload)
//! on random bytes and on valid traces with one cell made wrong. They never panic; a bad row is
//! an error naming the file and the row's line (and the column, for a value of the wrong type),
//! or, with `skip_bad_rows`, skipped and counted.

use dlscale_sim::workload::{parse_timestamp, read_itp, read_native, read_philly, read_pollux};
use dlscale_sim::{ReadOptions, SimError, Workload, WorkloadFormat};
use proptest::prelude::*;

type Reader = fn(&str, &str, &ReadOptions) -> dlscale_sim::Result<Workload>;

/// A CSV format: its reader, header and a valid row.
struct Csv {
    name: &'static str,
    read: Reader,
    header: &'static [&'static str],
    row: &'static [&'static str],
}

const CSVS: [Csv; 3] = [
    Csv {
        name: "pollux",
        read: |t, s, o| read_pollux(t.as_bytes(), s, o),
        header: &["name", "time", "application", "num_replicas", "batch_size"],
        row: &["j", "107", "cifar10", "6", "2048"],
    },
    Csv {
        name: "philly",
        read: |t, s, o| read_philly(t.as_bytes(), s, o),
        header: &["timestamp", "duration", "num_gpus", "gpu_time", "cluster"],
        row: &["2017-10-09 07:01:55", "66.0", "1", "66.0", "x"],
    },
    Csv {
        name: "itp",
        read: |t, s, o| read_itp(t.as_bytes(), s, o),
        header: &["job_id", "submission_time", "duration", "num_gpu"],
        row: &["j", "10", "3600", "2"],
    },
];

/// Cell values of the wrong kind, range or shape (no line breaks: a row stays one line).
fn wrong_cell() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "",
            "x",
            "-1",
            "0",
            "-0",
            "1.5",
            "1e400",
            "-1e400",
            "1e18",
            "nan",
            "inf",
            "-inf",
            "NaN",
            "4294967296",
            "18446744073709551616",
            "65",
            "1000000",
            "imagenet",
            "nosuchmodel",
            "gavel:k80:nope",
            "\"",
            "\"a,b\"",
            "a,b",
            "9999999999999999999-01-01 00:00:00",
            "-9223372036854775808-01-01 00:00:00",
            "2017-02-31 00:00:00",
            "2017-10-09 24:00:00",
            "2017-10-09",
            "2017-10-09 07:01:55 extra",
            " 2017-10-09 07:01:55 ",
        ])
        .prop_map(String::from),
        "[^\r\n]{0,10}",
        any::<i64>().prop_map(|i| i.to_string()),
        any::<f64>().prop_map(|f| f.to_string()),
    ]
}

fn strict() -> ReadOptions {
    ReadOptions::default()
}

fn skipping() -> ReadOptions {
    ReadOptions {
        skip_bad_rows: true,
        seed: 0,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Random bytes (as text, lossily) to every reader and to format detection: an error naming
    /// the file, never a panic, strict or skipping.
    #[test]
    fn traces_of_random_bytes_are_rejected_naming_the_file(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
        header in prop::sample::select(vec!["", "name,time,application,num_replicas,batch_size\n",
            "timestamp,duration,num_gpus,gpu_time,cluster\n", "job_id,submission_time,duration,num_gpu\n",
            "{\"jobs\": ["]),
    ) {
        let text = format!("{header}{}", String::from_utf8_lossy(&bytes));
        let _ = WorkloadFormat::detect(text.lines().next().unwrap_or(""));
        let readers: [Reader; 4] = [CSVS[0].read, CSVS[1].read, CSVS[2].read, read_native];
        for read in readers {
            for options in [strict(), skipping()] {
                if let Err(e) = read(&text, "w.csv", &options) {
                    prop_assert!(e.to_string().starts_with("w.csv"), "{}", e);
                }
            }
        }
    }

    /// Any text as a timestamp: a time or `None`, never a panic (overflowing years included).
    #[test]
    fn timestamps_of_any_text_never_panic(text in "\\PC{0,24}", y in any::<i64>(), d in 0i64..40) {
        let _ = parse_timestamp(&text);
        let _ = parse_timestamp(&format!("{y}-01-{d:02} 00:00:00"));
    }

    /// A valid trace with one cell made wrong: strict reading fails naming the file and that row's
    /// line (and the column, for a value of the wrong type), or succeeds; skipping reads every
    /// other row and counts the bad one.
    #[test]
    fn traces_with_one_wrong_cell_name_the_line(
        which in 0usize..3,
        rows in 1usize..6,
        bad_row in 0usize..6,
        column in 0usize..5,
        cell in wrong_cell(),
    ) {
        let csv = &CSVS[which];
        let (bad_row, column) = (bad_row % rows, column % csv.header.len());
        let mut text = format!("{}\n", csv.header.join(","));
        for r in 0..rows {
            let mut cells: Vec<String> = csv.row.iter().map(|c| c.to_string()).collect();
            cells[0] = match csv.name {
                "philly" => format!("2017-10-09 07:{r:02}:55"),
                _ => format!("j{r}"),
            };
            if r == bad_row {
                cells[column] = cell.clone();
            }
            text.push_str(&cells.join(","));
            text.push('\n');
        }
        let line = bad_row as u64 + 2;
        let source = format!("{}.csv", csv.name);
        match (csv.read)(&text, &source, &strict()) {
            Ok(w) => {
                prop_assert_eq!(w.jobs.len(), rows);
                let skipped = (csv.read)(&text, &source, &skipping()).unwrap();
                prop_assert_eq!(skipped.skipped_rows, 0);
            }
            Err(e) => {
                let message = e.to_string();
                prop_assert!(
                    matches!(&e, SimError::BadRow { line: l, .. } if *l == line),
                    "{}: not at line {}\n{}", message, line, text
                );
                prop_assert!(message.starts_with(&format!("{source}:{line}: ")), "{}", message);
                // The column, unless the cell broke the row's shape (a comma, a quote).
                prop_assert!(
                    message.contains(&format!("column '{}'", csv.header[column]))
                        || message.contains("where the header has")
                        || message.contains("is also on line")
                        || cell.contains('"'),
                    "{}: does not name column {}", message, csv.header[column]
                );
                let skipped = (csv.read)(&text, &source, &skipping())
                    .unwrap_or_else(|e| panic!("skipping still fails: {e}"));
                prop_assert_eq!(skipped.skipped_rows, 1);
                if cell.contains('"') {
                    // A stray quote opens a value that swallows the rows after it: one bad row
                    // (its line named, as checked above).
                    prop_assert!(skipped.jobs.len() < rows);
                } else {
                    prop_assert_eq!(skipped.jobs.len(), rows - 1);
                }
            }
        }
    }

    /// A valid native workload with one field of one entry made wrong: an error naming the file,
    /// the entry, the field and the entry's line, or success; skipping drops just that entry.
    #[test]
    fn native_workloads_with_one_wrong_field_name_entry_and_field(
        entries in 1usize..4,
        bad in 0usize..4,
        field in prop::sample::select(vec!["id", "model", "min_batch", "max_batch", "arrival_s",
            "epochs", "work_samples", "weight", "gpus", "max_gpus", "colour", "arival_s"]),
        value in prop_oneof![
            Just(serde_json::json!(null)), Just(serde_json::json!(-1)), Just(serde_json::json!(0)),
            Just(serde_json::json!("x")), Just(serde_json::json!(1e308)), Just(serde_json::json!([])),
            Just(serde_json::json!(u64::MAX)), Just(serde_json::json!(1.5)), Just(serde_json::json!({})),
        ],
    ) {
        let bad = bad % entries;
        let mut text = String::from("{\"jobs\": [\n");
        for k in 0..entries {
            let mut entry = serde_json::json!({"id": format!("j{k}"), "model": "cifar10",
                "min_batch": 128, "max_batch": 1024, "arrival_s": k, "epochs": 2});
            if k == bad {
                entry[field] = value.clone();
            }
            text.push_str(&entry.to_string());
            text.push_str(if k + 1 < entries { ",\n" } else { "\n" });
        }
        text.push_str("]}");
        match read_native(&text, "w.json", &strict()) {
            Ok(w) => prop_assert_eq!(w.jobs.len(), entries),
            Err(e) => {
                let message = e.to_string();
                let line = bad as u64 + 2;
                prop_assert!(
                    message.starts_with(&format!("w.json:{line}: job entry {}: ", bad + 1)),
                    "{}: not entry {} at line {}", message, bad + 1, line
                );
                prop_assert!(message.contains(field), "{}: does not name {}", message, field);
                let skipped = read_native(&text, "w.json", &skipping()).unwrap();
                prop_assert_eq!(skipped.skipped_rows, 1);
                prop_assert_eq!(skipped.jobs.len(), entries - 1);
            }
        }
    }
}

/// A stray quote in a last column swallows the next row: the error says so, at the row's line.
#[test]
fn a_stray_quote_is_named() {
    let text = "timestamp,duration,num_gpus,gpu_time,cluster\n\
                2017-10-09 07:00:55,66.0,1,66.0,\"\n\
                2017-10-09 07:01:55,66.0,1,66.0,x\n";
    let err = read_philly(text.as_bytes(), "p.csv", &strict()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "p.csv:2: a quoted value runs from this line to line 3 (a stray '\"'?)"
    );
}
