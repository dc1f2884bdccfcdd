//! The Pollux yardstick's `report.md`: per load, the fidelity table (Tiresias and
//! Optimus+Oracle against the artifact) and elastic-batch against Pollux; prose whose every
//! measured figure is computed from the rows of the run.

use std::fmt::Write as _;

use crate::config::SimConfig;
use crate::workload::BUNDLED_POLLUX_WORKLOADS;

use super::pollux::*;
use super::pollux_loads::Load;
use super::words::*;

/// The fidelity bound of issue 10: within ±3 % of the artifact on every workload.
pub const FIDELITY_BOUND: f64 = 0.03;

/// The target of issue 10 for learned elastic-batch: a mean average JCT of at most this
/// fraction of Pollux's published one, at each of [`TARGET_LOADS`].
pub const TARGET_AGAINST_POLLUX: f64 = 0.9;

/// The loads issue 10 sets [`TARGET_AGAINST_POLLUX`] at.
pub const TARGET_LOADS: [Load; 3] = [Load::Half, Load::One, Load::Two];

/// Rows of one Pollux run at one load, looked up by [`PolluxRun`], with the run's workloads.
struct LoadRows<'a> {
    rows: &'a [PolluxRow],
    load: Load,
    workloads: &'a [usize],
}

impl<'a> LoadRows<'a> {
    fn get(&self, id: PolluxRun) -> Option<&'a PolluxRow> {
        self.rows.iter().find(|r| {
            r.id == id && r.load == self.load && r.summaries.len() == self.workloads.len()
        })
    }

    /// `(workload, ours s, published s)` for each workload, against what `id` is compared with.
    fn against_published(&self, id: PolluxRun) -> Option<Vec<(usize, f64, f64)>> {
        let row = self.get(id)?;
        self.workloads
            .iter()
            .zip(&row.summaries)
            .map(|(&n, s)| Some((n, s.avg_jct_s, id.compared_with().on(self.load, n)?)))
            .collect()
    }

    /// The published mean of `p` over these workloads at this load, s.
    fn published(&self, p: Published) -> Option<f64> {
        p.mean_over(self.load, self.workloads)
    }

    /// "workloads 1–8" or "workloads 2 and 5" or "workload 3".
    fn named(&self) -> String {
        let all: Vec<usize> = (1..=BUNDLED_POLLUX_WORKLOADS).collect();
        if self.workloads == all.as_slice() {
            format!("workloads 1–{BUNDLED_POLLUX_WORKLOADS}")
        } else {
            workloads_named(self.workloads)
        }
    }
}

/// "workload 3", "workloads 2 and 5", "workloads 2, 4 and 5".
fn workloads_named(ns: &[usize]) -> String {
    match ns {
        [] => "no workload".to_string(),
        [one] => format!("workload {one}"),
        _ => format!("workloads {}", and_list(ns)),
    }
}

/// A deviation from the published value, two decimals: "+0.04 %", "−2.61 %".
fn deviation(ours: f64, published: f64) -> String {
    let p = (ours / published - 1.0) * 100.0;
    let magnitude = format!("{:.2} %", p.abs());
    if magnitude == "0.00 %" {
        "±0.00 %".to_string()
    } else if p > 0.0 {
        format!("+{magnitude}")
    } else {
        format!("−{magnitude}")
    }
}

/// Whether `ours` is within the fidelity bound of `published`.
fn within(ours: f64, published: f64) -> bool {
    (ours / published - 1.0).abs() <= FIDELITY_BOUND
}

/// How many cells of `cells` are within the bound, and the one that deviates most.
fn fidelity_of(cells: &[(usize, f64, f64)]) -> (usize, Option<(usize, f64, f64)>) {
    let inside = cells.iter().filter(|c| within(c.1, c.2)).count();
    let dev = |c: &(usize, f64, f64)| (c.1 / c.2 - 1.0).abs();
    let worst = cells
        .iter()
        .copied()
        .max_by(|a, b| dev(a).total_cmp(&dev(b)));
    (inside, worst)
}

/// The report of [`reproduce_pollux`] for `rows` (one per [`PolluxRun`] and load, summaries in
/// `options.workloads` order). Every measured figure in it is computed from `rows`; the other
/// figures are settings or Pollux's published results, labelled as such.
pub fn pollux_report(options: &PolluxOptions, rows: &[PolluxRow]) -> String {
    let mut md = String::from("# Pollux yardstick\n\n");
    let config = SimConfig::pollux();
    let loads: Vec<String> = options.loads.iter().map(|l| l.to_string()).collect();
    let _ = writeln!(
        md,
        "Workloads {:?} of Pollux's OSDI'21 artifact (bundled) at loads {} under \
         `--preset pollux`: {} nodes × {} GPUs (T4 profiles), decisions every {} only (not on \
         events, as in Pollux's simulator) unless a row says event-driven, {} without progress \
         at every (re)start, goodput progress, Tiresias demoting at {} GPU-s, and the \
         artifact's world: step times by exact placement shape with its batch and accumulation \
         rule, progress in chunks of {} with epoch ends rounded to whole seconds; Tiresias and \
         Optimus+Oracle placed by its most-free-node rule (no job moved) with its job rules, \
         dlscale's own policies by dlscale's placement (with its defragmenting repack, up to {} \
         moves per consolidated job). Elastic-batch learns each job's model from its \
         simulated reports unless a row says oracle. Each job declares its length (its \
         progress target, as a job file's epochs do) unless a row says otherwise, and \
         elastic-batch weighs jobs shortest remaining first (exponent {}, scale {}): its \
         remaining work is that length less the progress it reported. Published numbers are \
         the artifact's `results-jobload` averages.\n",
        options.workloads,
        loads.join(", "),
        config.cluster.nodes,
        config.cluster.gpus_per_node,
        secs(config.interval_s.unwrap_or(0.0)),
        secs(config.restart_delay_s),
        int(config.policy_options.tiresias_threshold_gpu_s),
        secs(config.interval_s.unwrap_or(0.0)),
        config.defragment_moves_per_job,
        config.settings.weighing.remaining_exponent,
        secs(config.settings.weighing.remaining_scale_s),
    );
    let mut all_cells: Vec<(Load, &str, (usize, f64, f64))> = Vec::new();
    for &load in &options.loads {
        let r = LoadRows {
            rows,
            load,
            workloads: &options.workloads,
        };
        let _ = writeln!(md, "## {load} load\n");
        md.push_str(&fidelity_section(&r));
        md.push_str(&elastic_section(&r));
        let _ = writeln!(
            md,
            "![average JCT per workload, {load} load]({}.svg)\n",
            plot_name(load)
        );
        for id in [PolluxRun::Tiresias, PolluxRun::OptimusOracle] {
            if let Some(cells) = r.against_published(id) {
                all_cells.extend(
                    cells
                        .into_iter()
                        .map(|c| (load, id.compared_with().name(), c)),
                );
            }
        }
    }
    if options.loads.len() > 1 && !all_cells.is_empty() {
        let inside = all_cells
            .iter()
            .filter(|(_, _, c)| within(c.1, c.2))
            .count();
        let dev = |c: &(usize, f64, f64)| (c.1 / c.2 - 1.0).abs();
        if let Some((load, name, (n, ours, theirs))) = all_cells
            .iter()
            .max_by(|a, b| dev(&a.2).total_cmp(&dev(&b.2)))
        {
            let _ = writeln!(
                md,
                "## Over all loads\n\n- **Fidelity.** {inside} of {} cells (Tiresias and \
                 Optimus+Oracle, every workload and load) are within ±{} of the artifact; the \
                 largest deviation is {} ({name}, workload {n}, {load} load: {} against {}).\n",
                all_cells.len(),
                pct(100.0 * FIDELITY_BOUND),
                deviation(*ours, *theirs),
                secs(*ours),
                secs(*theirs),
            );
        }
    }
    md
}

/// The fidelity table of one load and what it says.
fn fidelity_section(r: &LoadRows) -> String {
    let (Some(t), Some(o)) = (
        r.against_published(PolluxRun::Tiresias),
        r.against_published(PolluxRun::OptimusOracle),
    ) else {
        return String::new();
    };
    let bound = pct(100.0 * FIDELITY_BOUND);
    let mut md = format!(
        "Fidelity: Tiresias and Optimus+Oracle (an oracle baseline) under the preset against \
         Pollux's artifact.\n\n| workload | Tiresias (s) | artifact (s) | deviation | within \
         ±{bound} | Optimus+Oracle (s) | artifact (s) | deviation | within ±{bound} |\n\
         |---|---|---|---|---|---|---|---|---|\n"
    );
    let yes = |ours: f64, theirs: f64| {
        if within(ours, theirs) {
            "yes"
        } else {
            "**no**"
        }
    };
    for (&(n, to, tp), &(_, oo, op)) in t.iter().zip(&o) {
        let _ = writeln!(
            md,
            "| {n} | {to:.1} | {tp:.1} | {} | {} | {oo:.1} | {op:.1} | {} | {} |",
            deviation(to, tp),
            yes(to, tp),
            deviation(oo, op),
            yes(oo, op)
        );
    }
    let mut bullets = Vec::new();
    for (name, cells) in [("Tiresias", &t), ("Optimus+Oracle", &o)] {
        let (inside, worst) = fidelity_of(cells);
        if let Some((n, ours, theirs)) = worst {
            bullets.push(format!(
                "{name} is within ±{bound} of the artifact on {inside} of {} workloads (the \
                 largest deviation {} on workload {n}: {} against {})",
                cells.len(),
                deviation(ours, theirs),
                secs(ours),
                secs(theirs)
            ));
        }
    }
    let _ = writeln!(
        md,
        "\n- **Fidelity at {} load.** {}.\n",
        r.load,
        bullets.join("; ")
    );
    md
}

/// Elastic-batch's rows of one load against Pollux's published results, and what they say.
fn elastic_section(r: &LoadRows) -> String {
    use PolluxRun as R;
    let Some(pollux) = r.published(Published::Pollux) else {
        return String::new();
    };
    let mut md = String::from(
        "Elastic-batch against Pollux's published results.\n\n| run | mean avg JCT (s) | \
         against Pollux | workloads below Pollux | per workload (s) |\n|---|---|---|---|---|\n",
    );
    for id in R::ALL
        .into_iter()
        .filter(|id| id.compared_with() == Published::Pollux)
    {
        let (Some(row), Some(cells)) = (r.get(id), r.against_published(id)) else {
            continue;
        };
        let per: Vec<String> = cells.iter().map(|c| format!("{:.0}", c.1)).collect();
        let below = cells.iter().filter(|c| c.1 < c.2).count();
        let mean = row.mean_avg_jct_s();
        let _ = writeln!(
            md,
            "| {} | {mean:.0} | {} | {below} of {} | {} |",
            id.label(),
            times(mean / pollux),
            cells.len(),
            per.join(", ")
        );
    }
    let per: Option<Vec<String>> = r
        .workloads
        .iter()
        .map(|&n| Published::Pollux.on(r.load, n).map(|v| format!("{v:.0}")))
        .collect();
    if let Some(per) = per {
        let _ = writeln!(
            md,
            "| *Pollux artifact, Pollux (published)* | {pollux:.0} | — | — | {} |",
            per.join(", ")
        );
    }
    let learned = |id: R| -> Option<String> {
        let mean = r.get(id)?.mean_avg_jct_s();
        let cells = r.against_published(id)?;
        let below = cells.iter().filter(|c| c.1 < c.2).count();
        Some(format!(
            "{} ({}, {} Pollux's published {}; lower than Pollux on {below} of {} workloads)",
            secs(mean),
            times(mean / pollux),
            compared(mean, pollux),
            secs(pollux),
            cells.len()
        ))
    };
    let mut bullets = Vec::new();
    if let Some(s) = learned(R::ElasticBatchInterval) {
        bullets.push(format!(
            "- **Learned elastic-batch, interval-only, at {} load.** Over {} it averages {s}.",
            r.load,
            r.named()
        ));
    }
    // The default seed's row first; the line only with it and another seed's.
    let seeds: Vec<(u64, f64)> = std::iter::once(R::ElasticBatchInterval)
        .chain(R::OTHER_SEEDS.map(R::ElasticBatchIntervalSeed))
        .map_while(|id| Some((id.noise_seed()?, r.get(id)?.mean_avg_jct_s())))
        .collect();
    if seeds.len() > 1 {
        let means: Vec<f64> = seeds.iter().map(|s| s.1).collect();
        let (lo, hi) = min_max(&means);
        let named: Vec<u64> = seeds.iter().map(|s| s.0).collect();
        bullets.push(format!(
            "- **Over measurement-noise seeds {}** (interval-only, the first the default): {} on \
             average, from {} to {}.",
            and_list(&named),
            secs(means.iter().sum::<f64>() / means.len() as f64),
            secs(lo),
            secs(hi)
        ));
    }
    if let Some(s) = learned(R::ElasticBatchEvents) {
        bullets.push(format!(
            "- **Learned elastic-batch, event-driven** (deciding on every arrival and \
             completion too, which starts waiting jobs on idle GPUs at once and leaves running \
             jobs to the periodic decisions: `--on-events admit`): {s}."
        ));
    }
    // Event-driven against interval-only, seed by seed, where every seed ran both.
    let pairs: Option<Vec<(u64, f64, f64)>> =
        std::iter::once((R::ElasticBatchEvents, R::ElasticBatchInterval))
            .chain(R::OTHER_SEEDS.into_iter().map(|seed| {
                (
                    R::ElasticBatchEventsSeed(seed),
                    R::ElasticBatchIntervalSeed(seed),
                )
            }))
            .map(|(events, interval)| {
                Some((
                    events.noise_seed()?,
                    r.get(events)?.mean_avg_jct_s(),
                    r.get(interval)?.mean_avg_jct_s(),
                ))
            })
            .collect();
    if let Some(pairs) = pairs {
        let n = pairs.len() as f64;
        let events = pairs.iter().map(|p| p.1).sum::<f64>() / n;
        let interval = pairs.iter().map(|p| p.2).sum::<f64>() / n;
        let seeds: Vec<u64> = pairs.iter().map(|p| p.0).collect();
        bullets.push(format!(
            "- **Event-driven against interval-only over noise seeds {}**: {} against {} on \
             average ({} interval-only); event-driven is as fast or faster with {} of {} seeds.",
            and_list(&seeds),
            secs(events),
            secs(interval),
            compared(events, interval),
            pairs.iter().filter(|p| p.1 <= p.2).count(),
            pairs.len()
        ));
    }
    if let Some(s) = learned(R::ElasticBatchLengthUnknown) {
        bullets.push(format!(
            "- **Learned elastic-batch, no job declaring its length** (interval-only; no \
             remaining work known, so shortest remaining first weighs every job alike): {s}."
        ));
    }
    if let Some(s) = learned(R::ElasticBatchNoFamilies) {
        bullets.push(format!(
            "- **Learned elastic-batch, no model families** (interval-only, lengths declared; \
             each job learns from its own reports alone): {s}."
        ));
    }
    if let Some(s) = learned(R::ElasticBatchPolluxInformation) {
        bullets.push(format!(
            "- **Learned elastic-batch on what Pollux knows** (interval-only; no declared \
             lengths, no model families: each job's reports, age and restarts): {s}."
        ));
    }
    if let Some(s) = learned(R::ElasticBatchWrongLengths) {
        bullets.push(format!(
            "- **Learned elastic-batch, declared lengths wrong by up to {}× either way** \
             (interval-only; each job's length times a factor drawn log-uniformly in that \
             range): {s}.",
            R::WRONG_LENGTHS_BY
        ));
    }
    if let Some(s) = learned(R::ElasticBatchStepTimesOnly) {
        bullets.push(format!(
            "- **Learned elastic-batch from step times only** (interval-only; no report carries \
             a compute time, as from a training program outside the worker library, so learned \
             models fit the plain sum of compute and all-reduce): {s}."
        ));
    }
    if let Some(s) = learned(R::ElasticBatchRestartsToRebatch) {
        bullets.push(format!(
            "- **Learned elastic-batch, every batch change a restart** (interval-only; no job \
             takes a new batch while it runs, as a training program that does not call the \
             worker library's `rebatched()`): {s}."
        ));
    }
    let target = TARGET_AGAINST_POLLUX * pollux;
    let verdicts: Vec<String> = [
        ("interval-only", R::ElasticBatchInterval),
        ("event-driven", R::ElasticBatchEvents),
        ("on what Pollux knows", R::ElasticBatchPolluxInformation),
    ]
    .into_iter()
    .filter(|_| TARGET_LOADS.contains(&r.load))
    .filter_map(|(name, id)| {
        let mean = r.get(id)?.mean_avg_jct_s();
        Some(if mean <= target {
            format!("{name} meets it ({})", secs(mean))
        } else {
            format!(
                "{name} misses it by {} ({}, {})",
                secs(mean - target),
                pct((mean / target - 1.0) * 100.0),
                secs(mean)
            )
        })
    })
    .collect();
    if !verdicts.is_empty() {
        bullets.push(format!(
            "- **Target: at most {} Pollux's published mean, {}.** Learned, {}.",
            times(TARGET_AGAINST_POLLUX),
            secs(target),
            verdicts.join("; ")
        ));
    }
    if let Some(oracle) = r.get(R::ElasticBatchOracle) {
        bullets.push(format!(
            "- Elastic-batch given the bundled models and exact remaining work from the start averages {}: an oracle \
             baseline with knowledge the service lacks, not a result.",
            secs(oracle.mean_avg_jct_s())
        ));
    }
    if let (Some(oracle), Some(equal)) = (
        r.get(R::ElasticBatchOracleNoLengths),
        r.get(R::ElasticBatchPolluxInformation),
    ) {
        let (oracle, equal) = (oracle.mean_avg_jct_s(), equal.mean_avg_jct_s());
        let learning = if equal >= oracle {
            "costs the equal-information run"
        } else {
            "gains the equal-information run"
        };
        bullets.push(format!(
            "- Given the bundled models from the start but no job's length, it averages {} \
             ({} Pollux's published mean): what perfect learning would reach on what Pollux \
             knows, not a result. Learning each job's model from its reports {learning} {} \
             ({}) against it.",
            secs(oracle),
            times(oracle / pollux),
            secs((equal - oracle).abs()),
            pct((equal / oracle - 1.0) * 100.0)
        ));
    }
    let _ = writeln!(md, "\n{}\n", bullets.join("\n"));
    md
}
