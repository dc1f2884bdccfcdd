//! Issue 27's yardstick: a trace's teams (Philly's virtual clusters) on one cluster, each
//! guaranteed its share of the trace's GPU time, under elastic-batch with quotas, the two static
//! baselines (quota with borrowing at the requested size, queued as Kueue queues; static
//! partitions), and elastic-batch without quotas (the team-blind optimum). `report.md` holds
//! the overall and the per-team tables and the targets' verdicts, every figure from this run,
//! each comparison over the jobs both runs completed.

use std::fmt::Write as _;
use std::path::Path;

use dlscale_core::allocator::{PolicyInfo, ELASTIC_BATCH, STATIC, STATIC_PARTITIONS};
use dlscale_core::Admission;

use super::jcts::Jcts;
use crate::engine::simulate;
use crate::error::{Result, SimError};
use crate::metrics::Summary;
use crate::report::{comparison_table, team_table};
use crate::teams::guarantees_from_shares;
use crate::workload::Workload;
use crate::SimConfig;

/// Issue 27's targets: average JCT at most this fraction of static partitions'...
pub const TARGET_AGAINST_PARTITIONS: f64 = 0.5;
/// ...and of the team-blind run's.
pub const TARGET_AGAINST_BLIND: f64 = 1.1;

/// The runs, in the report's order: (label, policy, with quotas, admission). Kueue queues a
/// workload until its quota has room; the others take the configuration's admission.
const RUNS: [(&str, PolicyInfo, bool, Option<Admission>); 4] = [
    ("elastic-batch with quotas", ELASTIC_BATCH, true, None),
    (
        "quota with borrowing at the requested size (static, queued as Kueue queues)",
        STATIC,
        true,
        Some(Admission::Queue),
    ),
    ("static partitions", STATIC_PARTITIONS, true, None),
    ("elastic-batch, team-blind", ELASTIC_BATCH, false, None),
];

/// Runs the four on `workload` under `config` (its `teams` replaced: guarantees from the
/// workload's shares), writes `report.md` into `out_dir` and returns the summaries in the order
/// of the report.
pub fn reproduce_teams(
    workload: &Workload,
    config: &SimConfig,
    out_dir: &Path,
    on_progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<Summary>> {
    std::fs::create_dir_all(out_dir).map_err(|e| SimError::io(out_dir, e))?;
    let teams = guarantees_from_shares(workload, config.cluster.total_gpus())?;
    let mut summaries = Vec::new();
    let mut jcts = Vec::new();
    for (done, (_, policy, quotas, admission)) in RUNS.into_iter().enumerate() {
        let mut run = SimConfig {
            teams: quotas.then(|| teams.clone()),
            ..config.clone()
        };
        if let Some(admission) = admission {
            run.settings.admission = admission;
        }
        let mut completed = Jcts::default();
        summaries.push(simulate(workload, &run, policy, &mut completed)?.summary);
        jcts.push(completed);
        on_progress(done + 1, RUNS.len());
    }
    let path = out_dir.join("report.md");
    std::fs::write(&path, teams_report(workload, config, &summaries, &jcts))
        .map_err(|e| SimError::io(&path, e))?;
    Ok(summaries)
}

/// The report of [`reproduce_teams`]'s `summaries` and completed jobs' JCTs (in [`RUNS`]'
/// order).
fn teams_report(
    workload: &Workload,
    config: &SimConfig,
    summaries: &[Summary],
    jcts: &[Jcts],
) -> String {
    let mut out = format!(
        "# Teams on {} GPUs ({} nodes × {}): {}\n\n",
        config.cluster.total_gpus(),
        config.cluster.nodes,
        config.cluster.gpus_per_node,
        workload.name
    );
    out.push_str(
        "Each team (a job's `team`; Philly's virtual cluster) is guaranteed its share of the \
         workload's GPU time and may borrow the whole cluster. Every run knew the same: the \
         trace's jobs as the mapping rules make them.\n\n",
    );
    let _ = writeln!(
        out,
        "Fair share between the teams (runs with quotas): {}.\n",
        match config.fair_share {
            Some(f) => format!("past usage's half-life {:.0} s", f.half_life_s),
            None => "off".to_string(),
        }
    );
    for ((label, _, _, _), s) in RUNS.iter().zip(summaries) {
        let _ = write!(
            out,
            "- {label}: average JCT {:.0} s, GPU utilisation {:.3}",
            s.avg_jct_s, s.gpu_utilization
        );
        if !s.teams.is_empty() {
            let violations: f64 = s.teams.iter().map(|t| t.violation_s).sum();
            let borrowed: f64 = s.teams.iter().map(|t| t.borrowed_gpu_h).sum();
            let _ = write!(
                out,
                ", guarantee violations beyond the bound {violations:.0} s, borrowed \
                 {borrowed:.1} GPU-h"
            );
        }
        out.push('\n');
    }
    let refs: Vec<&Summary> = summaries.iter().collect();
    let _ = write!(
        out,
        "\n{}\n{}\n",
        comparison_table(&refs),
        team_table(&refs)
    );
    // Each comparison over the jobs both runs completed: a run that dropped or left jobs
    // unfinished averages over others.
    let violations: f64 = summaries[0].teams.iter().map(|t| t.violation_s).sum();
    let verdict = |met: bool| if met { "met" } else { "not met" };
    let compared = |k: usize| {
        let (ours, theirs, n) = jcts[0].paired(&jcts[k]);
        // Over no common job, no target is met.
        let ratio = if n == 0 { f64::NAN } else { ours / theirs };
        (ratio, n)
    };
    let ((partitions, with_partitions), (blind, with_blind)) = (compared(2), compared(3));
    let _ = writeln!(
        out,
        "Targets (issue 27), each over the jobs both runs completed: average JCT ≤ \
         {TARGET_AGAINST_PARTITIONS}× static partitions: {partitions:.3}× over \
         {with_partitions} jobs, {}; ≤ {TARGET_AGAINST_BLIND}× the team-blind run: {blind:.3}× \
         over {with_blind} jobs, {}; no guarantee violation beyond the bound: {violations:.0} \
         s, {}.",
        verdict(partitions <= TARGET_AGAINST_PARTITIONS),
        verdict(blind <= TARGET_AGAINST_BLIND),
        verdict(violations == 0.0)
    );
    out
}
