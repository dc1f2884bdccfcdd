//! The prose of the reproduction reports is computed from the rows of the run that prints it:
//! fabricated rows with known values, no simulation.

use std::collections::{BTreeMap, BTreeSet};

use dlscale_sim::reproduce::{
    paper_report, pollux_report, AblationRow, Load, PaperOptions, PolluxOptions, PolluxRow,
    PolluxRun, Published, SweepPoint, TARGET_AGAINST_POLLUX, TARGET_LOADS,
};
use dlscale_sim::{SimConfig, Summary};

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
        rebatches: 0,
        decisions: 100,
        optimizer_avg_s: 1e-4,
        optimizer_max_s: 1e-3,
        wall_s: 0.1,
        nodes: 16,
        gpus_per_node: 4,
        gpus: 64,
        teams: Vec::new(),
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

/// One row per run and load, each workload's average JCT from `value(run index, load, n)`.
fn pollux_rows(
    options: &PolluxOptions,
    value: &dyn Fn(usize, Load, usize) -> f64,
) -> Vec<PolluxRow> {
    let mut rows = Vec::new();
    for &load in &options.loads {
        for (i, id) in PolluxRun::ALL.into_iter().enumerate() {
            rows.push(PolluxRow {
                id,
                load,
                summaries: options
                    .workloads
                    .iter()
                    .map(|&n| summary("p", value(i, load, n), 100, 0, 10))
                    .collect(),
            });
        }
    }
    rows
}

fn mean_of(rows: &[PolluxRow], id: PolluxRun, load: Load) -> f64 {
    let r = rows.iter().find(|r| r.id == id && r.load == load).unwrap();
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

/// Fabricated rows: the fidelity runs at the published value times `1 + dev(load, n)` (a
/// deviation), elastic-batch at a multiple of Pollux's.
fn fabricated(
    options: &PolluxOptions,
    dev: &dyn Fn(Load, usize) -> f64,
    eb: &dyn Fn(usize, usize) -> f64,
) -> Vec<PolluxRow> {
    pollux_rows(options, &|i, load, n| {
        let id = PolluxRun::ALL[i];
        let published = id.compared_with().on(load, n).unwrap();
        match id {
            PolluxRun::Tiresias | PolluxRun::OptimusOracle => {
                published * (1.0 + dev(load, n) * (i + 1) as f64)
            }
            _ => published * eb(i, n),
        }
    })
}

#[test]
fn the_pollux_fidelity_table_is_computed_from_the_rows() {
    let options = PolluxOptions {
        workloads: vec![2, 5, 7],
        loads: vec![Load::One, Load::Two],
    };
    // Tiresias +1 % except +4 % on workload 5 at 2× load; Optimus twice that.
    let dev = |load: Load, n: usize| {
        if load == Load::Two && n == 5 {
            0.04
        } else {
            0.01
        }
    };
    let rows = fabricated(&options, &dev, &|_, _| 0.9);
    let report = pollux_report(&options, &rows);
    let one = line_with(&report, "Fidelity at 1× load");
    assert!(
        one.contains("Tiresias is within ±3.0 % of the artifact on 3 of 3 workloads"),
        "{one}"
    );
    // Optimus at +2 % everywhere at 1×.
    assert!(
        one.contains("Optimus+Oracle is within ±3.0 % of the artifact on 3 of 3"),
        "{one}"
    );
    let two = line_with(&report, "Fidelity at 2× load");
    assert!(
        two.contains("on 2 of 3 workloads (the largest deviation +4.00 % on workload 5"),
        "{two}"
    );
    assert!(
        two.contains("Optimus+Oracle is within ±3.0 % of the artifact on 2 of 3"),
        "{two}"
    );
    let all = line_with(&report, "**Fidelity.**");
    assert!(all.contains("10 of 12 cells"), "{all}");
    assert!(
        all.contains("+8.00 % (Optimus+Oracle, workload 5, 2× load"),
        "{all}"
    );
    let t5 = Published::Tiresias.on(Load::Two, 5).unwrap();
    assert!(report.contains(&format!(
        "| 5 | {:.1} | {t5:.1} | +4.00 % | **no** |",
        t5 * 1.04
    )));
}

#[test]
fn the_pollux_elastic_batch_rows_are_computed_from_the_rows() {
    let options = PolluxOptions {
        workloads: vec![1, 3],
        loads: vec![Load::Half],
    };
    // Interval-only 0.95× Pollux on workload 1 and 1.05× on 3; event-driven 0.8× on both;
    // with noise seed 2 event-driven at 0.75×, behind interval-only's 0.7×.
    let eb = |i: usize, n: usize| match (PolluxRun::ALL[i], n) {
        (PolluxRun::ElasticBatchInterval, 1) => 0.95,
        (PolluxRun::ElasticBatchInterval, _) => 1.05,
        (PolluxRun::ElasticBatchEvents, _) => 0.8,
        (PolluxRun::ElasticBatchEventsSeed(2), _) => 0.75,
        (PolluxRun::ElasticBatchOracleNoLengths, _) => 0.6,
        _ => 0.7,
    };
    let rows = fabricated(&options, &|_, _| 0.0, &eb);
    let report = pollux_report(&options, &rows);
    let pollux = Published::Pollux
        .mean_over(Load::Half, &options.workloads)
        .unwrap();
    let interval = mean_of(&rows, PolluxRun::ElasticBatchInterval, Load::Half);
    let line = line_with(
        &report,
        "Learned elastic-batch, interval-only, at 0.5× load",
    );
    assert!(
        line.contains(&format!("averages {} s", int(interval))),
        "{line}"
    );
    assert!(
        line.contains(&format!("({:.2}×", interval / pollux)),
        "{line}"
    );
    assert!(
        line.contains(&format!("Pollux's published {} s", int(pollux))),
        "{line}"
    );
    assert!(
        line.contains("lower than Pollux on 1 of 2 workloads"),
        "{line}"
    );
    let events = line_with(&report, "Learned elastic-batch, event-driven");
    assert!(events.contains("20 % lower than Pollux's"), "{events}");
    assert!(
        events.contains("lower than Pollux on 2 of 2 workloads"),
        "{events}"
    );
    assert!(
        line_with(&report, "exact remaining work from the start averages").contains("not a result")
    );
    let unknown = line_with(
        &report,
        "Learned elastic-batch, no job declaring its length",
    );
    assert!(unknown.contains("lower than Pollux on"), "{unknown}");
    // The other noise seeds' rows are at 0.7× Pollux: the mean over seeds and its range.
    let seeds: Vec<f64> = [PolluxRun::ElasticBatchInterval]
        .into_iter()
        .chain(PolluxRun::OTHER_SEEDS.map(PolluxRun::ElasticBatchIntervalSeed))
        .map(|id| mean_of(&rows, id, Load::Half))
        .collect();
    let over = line_with(&report, "Over measurement-noise seeds 1, 2 and 3");
    let lo = seeds.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = seeds.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    assert!(
        over.contains(&format!(
            "{} s on average, from {} s to {} s",
            int(seeds.iter().sum::<f64>() / 3.0),
            int(lo),
            int(hi)
        )),
        "{over}"
    );
    // Event-driven against interval-only, seed by seed: ahead with seeds 1 and 3.
    let mean_over_seeds = |first: PolluxRun, other: fn(u64) -> PolluxRun| {
        std::iter::once(first)
            .chain(PolluxRun::OTHER_SEEDS.map(other))
            .map(|id| mean_of(&rows, id, Load::Half))
            .sum::<f64>()
            / 3.0
    };
    let against = line_with(
        &report,
        "Event-driven against interval-only over noise seeds 1, 2 and 3",
    );
    assert!(
        against.contains(&format!(
            "{} s against {} s on average",
            int(mean_over_seeds(
                PolluxRun::ElasticBatchEvents,
                PolluxRun::ElasticBatchEventsSeed
            )),
            int(mean_over_seeds(
                PolluxRun::ElasticBatchInterval,
                PolluxRun::ElasticBatchIntervalSeed
            ))
        )),
        "{against}"
    );
    assert!(
        against.contains("event-driven is as fast or faster with 2 of 3 seeds"),
        "{against}"
    );
    // Interval-only averages 1.0× Pollux's mean here: it misses 0.9× by a tenth of it and
    // more; event-driven, at 0.8×, meets it.
    let target = TARGET_AGAINST_POLLUX * pollux;
    let verdict = line_with(&report, "Target: at most 0.90× Pollux's published mean");
    assert!(
        verdict.contains(&format!("{} s.**", int(target))),
        "{verdict}"
    );
    assert!(
        verdict.contains(&format!(
            "interval-only misses it by {} s",
            int(interval - target)
        )),
        "{verdict}"
    );
    assert!(
        verdict.contains(&format!(
            "event-driven meets it ({} s)",
            int(mean_of(&rows, PolluxRun::ElasticBatchEvents, Load::Half))
        )),
        "{verdict}"
    );
    // Perfect learning without lengths at 0.6×, the equal-information run at 0.7×: learning
    // costs the difference.
    let (oracle, equal) = (
        mean_of(&rows, PolluxRun::ElasticBatchOracleNoLengths, Load::Half),
        mean_of(&rows, PolluxRun::ElasticBatchPolluxInformation, Load::Half),
    );
    let perfect = line_with(&report, "from the start but no job's length");
    assert!(
        perfect.contains(&format!(
            "averages {} s ({:.2}× Pollux's published mean)",
            int(oracle),
            oracle / pollux
        )),
        "{perfect}"
    );
    assert!(
        perfect.contains(&format!(
            "costs the equal-information run {} s ({:.0} %) against it",
            int(equal - oracle),
            (equal / oracle - 1.0) * 100.0
        )),
        "{perfect}"
    );
    // Without the other seeds' rows there is no line over seeds.
    let one_seed: Vec<PolluxRow> = rows
        .iter()
        .filter(|r| !r.id.is_other_seed())
        .cloned()
        .collect();
    let one_seed = pollux_report(&options, &one_seed);
    assert!(!one_seed.contains("Over measurement-noise seeds"));
    assert!(!one_seed.contains("Event-driven against interval-only"));
    // At a load the issue sets no target at, no target line.
    let no_target = PolluxOptions {
        workloads: vec![1, 3],
        loads: vec![Load::OneAndHalf],
    };
    assert!(!TARGET_LOADS.contains(&Load::OneAndHalf));
    let report = pollux_report(&no_target, &fabricated(&no_target, &|_, _| 0.0, &eb));
    assert!(report.contains("Learned elastic-batch, interval-only, at 1.5× load"));
    assert!(!report.contains("Target:"), "{report}");
}

#[test]
fn every_other_noise_seed_is_a_run_and_a_json_key() {
    for seed in PolluxRun::OTHER_SEEDS {
        for (id, key) in [
            (PolluxRun::ElasticBatchIntervalSeed(seed), "interval"),
            (PolluxRun::ElasticBatchEventsSeed(seed), "events"),
        ] {
            assert!(PolluxRun::ALL.contains(&id), "{seed}");
            assert!(id.is_other_seed());
            assert_eq!(id.noise_seed(), Some(seed));
            assert_eq!(
                serde_json::to_value(id).unwrap(),
                format!("elastic-batch-{key}-seed-{seed}")
            );
        }
    }
    // The default run's seed is none of the others.
    let default = PolluxRun::ElasticBatchInterval.noise_seed().unwrap();
    assert!(!PolluxRun::OTHER_SEEDS.contains(&default));
    assert_eq!(PolluxRun::ElasticBatchOracle.noise_seed(), None);
}

#[test]
fn no_pollux_prose_figure_survives_a_change_of_the_rows() {
    let options = PolluxOptions::default();
    let a = pollux_report(
        &options,
        &fabricated(
            &options,
            &|load, n| 0.001 * (n as f64) + if load == Load::Two { 0.013 } else { 0.002 },
            &|i, n| 0.8 + 0.03 * i as f64 + 0.01 * n as f64,
        ),
    );
    let b = pollux_report(
        &options,
        &fabricated(
            &options,
            &|load, n| {
                -0.0017 * (((n * 3) % 8) as f64) - if load == Load::Half { 0.021 } else { 0.004 }
            },
            &|i, n| 0.86 + 0.027 * i as f64 + 0.013 * ((n * 5 + i) % 8) as f64,
        ),
    );
    // The check itself sees a typed-in figure, signed or not, and skips table rows.
    assert_eq!(
        unchanged(
            "from about 2,830 s (+4.5 %) to 1.2×\n| 7 s |",
            "from about 2,830 s (+4.5 %) to 1.3×\n| 7 s |"
        ),
        ["2,830 s", "+4.5 %"].map(String::from).into()
    );
    let same = unchanged(&a, &b);
    // What may stay: Pollux's published results and the target against them, the settings the
    // prose explains, the bound and the loads' names.
    let scale = format!(
        "{} s",
        int(SimConfig::pollux().settings.weighing.remaining_scale_s)
    );
    let mut allowed: BTreeSet<String> = ["30 s", "60 s", "±3.0 %", "0.5×", "1×", "1.5×", "2×"]
        .map(String::from)
        .into();
    allowed.insert(format!("{TARGET_AGAINST_POLLUX:.2}×"));
    for load in TARGET_LOADS {
        let pollux = Published::Pollux
            .mean_over(load, &options.workloads)
            .unwrap();
        allowed.insert(format!("{} s", int(TARGET_AGAINST_POLLUX * pollux)));
    }
    allowed.insert(scale);
    for p in [
        Published::OptimusOracle,
        Published::Tiresias,
        Published::Pollux,
    ] {
        for load in Load::ALL {
            allowed.insert(format!(
                "{} s",
                int(p.mean_over(load, &options.workloads).unwrap())
            ));
            for &n in &options.workloads {
                allowed.insert(format!("{} s", int(p.on(load, n).unwrap())));
            }
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
