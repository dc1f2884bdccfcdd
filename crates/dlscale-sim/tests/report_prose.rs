//! The prose of the reproduction reports is computed from the rows of the run that prints it:
//! fabricated rows with known values, no simulation.

use std::collections::{BTreeMap, BTreeSet};

use dlscale_sim::reproduce::{
    paper_report, pollux_report, pollux_runs, AblationRow, PaperOptions, PolluxOptions, PolluxRow,
    PolluxRun, Published, SweepPoint,
};
use dlscale_sim::Summary;

fn summary(
    policy: &str,
    avg_jct_s: f64,
    completed: usize,
    dropped: usize,
    realloc: u64,
) -> Summary {
    Summary {
        policy: policy.to_string(),
        workload: "fabricated".to_string(),
        jobs: completed + dropped,
        completed,
        dropped,
        unfinished: 0,
        skipped_rows: 0,
        avg_jct_s,
        p50_jct_s: avg_jct_s,
        p95_jct_s: avg_jct_s,
        p99_jct_s: avg_jct_s,
        makespan_s: 10.0 * avg_jct_s,
        avg_queueing_delay_s: 0.0,
        gpu_utilization: 0.5,
        reallocations: realloc,
        decisions: 100,
        optimizer_avg_s: 1e-4,
        optimizer_max_s: 1e-3,
        wall_s: 0.1,
        nodes: 16,
        gpus_per_node: 4,
    }
}

/// `x` as the reports print whole numbers: "12,947".
fn int(x: f64) -> String {
    let digits = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if x < 0.0 {
        format!("−{out}")
    } else {
        out
    }
}

/// One row per run, each workload's average JCT and reallocations from `value`.
fn pollux_rows(workloads: &[usize], value: &dyn Fn(usize, usize) -> (f64, u64)) -> Vec<PolluxRow> {
    pollux_runs()
        .into_iter()
        .enumerate()
        .map(|(i, (id, label, part))| PolluxRow {
            id,
            label,
            published_s: None,
            published_as: String::new(),
            part,
            summaries: workloads
                .iter()
                .map(|&n| {
                    let (jct, realloc) = value(i, n);
                    summary("p", jct, 100, 0, realloc)
                })
                .collect(),
        })
        .collect()
}

fn mean_of(rows: &[PolluxRow], id: PolluxRun) -> f64 {
    let r = rows.iter().find(|r| r.id == id).unwrap();
    r.summaries.iter().map(|s| s.avg_jct_s).sum::<f64>() / r.summaries.len() as f64
}

/// The line of `report` that contains `needle`.
fn line_with<'a>(report: &'a str, needle: &str) -> &'a str {
    report
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in\n{report}"))
}

/// Figures with a unit (" s", "×", " %") in each prose line (not table rows) of `text`, in
/// order.
fn prose_figures(text: &str) -> Vec<Vec<String>> {
    let mut lines = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('|')) {
        let mut out = Vec::new();
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let starts = chars[i].is_ascii_digit()
                && (i == 0 || !(chars[i - 1].is_ascii_digit() || chars[i - 1] == '.'));
            if !starts {
                i += 1;
                continue;
            }
            let mut j = i;
            while j < chars.len()
                && (chars[j].is_ascii_digit()
                    || ((chars[j] == ',' || chars[j] == '.')
                        && chars.get(j + 1).is_some_and(char::is_ascii_digit)))
            {
                j += 1;
            }
            let number: String = chars[i..j].iter().collect();
            let sign = match i.checked_sub(1).map(|k| chars[k]) {
                Some(c @ ('+' | '−' | '~' | '±')) => c.to_string(),
                _ => String::new(),
            };
            let rest: String = chars[j..].iter().take(3).collect();
            let unit = if rest.starts_with('×') {
                Some("×")
            } else if rest.starts_with(" %") {
                Some(" %")
            } else if rest.starts_with(" s")
                && !rest[2..].starts_with(|c: char| c.is_alphanumeric())
            {
                Some(" s")
            } else {
                None
            };
            if let Some(unit) = unit {
                out.push(format!("{sign}{number}{unit}"));
            }
            i = j;
        }
        lines.push(out);
    }
    lines
}

/// The figures that stay the same, at the same place in the same prose line, between two
/// reports of the same shape.
fn unchanged(a: &str, b: &str) -> BTreeSet<String> {
    let (a, b) = (prose_figures(a), prose_figures(b));
    assert_eq!(a.len(), b.len(), "the reports differ in shape");
    a.iter()
        .zip(&b)
        .flat_map(|(la, lb)| {
            la.iter()
                .zip(lb)
                .filter(|(x, y)| x == y)
                .map(|(x, _)| x.clone())
        })
        .collect()
}

/// The part of `report` from `heading` on.
fn from<'a>(report: &'a str, heading: &str) -> &'a str {
    &report[report
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading}"))..]
}

#[test]
fn the_pollux_headline_is_computed_from_the_rows() {
    let options = PolluxOptions::default();
    // The oracle row (the second) below the learned one (the first).
    let value = |i: usize, n: usize| {
        let jct = if i == 1 {
            2600.0 + 7.0 * n as f64
        } else {
            3000.0 + 97.0 * i as f64 + 11.0 * n as f64
        };
        (jct, 50 + i as u64)
    };
    let rows = pollux_rows(&options.workloads, &value);
    let report = pollux_report(&options, &rows);
    let eb = mean_of(&rows, PolluxRun::ElasticBatch);
    let oracle = mean_of(&rows, PolluxRun::ElasticBatchOracle);
    let pollux = Published::Pollux.mean_over(&options.workloads).unwrap();
    let headline = line_with(&report, "Learned elastic-batch against Pollux");
    assert!(
        headline.contains(&format!("averages {} s over workloads 1–8", int(eb))),
        "{headline}"
    );
    let up = (eb / pollux - 1.0) * 100.0;
    assert!(
        headline.contains(&format!(
            "{up:.0} % higher than Pollux's published {} s",
            int(pollux)
        )),
        "{headline}"
    );
    assert!(
        headline.contains(&format!("({:.2}×)", eb / pollux)),
        "{headline}"
    );
    let gap = line_with(&report, "Learned against oracle");
    assert!(
        gap.contains(&format!("averages {} s", int(oracle))),
        "{gap}"
    );
    assert!(gap.contains(&format!("{:.2}×", eb / oracle)), "{gap}");
    assert!(
        gap.contains(&format!("+{} s on the mean", int(eb - oracle))),
        "{gap}"
    );

    // Elastic-batch below Pollux's published mean: the numbers and the direction word follow.
    let faster = |i: usize, n: usize| {
        let (jct, realloc) = value(i, n);
        (if i == 0 { 2000.0 + n as f64 } else { jct }, realloc)
    };
    let rows = pollux_rows(&options.workloads, &faster);
    let report2 = pollux_report(&options, &rows);
    let eb2 = mean_of(&rows, PolluxRun::ElasticBatch);
    let headline2 = line_with(&report2, "Learned elastic-batch against Pollux");
    assert_ne!(headline, headline2);
    let down = (1.0 - eb2 / pollux) * 100.0;
    assert!(
        headline2.contains(&format!(
            "averages {} s over workloads 1–8, {down:.0} % lower than Pollux's published",
            int(eb2)
        )),
        "{headline2}"
    );
    assert!(!headline2.contains(&int(eb)), "{headline2}");
}

#[test]
fn the_pollux_report_compares_with_published_results_on_the_same_workloads() {
    let options = PolluxOptions {
        workloads: vec![2, 5],
    };
    let rows = pollux_rows(&options.workloads, &|i, n| {
        (4000.0 + 31.0 * i as f64 + n as f64, 10)
    });
    let report = pollux_report(&options, &rows);
    let pollux = (3323.0 + 2674.0) / 2.0;
    assert_eq!(
        Published::Pollux.mean_over(&options.workloads),
        Some(pollux)
    );
    let headline = line_with(&report, "Learned elastic-batch against Pollux");
    assert!(headline.contains("over workloads 2 and 5"), "{headline}");
    assert!(
        headline.contains(&format!("published {} s", int(pollux))),
        "{headline}"
    );
    assert!(report.contains("| *Pollux artifact, Pollux (published)* | 2998 | 3323, 2674 | — |"));
}

#[test]
fn no_pollux_prose_figure_survives_a_change_of_the_rows() {
    let options = PolluxOptions::default();
    let a = pollux_report(
        &options,
        &pollux_rows(&options.workloads, &|i, n| {
            (
                2500.0 + 173.0 * i as f64 + 41.0 * n as f64,
                40 + 3 * i as u64 + n as u64,
            )
        }),
    );
    let b = pollux_report(
        &options,
        &pollux_rows(&options.workloads, &|i, n| {
            (
                2711.0 + 151.0 * i as f64 + 67.0 * ((n * 5 + i) % 8) as f64,
                61 + 2 * i as u64 + 3 * n as u64,
            )
        }),
    );
    // The check itself sees a typed-in figure, signed or not, and skips table rows.
    assert_eq!(
        unchanged(
            "from about 2,830 s (+4.5 %) to 1.2×\n| 7 s |",
            "from about 2,830 s (+4.5 %) to 1.3×\n| 7 s |"
        ),
        ["2,830 s", "+4.5 %"].map(String::from).into()
    );
    let heading = "## Headline";
    let same = unchanged(from(&a, heading), from(&b, heading));
    // What may stay: Pollux's published results and the settings the prose explains.
    let mut allowed: BTreeSet<String> = ["30 s", "60 s"].map(String::from).into();
    for p in [
        Published::OptimusOracle,
        Published::Tiresias,
        Published::Pollux,
    ] {
        allowed.insert(format!(
            "{} s",
            int(p.mean_over(&options.workloads).unwrap())
        ));
        for v in p.per_workload() {
            allowed.insert(format!("{} s", int(*v)));
        }
    }
    let typed: Vec<&String> = same.difference(&allowed).collect();
    assert!(
        typed.is_empty(),
        "figures that do not follow the rows: {typed:?}"
    );
}

fn sweep_point(rate: f64, k: f64, with_static: bool) -> SweepPoint {
    let eb = summary(
        "elastic-batch",
        1000.0 + 37.0 * k,
        280 - 3 * k as usize,
        20 + 3 * k as usize,
        900,
    );
    let eg = summary(
        "elastic-gpu",
        2500.0 + 51.0 * k,
        250 - 5 * k as usize,
        50 + 5 * k as usize,
        700,
    );
    let st = summary(
        "static",
        2600.0 + 23.0 * k,
        245 - 4 * k as usize,
        55 + 4 * k as usize,
        0,
    );
    let mut summaries = vec![eb, eg];
    if with_static {
        summaries.push(st);
    }
    let common_by_model: BTreeMap<String, (f64, f64, usize)> = [
        ("ncf".to_string(), (300.0 + k, 1500.0 + 7.0 * k, 100)),
        (
            "cifar10".to_string(),
            (1200.0 + 3.0 * k, 2000.0 + 11.0 * k, 80),
        ),
        ("yolov3".to_string(), (1800.0, 2300.0 + 13.0 * k, 5)),
    ]
    .into();
    SweepPoint {
        rate_per_h: rate,
        summaries,
        dropped_by_model: BTreeMap::new(),
        common_avg_jct_s: (900.0 + 29.0 * k, 2400.0 + 43.0 * k),
        common_jobs: 185,
        common_by_model,
    }
}

fn paper_inputs(k0: f64) -> (PaperOptions, Vec<SweepPoint>, Vec<AblationRow>) {
    let options = PaperOptions {
        rates_per_h: vec![2.0, 8.0, 32.0],
        ablation_rates: vec![8.0, 32.0],
        ..PaperOptions::default()
    };
    let points = options
        .rates_per_h
        .iter()
        .enumerate()
        .map(|(k, &r)| sweep_point(r, k0 + 2.0 * k as f64, true))
        .collect();
    let ablation = [
        "this setup",
        "objective: raw throughput",
        "restart cost: 0 s",
    ]
    .iter()
    .enumerate()
    .map(|(v, label)| AblationRow {
        label: label.to_string(),
        base: v == 0,
        points: options
            .ablation_rates
            .iter()
            .enumerate()
            .map(|(k, &r)| sweep_point(r, k0 + 5.0 * v as f64 + k as f64, false))
            .collect(),
    })
    .collect();
    (options, points, ablation)
}

#[test]
fn the_paper_discussion_is_computed_from_the_sweep() {
    let (options, points, ablation) = paper_inputs(0.0);
    let report = paper_report(&options, &points, &ablation);
    let drops = line_with(&report, "**Completions and drops.**");
    assert!(
        drops.contains("per rate (jobs/h): 20 / 50 at 2, 26 / 60 at 8, 32 / 70 at 32."),
        "{drops}"
    );
    // Jobs completed eb / eg: 280/250, 274/240, 268/230; the most at 32 jobs/h.
    let most = 268.0 / 230.0;
    assert!(
        drops.contains(&format!(
            "{:.2}–{:.2}× (most {most:.2}× at 32 jobs/h)",
            280.0 / 250.0,
            most
        )),
        "{drops}"
    );
    // ncf pooled over the rates: eg / eb on jobs both completed.
    // (points at k = 0, 2, 4: eb 300 + k, eg 1500 + 7k, 100 jobs each).
    let ncf = (1500.0 + 1514.0 + 1528.0) / (300.0 + 302.0 + 304.0);
    let gain = line_with(&report, "**Where the JCT gain comes from.**");
    assert!(
        gain.contains(&format!("ncf {ncf:.2}× (300 jobs)")),
        "{gain}"
    );
    // The ablation line names this setup's mean ratio and every variant.
    let abl = line_with(&report, "**Which setting matters");
    let base_j = ((2500.0 / 1000.0) + (2551.0 / 1037.0)) / 2.0;
    assert!(abl.contains(&format!("average JCT {base_j:.2}×")), "{abl}");
    assert!(abl.contains("*objective: raw throughput*") && abl.contains("*restart cost: 0 s*"));

    let (options, points, ablation) = paper_inputs(3.0);
    let report2 = paper_report(&options, &points, &ablation);
    let drops2 = line_with(&report2, "**Completions and drops.**");
    assert!(
        drops2.contains("per rate (jobs/h): 29 / 65 at 2,"),
        "{drops2}"
    );
}

#[test]
fn no_paper_prose_figure_survives_a_change_of_the_sweep() {
    let (options, points, ablation) = paper_inputs(0.0);
    let a = paper_report(&options, &points, &ablation);
    let (options, points, ablation) = paper_inputs(4.0);
    let b = paper_report(&options, &points, &ablation);
    let heading = "## What drives the result";
    let same = unchanged(from(&a, heading), from(&b, heading));
    // The paper's published claims, √8 (the batch window's top, a setting) and the mix's share
    // of its most frequent model (an input).
    // "0 s" is the ablation's label "restart cost: 0 s".
    let allowed: BTreeSet<String> = ["~2×", "~3×", "~10×", "10×", "8×", "2.83×", "39 %", "0 s"]
        .map(String::from)
        .into();
    let typed: Vec<&String> = same.difference(&allowed).collect();
    assert!(
        typed.is_empty(),
        "figures that do not follow the sweep: {typed:?}"
    );
}
