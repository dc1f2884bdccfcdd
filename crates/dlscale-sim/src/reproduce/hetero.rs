//! Issue 29's yardstick: Pollux's eight workloads on a fleet of GPU types (by default
//! `examples/fleet.toml`'s T4 + V100 + A100, 64 GPUs), each job's step times on each type from
//! its bundled model's tables (the workloads' jobs are of Pollux's six models, which every
//! bundled type covers: no mapping is needed). Three policies decide, every one learning each
//! job's model per type from its reports and knowing the same (no declared lengths, no shared
//! model families): elastic-batch across types, Sia's policy re-implemented from its paper,
//! Gavel's heterogeneity-aware max-min fairness (fixed GPUs and batch, as published), and
//! type-blind elastic-batch (every type's GPUs alike). Elastic-batch and Sia with an oracle
//! (true models on every type, true gradient statistics, no lengths, as the learned runs) are
//! labelled rows of their own: what each policy is worth with nothing left to learn, and so how
//! much of a gap learning could close. `report.md` holds the table and the targets' verdicts, every figure
//! from this run.

use std::fmt::Write as _;
use std::path::Path;

use dlscale_core::allocator::{PolicyInfo, ELASTIC_BATCH, GAVEL, SIA, TYPE_BLIND};
use dlscale_core::{Fleet, Settings};

use super::jcts::Jcts;
use crate::config::{Knowledge, ProgressMode, Reporting};
use crate::engine::simulate;
use crate::error::{Result, SimError};
use crate::workload::bundled_pollux_workload;
use crate::SimConfig;

/// Issue 29's targets: learned elastic-batch's average JCT at most this fraction of Sia's...
pub const TARGET_AGAINST_SIA: f64 = 0.8;
/// ...and of type-blind elastic-batch's, on every workload.
pub const TARGET_AGAINST_TYPE_BLIND: f64 = 0.67;

/// The runs, in the report's order: (label, policy, with an oracle). The first is measured
/// against the second ([`SIA_RUN`]) and the type-blind one ([`TYPE_BLIND_RUN`]).
const RUNS: [(&str, PolicyInfo, bool); 6] = [
    ("elastic-batch", ELASTIC_BATCH, false),
    ("sia", SIA, false),
    ("gavel", GAVEL, false),
    ("type-blind", TYPE_BLIND, false),
    ("elastic-batch, oracle", ELASTIC_BATCH, true),
    ("sia, oracle", SIA, true),
];
/// Sia's run in [`RUNS`].
const SIA_RUN: usize = 1;
/// Gavel's run in [`RUNS`].
const GAVEL_RUN: usize = 2;
/// Type-blind elastic-batch's run in [`RUNS`].
const TYPE_BLIND_RUN: usize = 3;
/// Elastic-batch's and Sia's oracle runs in [`RUNS`].
const ORACLE_RUNS: (usize, usize) = (4, 5);

/// What `reproduce hetero` runs.
#[derive(Debug, Clone)]
pub struct HeteroOptions {
    /// Pollux's workloads to run (1 to 8).
    pub workloads: Vec<usize>,
    /// The fleet.
    pub fleet: Fleet,
}

/// One workload's average JCTs, s, in [`RUNS`]' order.
#[derive(Debug, Clone, PartialEq)]
pub struct HeteroRow {
    /// Pollux's workload number.
    pub workload: usize,
    /// Its jobs.
    pub jobs: usize,
    /// Average JCT of each run, over the jobs it completed.
    pub avg_jct_s: Vec<f64>,
    /// Jobs each run completed (a fixed-size policy turns away a job no type can hold).
    pub completed: Vec<usize>,
    /// For each run, elastic-batch's average JCT and that run's over the jobs both completed:
    /// what the comparisons are made of (an average without the jobs one run turned away, the
    /// longest, is not the same average).
    pub paired_avg_jct_s: Vec<(f64, f64)>,
}

/// The simulation settings of every run: Pollux's rounds (every 60 s and on events, 30 s
/// restarts, goodput progress) and dlscale's recommended policy settings (Sia takes its restart
/// cost from them), learned from reports that carry no declared length and no model family;
/// an oracle knows every true model and gradient statistic, and no length either.
fn config(fleet: &Fleet, oracle: bool) -> SimConfig {
    SimConfig {
        progress: ProgressMode::Goodput,
        settings: Settings::recommended(),
        knowledge: if oracle {
            Knowledge::Oracle { lengths: false }
        } else {
            Knowledge::Learned(Reporting {
                families: false,
                declares_length: false,
                ..Reporting::default()
            })
        },
        ..SimConfig::default()
    }
    .on_fleet(fleet.clone())
}

/// Runs every workload of `options` under every run, writes `report.md` into `out_dir` and
/// returns the rows.
pub fn reproduce_hetero(
    out_dir: &Path,
    options: &HeteroOptions,
    on_progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<HeteroRow>> {
    std::fs::create_dir_all(out_dir).map_err(|e| SimError::io(out_dir, e))?;
    let total = options.workloads.len() * RUNS.len();
    let mut rows = Vec::new();
    for &n in &options.workloads {
        let workload = bundled_pollux_workload(n)?;
        let mut runs: Vec<Jcts> = Vec::new();
        for (_, policy, oracle) in RUNS {
            let config = config(&options.fleet, oracle);
            config.validate()?;
            let mut jcts = Jcts::default();
            simulate(&workload, &config, policy, &mut jcts)?;
            runs.push(jcts);
            on_progress(rows.len() * RUNS.len() + runs.len(), total);
        }
        rows.push(HeteroRow {
            workload: n,
            jobs: workload.jobs.len(),
            avg_jct_s: runs.iter().map(Jcts::mean).collect(),
            completed: runs.iter().map(|run| run.0.len()).collect(),
            paired_avg_jct_s: runs
                .iter()
                .map(|other| {
                    let (ours, theirs, _) = runs[0].paired(other);
                    (ours, theirs)
                })
                .collect(),
        });
    }
    let path = out_dir.join("report.md");
    std::fs::write(&path, hetero_report(&options.fleet, &rows))
        .map_err(|e| SimError::io(&path, e))?;
    Ok(rows)
}

/// The report of [`reproduce_hetero`]'s `rows`.
pub fn hetero_report(fleet: &Fleet, rows: &[HeteroRow]) -> String {
    let types: Vec<String> = fleet
        .pools()
        .iter()
        .zip(fleet.capacities())
        .map(|(p, gpus)| format!("{gpus} × {}", p.name))
        .collect();
    let mut out = format!(
        "# Mixed fleet: Pollux's workloads on {} ({} GPUs)\n\n",
        types.join(" + "),
        fleet.total_gpus()
    );
    out.push_str(
        "Each job's step times on each type are its bundled model's tables there (measured where \
         a public source measured them, else T4's scaled by the type's speed). Every learned run \
         knew the same: its jobs' reports, per type, with no declared length and no model \
         family; each job's models on types it has not run on follow from the bundled types' \
         speed ratios. The oracle rows knew every job's true model on every type and its true \
         gradient statistics, and no length either.\n\n",
    );
    // Each learned run against elastic-batch: Sia, Gavel and type-blind.
    let against = [SIA_RUN, GAVEL_RUN, TYPE_BLIND_RUN];
    let _ = write!(out, "| workload |");
    for (label, _, _) in RUNS {
        let _ = write!(out, " {label}: avg JCT (s) |");
    }
    for &k in &against {
        let _ = write!(out, " vs {} |", RUNS[k].0);
    }
    out.push_str("\n|---|");
    out.push_str(&"---:|".repeat(RUNS.len() + against.len()));
    out.push('\n');
    let ratio = |row: &HeteroRow, k: usize| {
        let (ours, theirs) = row.paired_avg_jct_s[k];
        ours / theirs
    };
    for row in rows {
        let _ = write!(out, "| {} |", row.workload);
        for jct in &row.avg_jct_s {
            let _ = write!(out, " {jct:.0} |");
        }
        for &k in &against {
            let _ = write!(out, " {:.3}× |", ratio(row, k));
        }
        out.push('\n');
    }
    let mean = |k: usize| rows.iter().map(|r| r.avg_jct_s[k]).sum::<f64>() / rows.len() as f64;
    let _ = write!(out, "| mean |");
    for k in 0..RUNS.len() {
        let _ = write!(out, " {:.0} |", mean(k));
    }
    // Over the workloads, each comparison's own pairs of averages.
    let paired_mean = |k: usize, side: fn(&(f64, f64)) -> f64| {
        rows.iter()
            .map(|r| side(&r.paired_avg_jct_s[k]))
            .sum::<f64>()
            / rows.len() as f64
    };
    for &k in &against {
        let _ = write!(
            out,
            " {:.3}× |",
            paired_mean(k, |p| p.0) / paired_mean(k, |p| p.1)
        );
    }
    out.push_str("\n\n");
    // An average over fewer jobs is not the same average: each comparison is over the jobs
    // both runs completed; say where a run completed fewer than all.
    let short: Vec<String> = rows
        .iter()
        .flat_map(|row| {
            RUNS.iter()
                .zip(&row.completed)
                .filter(|(_, &done)| done < row.jobs)
                .map(move |((label, _, _), done)| {
                    format!(
                        "{label} on workload {}: {done} of {}",
                        row.workload, row.jobs
                    )
                })
        })
        .collect();
    if short.is_empty() {
        out.push_str("Every run completed every job.\n\n");
    } else {
        let _ = writeln!(
            out,
            "A run's average is over the jobs it completed, and each comparison with \
             elastic-batch over the jobs both completed. Runs that completed fewer than all \
             (a fixed-size policy turns away a job that no type has the GPUs for): {}.\n",
            short.join("; ")
        );
    }
    let worst = |k: usize| worst_ratio(rows.iter().map(|r| ratio(r, k)));
    let verdict = |met: bool| if met { "met" } else { "not met" };
    let _ = writeln!(
        out,
        "Targets (issue 29), on every workload: learned elastic-batch ≤ \
         {TARGET_AGAINST_SIA}× Sia's average JCT: worst {:.3}×, {}; ≤ \
         {TARGET_AGAINST_TYPE_BLIND}× type-blind elastic-batch's: worst {:.3}×, {}.",
        worst(SIA_RUN),
        verdict(worst(SIA_RUN) <= TARGET_AGAINST_SIA),
        worst(TYPE_BLIND_RUN),
        verdict(worst(TYPE_BLIND_RUN) <= TARGET_AGAINST_TYPE_BLIND),
    );
    // What the policies are worth with nothing to learn, and what learning costs each.
    let (ours, sia) = ORACLE_RUNS;
    let oracle_worst = worst_ratio(rows.iter().map(|r| r.avg_jct_s[ours] / r.avg_jct_s[sia]));
    let _ = writeln!(
        out,
        "\nWith nothing left to learn (the oracle rows), elastic-batch's mean average JCT is \
         {:.3}× Sia's (worst workload {oracle_worst:.3}×): what the policies themselves are \
         worth here, against the {TARGET_AGAINST_SIA}× asked of the learned runs. Learning \
         costs elastic-batch {:.3}× its oracle's mean and Sia {:.3}×.",
        mean(ours) / mean(sia),
        mean(0) / mean(ours),
        mean(SIA_RUN) / mean(sia),
    );
    out
}

/// The largest of `ratios`; not a number if any is not (a comparison over no common job), so
/// that no target is met by a run that completed nothing.
fn worst_ratio(ratios: impl Iterator<Item = f64>) -> f64 {
    ratios.fold(0.0, |worst, r| {
        if worst.is_nan() || r.is_nan() {
            f64::NAN
        } else {
            worst.max(r)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::worst_ratio;

    /// A workload on which a run completed nothing makes no target met (`max` skipped it).
    #[test]
    fn a_ratio_over_nothing_is_the_worst() {
        assert_eq!(worst_ratio([0.7, 0.9, 0.8].into_iter()), 0.9);
        assert!(worst_ratio([0.7, f64::NAN, 0.8].into_iter()).is_nan());
        let met = worst_ratio([f64::NAN, 0.7].into_iter()) <= 0.8;
        assert!(!met, "a target met over nothing");
    }
}
