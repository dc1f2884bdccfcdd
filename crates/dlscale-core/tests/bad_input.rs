//! Bad input, fuzzed: the job-file parser (JSON and TOML, one job or a list) on random bytes, on
//! random token soup, and on valid jobs with one field made wrong. It never panics; every error
//! names the file, and a wrong field is named (with its line) or, when misspelt, suggested.

use dlscale_core::fieldline::field_line;
use dlscale_core::jobfile::{parse_jobs, FileFormat, JOB_FIELDS, RUN_FIELDS};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

/// Valid jobs the mutations start from: a bundled model with every field, an analytic model with
/// epochs and goodput, a running job, and a job carrying the service's run fields.
fn bases() -> Vec<Map<String, Value>> {
    let jobs = [
        json!({"id": "a", "model": "imagenet", "min_batch": 200, "max_batch": 3200,
               "max_local_batch": 200, "min_gpus": 1, "max_gpus": 16, "batch_size": 400,
               "gpus": 2, "work_samples": 12000000, "weight": 1.0, "powers_of_two": false}),
        json!({"id": "x", "min_batch": 32, "max_batch": 256, "max_local_batch": 64,
               "epochs": 2, "dataset_samples": 1000, "epoch": 1,
               "model": {"compute_per_sample_s": 0.001, "sync_intra_base_s": 0.01,
                         "noise_scale": 500, "init_batch": 32}}),
        json!({"id": "r", "model": "cifar10", "min_batch": 128, "max_batch": 1024,
               "current": {"gpus": 2, "batch": 256, "age_s": 30.0, "restarts": 1},
               "attained_gpu_s": 100.0}),
        json!({"id": "s", "model": "ncf", "min_batch": 256, "max_batch": 512,
               "command": ["train.py", "--x"], "workdir": ".", "launcher": "plain",
               "env": {"A": "1"}, "max_retries": 2}),
    ];
    jobs.into_iter()
        .map(|j| j.as_object().unwrap().clone())
        .collect()
}

/// Nested fields the mutations may also hit (a misspelt one of each object among them).
const NESTED: [&str; 11] = [
    "model.compute_per_sampel_s",
    "current.gpu",
    "model.compute_base_s",
    "model.compute_per_sample_s",
    "model.sync_intra_base_s",
    "model.noise_scale",
    "model.init_batch",
    "current.gpus",
    "current.batch",
    "current.age_s",
    "current.restarts",
];

/// Values of every JSON type, the edges of the integer types among them.
fn wrong_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        prop_oneof![
            Just(0i64),
            Just(-1),
            Just(1),
            Just(i64::MIN),
            Just(i64::MAX),
            Just(u32::MAX as i64),
            Just(u32::MAX as i64 + 1),
            Just(i32::MAX as i64 + 1),
        ]
        .prop_map(Value::from),
        Just(Value::from(u64::MAX)),
        any::<i64>().prop_map(Value::from),
        prop_oneof![
            Just(-0.5f64),
            Just(0.5),
            Just(1e308),
            Just(-1e308),
            Just(5e-324),
            Just(2.0)
        ]
        .prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
        Just(json!("imagenet")),
        Just(json!("gavel:k80:nope")),
        Just(json!([])),
        Just(json!([1, "a"])),
        Just(json!({})),
        Just(json!({"gpus": 1})),
    ]
}

/// One thing made wrong in a valid job.
#[derive(Debug, Clone)]
enum Mutation {
    /// A field (possibly nested, `model.x`) set to a value.
    Set(String, Value),
    /// A field removed.
    Remove(String),
    /// A known field misspelt (one edit away), with its value.
    Misspell(String, String),
    /// A field no job has.
    Unknown(String),
}

fn known(name: &str) -> bool {
    JOB_FIELDS.contains(&name) || RUN_FIELDS.contains(&name)
}

/// `field` with one edit (`edit` picks which and where).
fn misspell(field: &str, edit: (u8, usize, char)) -> String {
    let mut chars: Vec<char> = field.chars().collect();
    let at = edit.1 % chars.len();
    match edit.0 % 4 {
        0 if chars.len() > 3 => {
            chars.remove(at);
        }
        1 => chars.insert(at, edit.2),
        2 if at + 1 < chars.len() => chars.swap(at, at + 1),
        _ => chars[at] = edit.2,
    }
    chars.into_iter().collect()
}

/// A mutation of `job`: nested fields only of the objects it has.
fn mutation(job: &Map<String, Value>) -> impl Strategy<Value = Mutation> {
    let fields: Vec<String> = JOB_FIELDS
        .iter()
        .copied()
        .chain(NESTED.into_iter().filter(|path| {
            let outer = path.split('.').next().unwrap();
            job.get(outer).is_some_and(Value::is_object)
        }))
        .map(String::from)
        .collect();
    let top: Vec<String> = JOB_FIELDS.iter().map(|f| f.to_string()).collect();
    prop_oneof![
        4 => (prop::sample::select(fields), wrong_value()).prop_map(|(f, v)| Mutation::Set(f, v)),
        1 => prop::sample::select(top.clone()).prop_map(Mutation::Remove),
        2 => (prop::sample::select(top), (any::<u8>(), any::<usize>(), prop::char::range('a', 'z')))
            .prop_map(|(f, e)| Mutation::Misspell(f.clone(), misspell(&f, e)))
            .prop_filter("still a known field", |m| match m {
                Mutation::Misspell(f, wrong) => wrong != f && !known(wrong),
                _ => true,
            }),
        1 => "[a-z][a-z_]{0,11}"
            .prop_filter("a known field", |f| !known(f) && f != "jobs")
            .prop_map(Mutation::Unknown),
    ]
}

/// Applies `m` to `job`; `false` when it does not apply (a nested field of an object the job
/// does not have).
fn apply(job: &mut Map<String, Value>, m: &Mutation) -> bool {
    match m {
        Mutation::Set(path, value) => match path.split_once('.') {
            None => {
                job.insert(path.clone(), value.clone());
            }
            Some((outer, inner)) => match job.get_mut(outer).and_then(Value::as_object_mut) {
                Some(slot) => {
                    slot.insert(inner.to_string(), value.clone());
                }
                None => return false,
            },
        },
        Mutation::Remove(field) => {
            job.remove(field);
        }
        Mutation::Misspell(field, wrong) => {
            let value = job.remove(field).unwrap_or(json!(1));
            job.insert(wrong.clone(), value);
        }
        Mutation::Unknown(name) => {
            job.insert(name.clone(), json!(1));
        }
    }
    true
}

/// A job file's text and the line each top-level key of the last job is written on.
struct Rendered {
    text: String,
    lines: Vec<(String, u64)>,
}

/// JSON, one key a line: `{"jobs": [<other>,\n{\n"k": v,\n...}]}` (listed) or the job alone.
fn render_json(job: &Map<String, Value>, other: Option<&Map<String, Value>>) -> Rendered {
    let mut text = String::new();
    let mut line = 1;
    if let Some(other) = other {
        text.push_str(&format!(
            "{{\"jobs\": [\n{},\n",
            Value::Object(other.clone())
        ));
        line += 2;
    }
    text.push_str("{\n");
    let mut lines = Vec::new();
    let count = job.len();
    for (i, (k, v)) in job.iter().enumerate() {
        let comma = if i + 1 < count { "," } else { "" };
        text.push_str(&format!("{}: {v}{comma}\n", Value::from(k.as_str())));
        lines.push((k.clone(), line + 1 + i as u64));
    }
    text.push('}');
    if other.is_some() {
        text.push_str("]}");
    }
    Rendered { text, lines }
}

/// A TOML inline value; `None` for what TOML cannot write (null, integers beyond i64).
fn toml_value(v: &Value) -> Option<String> {
    Some(match v {
        Value::Null => return None,
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i.to_string(),
            (None, _) if n.is_u64() => return None,
            (None, Some(f)) => format!("{f:?}"),
            (None, None) => return None,
        },
        Value::String(s) => toml::Value::String(s.clone()).to_string(),
        Value::Array(items) => {
            let items: Option<Vec<String>> = items.iter().map(toml_value).collect();
            format!("[{}]", items?.join(", "))
        }
        Value::Object(m) => {
            let items: Option<Vec<String>> = m
                .iter()
                .map(|(k, v)| Some(format!("{} = {}", toml_key(k), toml_value(v)?)))
                .collect();
            format!("{{ {} }}", items?.join(", "))
        }
    })
}

fn toml_key(k: &str) -> String {
    if !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        k.to_string()
    } else {
        toml::Value::String(k.to_string()).to_string()
    }
}

/// TOML, one key a line: `[[jobs]]` tables (listed) or the job's keys at the top level.
fn render_toml(job: &Map<String, Value>, other: Option<&Map<String, Value>>) -> Option<Rendered> {
    let mut text = String::new();
    let mut line = 1;
    if let Some(other) = other {
        text.push_str("[[jobs]]\n");
        for (k, v) in other {
            text.push_str(&format!("{} = {}\n", toml_key(k), toml_value(v)?));
        }
        text.push_str("[[jobs]]\n");
        line += other.len() as u64 + 2;
    }
    let mut lines = Vec::new();
    for (i, (k, v)) in job.iter().enumerate() {
        text.push_str(&format!("{} = {}\n", toml_key(k), toml_value(v)?));
        lines.push((k.clone(), line + i as u64));
    }
    Some(Rendered { text, lines })
}

/// The line number an error gives right after the file name, if any.
fn line_of(message: &str, source: &str) -> Option<u64> {
    let rest = message.strip_prefix(source)?.strip_prefix(':')?;
    rest.split(':').next()?.parse().ok()
}

/// Checks one rejected mutation's message: it names the file and what was made wrong.
fn check_message(message: &str, source: &str, m: &Mutation, rendered: &Rendered) {
    assert!(
        message.starts_with(source),
        "{message}: does not name {source}"
    );
    assert!(!message.contains("panicked"), "{message}");
    let line = line_of(message, source);
    let line_of_key = |key: &str| rendered.lines.iter().find(|(k, _)| k == key).map(|l| l.1);
    match m {
        Mutation::Set(path, _) => {
            let leaf = path.rsplit('.').next().unwrap();
            assert!(
                message.contains(leaf),
                "{message}: does not name the field {path}"
            );
            // The line is that of the field when the error is about it.
            let top = path.split('.').next().unwrap();
            if message.contains(&format!("field '{path}'")) {
                assert_eq!(
                    line,
                    line_of_key(top),
                    "{message}: not the line of {path}\n{}",
                    rendered.text
                );
            }
        }
        Mutation::Remove(field) => {
            assert!(
                message.contains(field.as_str()),
                "{message}: does not name the missing {field}"
            );
        }
        Mutation::Misspell(_, wrong) => {
            assert!(
                message.contains(&format!("field '{wrong}': unknown field; did you mean '")),
                "{message}: no suggestion for {wrong}"
            );
            assert_eq!(line, line_of_key(wrong), "{message}\n{}", rendered.text);
        }
        Mutation::Unknown(name) => {
            assert!(
                message.contains(&format!("field '{name}': unknown field")),
                "{message}: does not name the unknown field {name}"
            );
            assert!(
                message.contains("did you mean") || message.contains("(known: id, model,"),
                "{message}: neither a suggestion nor the known fields"
            );
            assert_eq!(line, line_of_key(name), "{message}\n{}", rendered.text);
        }
    }
}

/// JSON and TOML tokens, so that random text gets past the first byte.
fn token_soup(format: FileFormat) -> impl Strategy<Value = String> {
    let tokens: &[&str] = match format {
        FileFormat::Json => &[
            "{",
            "}",
            "[",
            "]",
            ":",
            ",",
            "\"jobs\"",
            "\"id\"",
            "\"a\"",
            "\"model\"",
            "\"imagenet\"",
            "\"min_batch\"",
            "\"max_batch\"",
            "\"current\"",
            "\"gpus\"",
            "1",
            "-1",
            "0",
            "1e400",
            "-0",
            "18446744073709551616",
            "null",
            "true",
            "\"\\u0000\"",
            "\"\\ud800\"",
            "\n",
            " ",
            "\"",
            "\\",
        ],
        FileFormat::Toml => &[
            "[[jobs]]",
            "[jobs.model]",
            "[model]",
            "[current]",
            "id = ",
            "model = ",
            "min_batch = ",
            "max_batch = ",
            "current = ",
            "jobs = ",
            "'a'",
            "\"imagenet\"",
            "1",
            "-1",
            "nan",
            "inf",
            "-inf",
            "1e400",
            "9223372036854775808",
            "{",
            "}",
            "[",
            "]",
            ",",
            "=",
            ".",
            "\n",
            " ",
            "'''",
            "1979-05-27",
            "true",
        ],
    };
    prop::collection::vec(prop::sample::select(tokens), 0..48).prop_map(|t| t.concat())
}

fn formats() -> impl Strategy<Value = FileFormat> {
    prop_oneof![Just(FileFormat::Json), Just(FileFormat::Toml)]
}

fn source(format: FileFormat) -> &'static str {
    match format {
        FileFormat::Json => "jobs.json",
        FileFormat::Toml => "jobs.toml",
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Random bytes: an error naming the file, never a panic.
    #[test]
    fn job_files_of_random_bytes_are_rejected_naming_the_file(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
        format in formats(),
    ) {
        let text = String::from_utf8_lossy(&bytes);
        if let Err(e) = parse_jobs(&text, format, source(format)) {
            let message = e.to_string();
            prop_assert!(message.starts_with(source(format)), "{}", message);
        }
    }

    /// Random tokens of the format: an error naming the file, never a panic.
    #[test]
    fn job_files_of_token_soup_are_rejected_naming_the_file(
        (format, text) in formats().prop_flat_map(|f| (Just(f), token_soup(f))),
    ) {
        if let Err(e) = parse_jobs(&text, format, source(format)) {
            let message = e.to_string();
            prop_assert!(message.starts_with(source(format)), "{}", message);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Locating a field in any text (what the parsers did not accept included) ends and does not
    /// panic; in a document written one key a line, it finds each key's line.
    #[test]
    fn field_lines_of_any_text_end(
        (format, text) in formats().prop_flat_map(|f| (Just(f), token_soup(f))),
        bytes in prop::collection::vec(any::<u8>(), 0..128),
        path in "[a-z_\\[\\]0-9.]{0,16}",
        keys in prop::collection::btree_set("[a-z_]{1,8}", 1..6),
    ) {
        let lossy = String::from_utf8_lossy(&bytes);
        for f in [FileFormat::Json, FileFormat::Toml] {
            for t in [text.as_str(), &lossy] {
                let _ = field_line(t, f, &path);
                let _ = field_line(t, f, "jobs[0].model.x");
            }
        }
        let _ = format;
        let job: Map<String, Value> = keys.iter().map(|k| (k.clone(), json!([1, {"a": "}"}]))).collect();
        let json = render_json(&job, None);
        for (key, line) in &json.lines {
            prop_assert_eq!(field_line(&json.text, FileFormat::Json, key), Some(*line));
        }
        let toml = render_toml(&job, None).unwrap();
        for (key, line) in &toml.lines {
            prop_assert_eq!(field_line(&toml.text, FileFormat::Toml, key), Some(*line));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 768, ..ProptestConfig::default() })]

    /// A valid job with one thing made wrong, in each form: alone or second of a list, JSON or
    /// TOML. Never a panic; every form gives the same verdict; a rejection names the file, the
    /// field (at its line), and for a misspelt or unknown field the nearest known one or all.
    #[test]
    fn job_files_with_one_wrong_field_name_it(
        (base, m) in prop::sample::select(bases()).prop_flat_map(|b| (Just(b.clone()), mutation(&b))),
    ) {
        let mut job = base.clone();
        prop_assert!(apply(&mut job, &m));
        let others = bases();
        let other = if job.get("id") == others[0].get("id") { &others[1] } else { &others[0] };
        let mut verdicts = Vec::new();
        for listed in [None, Some(other)] {
            let json = render_json(&job, listed);
            let result = parse_jobs(&json.text, FileFormat::Json, "jobs.json");
            if let Err(e) = &result {
                check_message(&e.to_string(), "jobs.json", &m, &json);
            }
            verdicts.push(("json", listed.is_some(), result.is_ok()));
            if let Some(toml) = render_toml(&job, listed) {
                let result = parse_jobs(&toml.text, FileFormat::Toml, "jobs.toml");
                if let Err(e) = &result {
                    check_message(&e.to_string(), "jobs.toml", &m, &toml);
                }
                verdicts.push(("toml", listed.is_some(), result.is_ok()));
            }
        }
        prop_assert!(
            verdicts.iter().all(|v| v.2 == verdicts[0].2),
            "forms disagree: {:?} for {:?}", verdicts, m
        );
    }
}

/// The mutations start from valid jobs, in every form.
#[test]
fn the_bases_are_valid_in_every_form() {
    for job in bases() {
        for listed in [None, Some(&bases()[1])] {
            let listed = listed.filter(|o| o.get("id") != job.get("id"));
            let json = render_json(&job, listed);
            parse_jobs(&json.text, FileFormat::Json, "jobs.json")
                .unwrap_or_else(|e| panic!("{e}\n{}", json.text));
            let toml = render_toml(&job, listed).unwrap();
            parse_jobs(&toml.text, FileFormat::Toml, "jobs.toml")
                .unwrap_or_else(|e| panic!("{e}\n{}", toml.text));
        }
    }
}
