//! The Pollux yardstick's `report.md`: tables, and prose whose every figure is computed from
//! the rows of the run.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::config::SimConfig;
use crate::workload::{bundled_pollux_workload, BUNDLED_POLLUX_WORKLOADS};

use super::pollux::*;
use super::words::*;

/// Rows of one Pollux run, looked up by [`PolluxRun`], with the run's workloads.
pub(super) struct PolluxRows<'a> {
    rows: &'a [PolluxRow],
    workloads: &'a [usize],
}

impl<'a> PolluxRows<'a> {
    fn get(&self, id: PolluxRun) -> Option<&'a PolluxRow> {
        self.rows
            .iter()
            .find(|r| r.id == id && r.summaries.len() == self.workloads.len())
    }

    /// Mean average JCT, s.
    fn mean(&self, id: PolluxRun) -> Option<f64> {
        self.get(id).map(PolluxRow::mean_avg_jct_s)
    }

    /// Mean reallocations per workload.
    fn realloc(&self, id: PolluxRun) -> Option<f64> {
        self.get(id).map(PolluxRow::mean_reallocations)
    }

    /// `(workload number, average JCT s)` per workload.
    fn per(&self, id: PolluxRun) -> Option<Vec<(usize, f64)>> {
        let row = self.get(id)?;
        Some(
            self.workloads
                .iter()
                .zip(&row.summaries)
                .map(|(&n, s)| (n, s.avg_jct_s))
                .collect(),
        )
    }

    /// The published mean over these workloads, s.
    fn published(&self, p: Published) -> Option<f64> {
        p.mean_over(self.workloads)
    }

    /// `(workload, ours s, published s)` for each workload.
    fn against_published(&self, id: PolluxRun, p: Published) -> Option<Vec<(usize, f64, f64)>> {
        self.per(id)?
            .into_iter()
            .map(|(n, ours)| p.on_workload(n).map(|publ| (n, ours, publ)))
            .collect()
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
pub(super) fn workloads_named(ns: &[usize]) -> String {
    let names: Vec<String> = ns.iter().map(|n| n.to_string()).collect();
    match names.as_slice() {
        [] => "no workload".to_string(),
        [one] => format!("workload {one}"),
        [rest @ .., last] => format!("workloads {} and {last}", rest.join(", ")),
    }
}

/// Input facts of the bundled workloads the prose cites (not measurements).
pub(super) struct WorkloadFacts {
    /// yolov3 jobs per workload, in the run's order.
    yolov3_jobs: Vec<(usize, usize)>,
    /// Per model, the most GPUs a fixed batch of its jobs needs without accumulation
    /// (`ceil(batch / max per-GPU batch)`), and that batch; models needing one GPU left out.
    fixed_batch_needs: Vec<(String, u32, u32)>,
}

pub(super) fn workload_facts(workloads: &[usize]) -> Option<WorkloadFacts> {
    let mut yolov3_jobs = Vec::new();
    let mut needs: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    for &n in workloads {
        let w = bundled_pollux_workload(n).ok()?;
        yolov3_jobs.push((
            n,
            w.jobs
                .iter()
                .filter(|j| j.job.model_name == "yolov3")
                .count(),
        ));
        for j in &w.jobs {
            let batch = j.job.requested.batch;
            let need = batch.div_ceil(j.job.max_local_batch.max(1));
            let e = needs.entry(j.job.model_name.clone()).or_default();
            if (need, batch) > *e {
                *e = (need, batch);
            }
        }
    }
    let mut fixed_batch_needs: Vec<(String, u32, u32)> = needs
        .into_iter()
        .filter(|(_, (need, _))| *need > 1)
        .map(|(m, (need, batch))| (m, need, batch))
        .collect();
    fixed_batch_needs.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Some(WorkloadFacts {
        yolov3_jobs,
        fixed_batch_needs,
    })
}

/// The report of [`reproduce_pollux`] for `rows` (one per [`PolluxRun`], summaries in
/// `options.workloads` order). Every measured figure in it is computed from `rows`; the other
/// figures are settings, input facts or Pollux's published results, labelled as such.
pub fn pollux_report(options: &PolluxOptions, rows: &[PolluxRow]) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# Pollux yardstick\n");
    let config = pollux_config();
    let _ = writeln!(
        md,
        "Workloads {:?} of Pollux's OSDI'21 artifact (bundled), {} nodes × {} GPUs (T4 profiles), \
         allocator every {} s (not on events, as in Pollux's simulator), {} s without progress at \
         every (re)start, goodput progress (statistical-efficiency-weighted, epoch by epoch, done \
         after the model's epochs), queue admission with backfill. Policies learn each job's \
         model from its simulated metric reports unless a row says oracle.\n",
        options.workloads,
        config.cluster.nodes,
        config.cluster.gpus_per_node,
        int(config.interval_s.unwrap_or(0.0)),
        int(config.restart_delay_s),
    );
    let _ = writeln!(
        md,
        "| policy | mean avg JCT (s) | published, same workloads (s) | per workload (s) | reallocations (mean) | optimizer (ms/decision) |\n|---|---|---|---|---|---|"
    );
    for r in rows.iter().filter(|r| r.part == PolluxPart::Main) {
        let n = r.summaries.len().max(1) as f64;
        let opt = r.summaries.iter().map(|s| s.optimizer_avg_s).sum::<f64>() / n * 1e3;
        let published = r.published_s.map_or(String::from("—"), |p| {
            format!("{} {p:.0}", r.published_as)
        });
        let _ = writeln!(
            md,
            "| {} | {:.0} | {} | {} | {:.0} | {:.3} |",
            r.label,
            r.mean_avg_jct_s(),
            published,
            r.per_workload_jct(),
            r.mean_reallocations(),
            opt
        );
    }
    md.push_str("\n![average JCT per workload](avg_jct_by_workload.svg)\n\n");
    let rows_by = PolluxRows {
        rows,
        workloads: &options.workloads,
    };
    let facts = workload_facts(&options.workloads);
    md.push_str(&pollux_headline(&rows_by));
    md.push_str(&pollux_differences(&rows_by, &config));
    let analysis: Vec<&PolluxRow> = rows
        .iter()
        .filter(|r| r.part == PolluxPart::BaselineAnalysis)
        .collect();
    if !analysis.is_empty() {
        md.push_str(POLLUX_BASELINES_INTRO);
        let _ = writeln!(
            md,
            "| variant | mean avg JCT (s) | per workload (s) | reallocations (mean) |\n|---|---|---|---|"
        );
        let reference = rows_by.get(PolluxRun::ElasticGpu);
        for r in reference.into_iter().chain(analysis) {
            let _ = writeln!(
                md,
                "| {} | {:.0} | {} | {:.0} |",
                r.label,
                r.mean_avg_jct_s(),
                r.per_workload_jct(),
                r.mean_reallocations()
            );
        }
        for p in [
            Published::OptimusOracle,
            Published::Tiresias,
            Published::Pollux,
        ] {
            let per: Option<Vec<f64>> = options
                .workloads
                .iter()
                .map(|&n| p.on_workload(n))
                .collect();
            if let (Some(per), Some(mean)) = (per, p.mean_over(&options.workloads)) {
                let per: Vec<String> = per.iter().map(|v| format!("{v:.0}")).collect();
                let _ = writeln!(
                    md,
                    "| *Pollux artifact, {} (published)* | {mean:.0} | {} | — |",
                    p.name(),
                    per.join(", ")
                );
            }
        }
        md.push('\n');
        md.push_str(&pollux_findings(&rows_by, facts.as_ref()));
    }
    md
}

/// The headline: learned elastic-batch against Pollux's published result and the oracle.
pub(super) fn pollux_headline(r: &PolluxRows) -> String {
    use PolluxRun as R;
    let mut bullets: Vec<Option<String>> = Vec::new();
    bullets.push((|| {
        let eb = r.mean(R::ElasticBatch)?;
        let pollux = r.published(Published::Pollux)?;
        Some(format!(
            "- **Learned elastic-batch against Pollux.** Learning each job's model from its \
             simulated reports (the simulator's default), elastic-batch averages {} over {}, {} \
             Pollux's published {} on the same workloads ({}).",
            secs(eb),
            r.named(),
            compared(eb, pollux),
            secs(pollux),
            times(eb / pollux)
        ))
    })());
    bullets.push((|| {
        let eb = r.mean(R::ElasticBatch)?;
        let oracle = r.mean(R::ElasticBatchOracle)?;
        Some(format!(
            "- **Learned against oracle.** With the true models from each job's arrival (a bound, \
             not a result) elastic-batch averages {}: the learned run's {} is {} it ({}, {} on \
             the mean), and it reallocates {} times per workload against the oracle's {}.",
            secs(oracle),
            secs(eb),
            compared(eb, oracle),
            times(eb / oracle),
            signed_secs(eb - oracle),
            int(r.realloc(R::ElasticBatch)?),
            int(r.realloc(R::ElasticBatchOracle)?)
        ))
    })());
    bullets.push((|| {
        let eb = r.mean(R::ElasticBatch)?;
        let optimus = r.published(Published::OptimusOracle)?;
        let tiresias = r.published(Published::Tiresias)?;
        Some(format!(
            "- **Against the published baselines** on the same workloads, learned elastic-batch's \
             mean is {} Optimus+Oracle's {} and {} Tiresias's {}.",
            compared(eb, optimus),
            secs(optimus),
            compared(eb, tiresias),
            secs(tiresias)
        ))
    })());
    let bullets: Vec<String> = bullets.into_iter().flatten().collect();
    if bullets.is_empty() {
        return String::new();
    }
    format!(
        "## Headline (computed from the table above)\n\n{}\n\n",
        bullets.join("\n")
    )
}

/// How this simulator differs from Pollux's: code facts, with the measured effects computed.
pub(super) fn pollux_differences(r: &PolluxRows, config: &SimConfig) -> String {
    use PolluxRun as R;
    let mut md = String::from(POLLUX_DIFFERENCES);
    let default_threshold = config.policy_options.tiresias_threshold_gpu_s;
    let tiresias_pub_8 =
        Published::Tiresias.mean_over(&(1..=BUNDLED_POLLUX_WORKLOADS).collect::<Vec<_>>());
    let _ = write!(
        md,
        "- Tiresias in Pollux's artifact demotes at {} GPU-hours of attained service (two queues, \
         no starvation guard); both thresholds are shown.",
        int(ARTIFACT_TIRESIAS_THRESHOLD_GPU_S / 3600.0)
    );
    if let (Some(p8), Some(w6)) = (tiresias_pub_8, Published::Tiresias.on_workload(6)) {
        let _ = write!(
            md,
            " The published {} is the artifact's own mean over the {} workloads (its README's {} \
             is workload 6 alone).",
            secs(p8),
            BUNDLED_POLLUX_WORKLOADS,
            secs(w6)
        );
    }
    let _ = write!(
        md,
        " With {} GPU-s a job is demoted after {} min on one GPU (sooner on more), so long jobs \
         preempt each other in FIFO order of demotion and the low queue behaves like FIFO with \
         restarts",
        int(default_threshold),
        int(default_threshold / 60.0)
    );
    match (r.mean(R::TiresiasDefault), r.mean(R::TiresiasArtifact)) {
        (Some(low), Some(high)) => {
            let _ = writeln!(
                md,
                ": its mean is {} against {} at the artifact's threshold ({}).",
                secs(low),
                secs(high),
                times(low / high)
            );
        }
        _ => md.push_str(".\n"),
    }
    md.push_str(POLLUX_OPTIMUS_NOTE);
    let _ = write!(
        md,
        "- Placement: the allocator values consolidated placements; a job that restarts anyway \
         and lands on extra nodes triggers a defragmenting repack \
         (`SimConfig::defragment_moves_per_job`, {} here) that re-places all running jobs when \
         that consolidates more jobs than it moves per job",
        config.defragment_moves_per_job
    );
    match (r.mean(R::ElasticBatch), r.mean(R::ElasticBatchNoDefrag)) {
        (Some(on), Some(off)) => {
            let _ = writeln!(
                md,
                "; without it learned elastic-batch's mean {}.\n",
                change(on, off)
            );
        }
        _ => md.push_str(".\n\n"),
    }
    md
}

/// The findings of the baseline analysis, every measured figure computed from the rows.
pub(super) fn pollux_findings(r: &PolluxRows, facts: Option<&WorkloadFacts>) -> String {
    use PolluxRun as R;
    let mut bullets: Vec<Option<String>> = Vec::new();
    // Accumulation and elastic-gpu.
    bullets.push((|| {
        let eg = r.mean(R::ElasticGpu)?;
        let eg_acc = r.mean(R::ElasticGpuAccumulation)?;
        let opt_none = r.mean(R::OptimusNoAccumulation)?;
        let opt_acc = r.mean(R::OptimusAccumulation)?;
        let eb = r.mean(R::ElasticBatch)?;
        let mut s = String::from(
            "- **Accumulation and elastic-gpu's gap.** Without accumulation a fixed batch needs \
             `ceil(batch / memory)` GPUs",
        );
        if let Some(f) = facts.filter(|f| !f.fixed_batch_needs.is_empty()) {
            let needs: Vec<String> = f
                .fixed_batch_needs
                .iter()
                .map(|(m, need, batch)| format!("{need} for {m} at {}", int(f64::from(*batch))))
                .collect();
            let _ = write!(
                s,
                " (at most, per model in these workloads: {})",
                needs.join(", ")
            );
        }
        s.push_str(
            ", so under queue admission such jobs wait for large blocks and then hold them.",
        );
        let per = r.per(R::ElasticGpu)?;
        let per_acc = r.per(R::ElasticGpuAccumulation)?;
        let worst: Vec<(usize, f64)> = per
            .iter()
            .zip(&per_acc)
            .filter(|((_, v), (_, a))| *v > 2.0 * a)
            .map(|(&(n, v), _)| (n, v))
            .collect();
        if !worst.is_empty() {
            let ns: Vec<usize> = worst.iter().map(|w| w.0).collect();
            let vals: Vec<f64> = worst.iter().map(|w| w.1).collect();
            let _ = write!(
                s,
                " Elastic-gpu without it averages more than twice its mean with it on {} ({}).",
                workloads_named(&ns),
                range_secs(&vals)
            );
        }
        let _ = write!(
            s,
            " With accumulation from one GPU elastic-gpu's mean {} and Optimus's greedy's {}; \
             learned elastic-batch averages {}. Since Pollux's baseline defines the minimum as \
             one replica, the Optimus+Oracle row uses it by default; elastic-gpu keeps the paper's \
             no-accumulation rule (its own definition).",
            change(eg, eg_acc),
            change(opt_none, opt_acc),
            secs(eb)
        );
        Some(s)
    })());
    // Optimus against the published result.
    bullets.push((|| {
        let opt = r.mean(R::OptimusOracle)?;
        let opt_all = r.mean(R::OptimusAllRules)?;
        let published = r.published(Published::OptimusOracle)?;
        let per = r.against_published(R::OptimusOracle, Published::OptimusOracle)?;
        let per_all = r.against_published(R::OptimusAllRules, Published::OptimusOracle)?;
        let gap = |ours: f64, publ: f64| (ours / publ - 1.0).abs();
        let &(wn, wo, wp) = per
            .iter()
            .max_by(|a, b| gap(a.1, a.2).total_cmp(&gap(b.1, b.2)))?;
        let &(_, wo_all, _) = per_all.iter().find(|x| x.0 == wn)?;
        let mut s = format!(
            "- **The Optimus+Oracle row against the published result.** With the artifact's \
             accumulation and ncf rules it averages {}, {} the published {}; with all four \
             rules {} ({} it). The largest gap on one workload is workload {wn} ({} against {}, \
             {}), where all four rules give {} ({}).",
            secs(opt),
            compared(opt, published),
            secs(published),
            secs(opt_all),
            compared(opt_all, published),
            secs(wo),
            secs(wp),
            signed_pct(wp, wo),
            secs(wo_all),
            signed_pct(wp, wo_all)
        );
        if let (Some(free), Some(per_free)) = (
            r.mean(R::OptimusAccumulation),
            r.per(R::OptimusAccumulation),
        ) {
            let same = per_free
                .iter()
                .zip(r.per(R::OptimusOracle)?)
                .all(|(a, b)| a.1 == b.1);
            if same {
                s.push_str(
                    " Capping ncf at one GPU changes nothing here: with ncf free to scale every \
                     workload's result is the same (consistent with the greedy never giving ncf \
                     a second GPU).",
                );
            } else {
                let _ = write!(
                    s,
                    " With ncf free to scale the mean is {} ({} against the capped row).",
                    secs(free),
                    signed_secs(free - opt)
                );
            }
        }
        if let Some(no_defrag) = r.mean(R::OptimusOracleNoDefrag) {
            let _ = write!(
                s,
                " Without the defragmenting repack the row averages {} ({}).",
                secs(no_defrag),
                signed_secs(no_defrag - opt)
            );
        }
        Some(s)
    })());
    // Our exact optimizer against Optimus, same rules and knowledge.
    bullets.push((|| {
        let opt = r.mean(R::OptimusOracle)?;
        let eg_oracle = r.mean(R::ElasticGpuArtifactOracle)?;
        let eg_learned = r.mean(R::ElasticGpuArtifact)?;
        let eg_no_ra = r.mean(R::ElasticGpuArtifactNoRestartAwareness)?;
        let published = r.published(Published::OptimusOracle)?;
        let eb = r.mean(R::ElasticBatch)?;
        let eg_acc = r.mean(R::ElasticGpuAccumulation)?;
        Some(format!(
            "- **dlscale's exact optimizer against Optimus's greedy, batch fixed.** With the \
             Optimus+Oracle row's rules (accumulation, ncf on one GPU) and its oracle knowledge, \
             elastic-gpu (exact DP over the fair goodput utility, restart-aware) averages {}, {} \
             Optimus's {}, and reallocates {} times per workload against Optimus's {}. Optimus \
             weights a GPU's time saved by the job's remaining iterations, which favours long \
             jobs; we did not separate the greedy from the objective (that needs the Optimus \
             objective in dlscale-core's value tables). Learned, the same elastic-gpu averages {}. \
             Without restart awareness the learned one's mean {} and it reallocates {} times per \
             workload against {}. Against the published Optimus+Oracle mean ({}), learned \
             elastic-batch's {} is {} it ({}); learned elastic-gpu with accumulation — the same \
             optimizer with the batch fixed — averages {}, {} it ({}).",
            secs(eg_oracle),
            compared(eg_oracle, opt),
            secs(opt),
            int(r.realloc(R::ElasticGpuArtifactOracle)?),
            int(r.realloc(R::OptimusOracle)?),
            secs(eg_learned),
            change(eg_learned, eg_no_ra),
            int(r.realloc(R::ElasticGpuArtifactNoRestartAwareness)?),
            int(r.realloc(R::ElasticGpuArtifact)?),
            secs(published),
            secs(eb),
            compared(eb, published),
            times(eb / published),
            secs(eg_acc),
            compared(eg_acc, published),
            times(eg_acc / published)
        ))
    })());
    // Tiresias.
    bullets.push((|| {
        let t = r.mean(R::TiresiasArtifact)?;
        let published = r.published(Published::Tiresias)?;
        let t8 = r.mean(R::TiresiasYolov3Local8)?;
        let t8s = r.mean(R::TiresiasYolov3Local8Split)?;
        let per = r.per(R::TiresiasArtifact)?;
        let per8 = r.against_published(R::TiresiasYolov3Local8, Published::Tiresias)?;
        let mut s = format!(
            "- **Tiresias ({} against {} published, {}).** The artifact caps yolov3 at 8 samples \
             per GPU (`max_local_bsz=8` in `applications.py`) where the bundled profile allows \
             16, so yolov3's requested 64 on 4 GPUs runs as two micro-steps there; with that cap \
             our Tiresias's mean {}, its gap to the published mean going from {} to {}",
            secs(t),
            secs(published),
            signed_pct(published, t),
            change(t, t8),
            signed_pct(published, t),
            signed_pct(published, t8)
        );
        let mut moved: Vec<(usize, f64)> = per
            .iter()
            .zip(&per8)
            .map(|(&(n, before), &(_, after, _))| (n, after - before))
            .collect();
        moved.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()));
        let yolo = |n: usize| {
            facts
                .and_then(|f| f.yolov3_jobs.iter().find(|y| y.0 == n))
                .map(|y| y.1)
        };
        let top: Vec<String> = moved
            .iter()
            .take(2)
            .map(|&(n, d)| match yolo(n) {
                Some(y) => format!("workload {n} {} ({y} yolov3 jobs)", signed_secs(d)),
                None => format!("workload {n} {}", signed_secs(d)),
            })
            .collect();
        if !top.is_empty() {
            let _ = write!(s, "; it moves most on {}", top.join(" and "));
            if let Some(f) = facts.filter(|f| !f.yolov3_jobs.is_empty()) {
                let mean = f.yolov3_jobs.iter().map(|y| y.1 as f64).sum::<f64>()
                    / f.yolov3_jobs.len() as f64;
                let _ = write!(s, " (the workloads average {mean:.1} yolov3 jobs)");
            }
        }
        let _ = write!(s, ". The one-GPU split on top: {}.", signed_secs(t8s - t8));
        if let Some(nd) = r.mean(R::TiresiasNoDefrag) {
            let _ = write!(
                s,
                " Without the defragmenting repack: {} (Tiresias reallocates {} times per \
                 workload).",
                signed_secs(nd - t),
                int(r.realloc(R::TiresiasArtifact)?)
            );
        }
        let mut left = per8.clone();
        left.sort_by(|a, b| (b.1 - b.2).abs().total_cmp(&(a.1 - a.2).abs()));
        let left: Vec<String> = left
            .iter()
            .take(2)
            .map(|&(n, ours, publ)| format!("workload {n} {} against {}", secs(ours), secs(publ)))
            .collect();
        let _ = write!(
            s,
            " Not explained: the rest (largest gaps with the yolov3 cap: {}). Candidates, not \
             measured: the artifact places new jobs on the nodes with the most free GPUs, which \
             can spread a 4- or 6-GPU job over more nodes than needed (slower synchronisation) \
             where dlscale consolidates; its throughput interpolation (SciPy \
             `LinearNDInterpolator` over nodes × replicas × per-GPU batch) differs from \
             dlscale-core's piecewise-linear one for unmeasured placements; its accumulation \
             counts compute time as `step − sync` at the job's own placement where dlscale uses \
             the one-GPU step.",
            left.join(", ")
        );
        Some(s)
    })());
    // Elastic-batch under the artifact's rules.
    bullets.push((|| {
        let eb = r.mean(R::ElasticBatch)?;
        let ncf = r.mean(R::ElasticBatchNcfOneGpu)?;
        let all = r.mean(R::ElasticBatchAllRules)?;
        let pollux = r.published(Published::Pollux)?;
        Some(format!(
            "- **Learned elastic-batch under the artifact's rules.** With ncf on one GPU its mean \
             {}; with all four rules it {} (Pollux published {}). The other three rules are not \
             separated for elastic-batch here.",
            change(eb, ncf),
            change(eb, all),
            secs(pollux)
        ))
    })());
    let bullets: Vec<String> = bullets.into_iter().flatten().collect();
    if bullets.is_empty() {
        return String::new();
    }
    bullets.join("\n") + "\n"
}

pub(super) const POLLUX_DIFFERENCES: &str = "## How this simulator differs from Pollux's

- Throughput comes from dlscale-core's interpolation of the same measured tables (placements and
  scalability), on the nodes a job actually spans after placement; Pollux interpolates with
  SciPy's `LinearNDInterpolator`. Statistical efficiency uses the same gradient statistics per
  epoch and batch.
- Pollux's own policy re-fits throughput models from what each job has run so far and caps a
  job's GPUs at twice what it has been profiled on. So does elastic-batch here (its *learned*
  rows): each job starts on the service's linear-scaling prior at its requested GPUs, its
  simulated workers report the true throughput with measurement noise and the true gradient
  statistics, the autoscaler fits its model from the reports and lets it grow to twice what it
  has been measured on. The *oracle* rows see the true tables from the start, like
  Optimus+Oracle: a bound, not a result.
- A fixed batch that does not fit the requested GPUs' memory (BERT's 384 on 6–16 GPUs) uses
  gradient accumulation in both simulators; Pollux's also caps yolov3's per-GPU batch at 8 where
  the bundled profile allows 16.
";

pub(super) const POLLUX_OPTIMUS_NOTE: &str =
    "- The Optimus+Oracle row is the artifact's baseline re-implemented (the `optimus` policy with
  gradient accumulation and ncf on one GPU, both part of that baseline's definition; see below).
  elastic-gpu is dlscale's own fixed-batch baseline (the exact DP over the same fair goodput as
  elastic-batch, a fixed batch must fit GPU memory): it has no published counterpart.
";

pub(super) const POLLUX_BASELINES_INTRO: &str = "## Why the baselines differ from the published numbers

What Pollux's artifact (branch `osdi21-artifact`, `simulator/`) runs as **Optimus+Oracle**
(`optimus.py`, `OptimusPolicy.optimize`; job set-up in `simulator.py`, `Cluster.__init__`,
`get_optimus_job_info`, `Job.update_local_bsz`):

- the batch is fixed at the workload's `batch_size` (`target_batch_size=row.batch_size`);
- every job's minimum is **1 replica** (the memory minimum `ceil(batch / max_local_bsz)` is
  commented out): a batch that does not fit runs by **gradient accumulation** (`accum_steps =
  ceil(local / max_local_bsz) − 1`, step = step + accum_steps × (step − sync)), and on one replica a
  batch above the initial one always runs as at least two micro-steps;
- allocation is **greedy**: jobs (in arrival order) first get one GPU each, then GPUs go one at a
  time to the job with the largest `(step_time(n) − step_time(n+1)) × remaining iterations`, until no
  job gains; step times are the **true** (oracle) measured ones (`predict_step_time` calls
  `application.get_throughput`) on packed placements; `max_replicas = batch // min_local_bsz`, ncf
  jobs one replica (as for Pollux itself);
- no restart awareness: a changed GPU count restarts the job (30 s), every 60 s round; new jobs
  go to the nodes with the most free GPUs, others never move.

The `optimus` policy re-implements this allocation, and the workload rules are options
(`ArtifactRules`: `with_fixed_batch_accumulation`, `with_gpu_cap`, `with_memory_cap`,
`with_single_gpu_split` in `workload.rs`). Measured (same settings as the table above; the
elastic policies learn unless a row says oracle, Optimus always has the oracle):

";
