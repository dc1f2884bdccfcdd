//! The paper's experiment: the arrival-rate sweep, its ablation, and its report.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use dlscale_autoscaler::OnEvents;
use dlscale_core::allocator::{ELASTIC_BATCH, ELASTIC_GPU, STATIC};
use dlscale_core::profiles;
use dlscale_core::{Admission, Cluster, PolicyInfo, Settings, Utility};

use crate::config::{ProgressMode, SimConfig};
use crate::engine::simulate;
use crate::error::{Result, SimError};
use crate::metrics::{JobRecord, Outcome, SimObserver, Summary};
use crate::plot::{line_chart, Axis, Chart, Series};
use crate::workload::{generate, BatchRangeRule, GeneratorSpec, MinGpusRule, UserBatch};

use super::words::*;

/// A sweep plot: file stem, title, y label, and the value plotted.
pub(super) type SweepPlot = (
    &'static str,
    &'static str,
    &'static str,
    fn(&Summary) -> f64,
);

/// Settings of [`reproduce_paper`]: the arrival sweep and every choice the paper leaves open.
#[derive(Debug, Clone, PartialEq)]
pub struct PaperOptions {
    /// Poisson arrival rates swept, jobs per hour, light load to overload.
    pub rates_per_h: Vec<f64>,
    /// Jobs per rate.
    pub jobs: usize,
    /// The cluster.
    pub cluster: Cluster,
    /// Seed of the generated workloads (one stream per rate).
    pub seed: u64,
    /// How users pick the batch size the baselines keep fixed.
    pub user_batch: UserBatch,
    /// Each job's batch range (where elastic-batch may move its batch).
    pub batch_range: BatchRangeRule,
    /// Each job's fewest GPUs, for every policy (admission needs it to fit).
    pub min_gpus: MinGpusRule,
    /// What the optimizer maximises (the paper: per-job speedup, summed).
    pub utility: Utility,
    /// Seconds without progress at every (re)start (checkpoint, restart, warm-up).
    pub restart_delay_s: f64,
    /// Median run time of a job at its requested configuration, s (log-normal, σ = 1).
    pub median_duration_s: f64,
    /// Rates at which the ablation table re-runs elastic-batch and elastic-gpu with one setting
    /// changed at a time (empty: no ablation).
    pub ablation_rates: Vec<f64>,
}

impl Default for PaperOptions {
    /// Six rates from 2 to 64 jobs/h (offered load ≈ 0.2× to 6× of 64 GPUs), 300 jobs each,
    /// 16 nodes × 4 GPUs; users ask for the Pollux workloads' GPU counts with the model's
    /// single-GPU batch per GPU; batch ranges 8× around the user's batch; the requested GPUs as
    /// every policy's minimum; the speedup utility; 30 s per restart; median run 30 min;
    /// ablation at 8, 32 and 64 jobs/h.
    fn default() -> Self {
        PaperOptions {
            rates_per_h: vec![2.0, 4.0, 8.0, 16.0, 32.0, 64.0],
            jobs: 300,
            cluster: Cluster {
                nodes: 16,
                gpus_per_node: 4,
            },
            seed: 1,
            user_batch: UserBatch::PerGpuRecipe,
            batch_range: BatchRangeRule::AroundUser { factor: 8.0 },
            min_gpus: MinGpusRule::Requested,
            utility: Utility::Speedup,
            restart_delay_s: 30.0,
            median_duration_s: 1800.0,
            ablation_rates: vec![8.0, 32.0, 64.0],
        }
    }
}

impl PaperOptions {
    /// The generator spec of the rate with index `k`.
    pub fn generator(&self, k: usize) -> GeneratorSpec {
        let rate = self.rates_per_h.get(k).copied().unwrap_or(1.0);
        let mut spec = GeneratorSpec::pollux_mix(self.jobs, rate, self.seed.wrapping_add(k as u64));
        spec.user_batch = self.user_batch;
        spec.batch_range = self.batch_range;
        spec.min_gpus = self.min_gpus;
        spec.median_duration_s = self.median_duration_s;
        spec
    }

    /// The simulator settings.
    pub fn sim_config(&self) -> SimConfig {
        SimConfig {
            cluster: self.cluster,
            interval_s: None,
            on_events: OnEvents::Reshape,
            restart_delay_s: self.restart_delay_s,
            progress: ProgressMode::Samples,
            settings: Settings {
                utility: self.utility,
                admission: Admission::Drop,
                ..Settings::default()
            },
            ..SimConfig::default()
        }
    }
}

/// One rate of the sweep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepPoint {
    /// Arrivals per hour.
    pub rate_per_h: f64,
    /// One summary per policy (elastic-batch, elastic-gpu, static).
    pub summaries: Vec<Summary>,
    /// Dropped jobs per policy and model.
    pub dropped_by_model: BTreeMap<String, BTreeMap<String, usize>>,
    /// Average JCT (s) of elastic-batch and of elastic-gpu over the jobs both completed.
    pub common_avg_jct_s: (f64, f64),
    /// How many jobs both completed.
    pub common_jobs: usize,
    /// Per model: average JCT (s) of elastic-batch and of elastic-gpu over the jobs of that model
    /// both completed, and how many.
    pub common_by_model: BTreeMap<String, (f64, f64, usize)>,
}

/// Counts drops by model and keeps completed jobs' JCTs by id.
#[derive(Debug, Default)]
pub(super) struct SweepCollector {
    dropped_by_model: BTreeMap<String, usize>,
    jct_by_id: BTreeMap<String, (String, f64)>,
}

impl SimObserver for SweepCollector {
    fn job_finished(&mut self, record: &JobRecord) -> Result<()> {
        match (record.outcome, record.jct_s) {
            (Outcome::Dropped, _) => {
                *self
                    .dropped_by_model
                    .entry(record.model.clone())
                    .or_default() += 1;
            }
            (Outcome::Completed, Some(jct)) => {
                self.jct_by_id
                    .insert(record.id.clone(), (record.model.clone(), jct));
            }
            _ => {}
        }
        Ok(())
    }
}

/// The paper's experiment: Poisson arrivals of the Pollux workloads' model mix at each rate,
/// admit-or-drop, the allocator on every arrival and completion, samples progress and the paper's
/// speedup utility; elastic-batch, elastic-gpu and static. Writes `report.md`, `sweep.json` and
/// plots into `out_dir`; `on_progress(done, total)` counts simulations.
pub fn reproduce_paper(
    out_dir: &Path,
    options: &PaperOptions,
    on_progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<SweepPoint>> {
    if options.rates_per_h.len() < 2 || options.jobs == 0 {
        return Err(SimError::Config(
            "the sweep needs at least two rates and one job".into(),
        ));
    }
    std::fs::create_dir_all(out_dir).map_err(|e| SimError::io(out_dir, e))?;
    let policies = [ELASTIC_BATCH, ELASTIC_GPU, STATIC];
    let variants = ablation_variants(options);
    let ablation_runs = variants.len() * options.ablation_rates.len() * 2;
    let total = options.rates_per_h.len() * policies.len() + ablation_runs;
    let mut done = 0;
    let mut points = Vec::new();
    for k in 0..options.rates_per_h.len() {
        points.push(sweep_point(options, k, &policies, &mut || {
            done += 1;
            on_progress(done, total);
        })?);
    }
    let mut ablation = Vec::new();
    for (v, (label, variant)) in variants.iter().enumerate() {
        let mut row = AblationRow {
            label: label.clone(),
            base: v == 0,
            points: Vec::new(),
        };
        for &rate in &options.ablation_rates {
            let opts = PaperOptions {
                rates_per_h: vec![rate],
                ..variant.clone()
            };
            let k = options
                .rates_per_h
                .iter()
                .position(|&r| r == rate)
                .unwrap_or(options.rates_per_h.len());
            // The same arrival stream as the sweep's point at this rate, when it has one.
            let opts = PaperOptions {
                seed: options.seed.wrapping_add(k as u64),
                ..opts
            };
            row.points.push(sweep_point(
                &opts,
                0,
                &[ELASTIC_BATCH, ELASTIC_GPU],
                &mut || {
                    done += 1;
                    on_progress(done, total);
                },
            )?);
        }
        ablation.push(row);
    }
    let json =
        serde_json::to_string_pretty(&points).map_err(|e| SimError::Config(e.to_string()))?;
    let path = out_dir.join("sweep.json");
    std::fs::write(&path, json + "\n").map_err(|e| SimError::io(&path, e))?;
    let plots: [SweepPlot; 4] = [
        ("completed", "jobs completed", "completed jobs", |s| {
            s.completed as f64
        }),
        ("dropped", "jobs dropped", "dropped jobs", |s| {
            s.dropped as f64
        }),
        (
            "avg_jct",
            "average JCT of completed jobs",
            "average JCT (h)",
            |s| s.avg_jct_s / 3600.0,
        ),
        (
            "utilization",
            "GPU utilisation",
            "allocated share of GPUs",
            |s| s.gpu_utilization,
        ),
    ];
    for (stem, title, y_label, value) in plots {
        let series: Vec<Series> = policies
            .iter()
            .enumerate()
            .map(|(p, policy)| Series {
                label: policy.name.to_string(),
                points: points
                    .iter()
                    .map(|pt| (pt.rate_per_h, value(&pt.summaries[p])))
                    .collect(),
            })
            .collect();
        line_chart(
            &out_dir.join(stem),
            &Chart {
                title,
                x_label: "arrival rate (jobs/h)",
                y_label,
                x_axis: Axis::Log,
                series: &series,
                markers: true,
            },
        )?;
    }
    let json =
        serde_json::to_string_pretty(&ablation).map_err(|e| SimError::Config(e.to_string()))?;
    let path = out_dir.join("ablation.json");
    std::fs::write(&path, json + "\n").map_err(|e| SimError::io(&path, e))?;
    let path = out_dir.join("report.md");
    std::fs::write(&path, paper_report(options, &points, &ablation))
        .map_err(|e| SimError::io(&path, e))?;
    Ok(points)
}

/// One row of the ablation: a variant of the default setup, at each ablation rate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AblationRow {
    /// What changed.
    pub label: String,
    /// Whether this is the setup itself, nothing changed.
    pub base: bool,
    /// One point per ablation rate (elastic-batch and elastic-gpu only).
    pub points: Vec<SweepPoint>,
}

/// The ablation's variants: the setup as given (first), then one setting changed at a time.
pub(super) fn ablation_variants(options: &PaperOptions) -> Vec<(String, PaperOptions)> {
    if options.ablation_rates.is_empty() {
        return Vec::new();
    }
    let base = options.clone();
    let mut variants = vec![("this setup".to_string(), base.clone())];
    let mut add = |label: &str, change: &dyn Fn(&mut PaperOptions)| {
        let mut v = base.clone();
        change(&mut v);
        if v != base {
            variants.push((label.to_string(), v));
        }
    };
    add("min GPUs: 1 (each policy's own feasibility)", &|o| {
        o.min_gpus = MinGpusRule::One
    });
    add("min GPUs: ceil(user batch / memory) for both", &|o| {
        o.min_gpus = MinGpusRule::FixedBatchFits
    });
    add("min GPUs: requested GPUs for both", &|o| {
        o.min_gpus = MinGpusRule::Requested
    });
    add("user batch: the Pollux workloads' pairs", &|o| {
        o.user_batch = UserBatch::AsRequested
    });
    add("user batch: GPUs × single-GPU batch", &|o| {
        o.user_batch = UserBatch::PerGpuRecipe
    });
    add("batch range: 8× around the user's batch", &|o| {
        o.batch_range = BatchRangeRule::AroundUser { factor: 8.0 }
    });
    add("batch range: the model's validated range", &|o| {
        o.batch_range = BatchRangeRule::Model
    });
    add("objective: raw throughput", &|o| {
        o.utility = Utility::Throughput
    });
    add("objective: speedup", &|o| o.utility = Utility::Speedup);
    add("objective: fair (p = −1)", &|o| {
        o.utility = Utility::Fair { p: -1.0 }
    });
    add("restart cost: 0 s", &|o| o.restart_delay_s = 0.0);
    add("restart cost: 120 s", &|o| o.restart_delay_s = 120.0);
    variants
}

/// Runs `policies` on the workload of rate index `k`.
pub(super) fn sweep_point(
    options: &PaperOptions,
    k: usize,
    policies: &[PolicyInfo],
    tick: &mut dyn FnMut(),
) -> Result<SweepPoint> {
    let config = options.sim_config();
    let workload = generate(&options.generator(k))?;
    let mut summaries = Vec::new();
    let mut dropped_by_model = BTreeMap::new();
    let mut jcts = Vec::new();
    for &policy in policies {
        let mut collector = SweepCollector::default();
        let result = simulate(&workload, &config, policy, &mut collector)?;
        summaries.push(result.summary);
        dropped_by_model.insert(policy.name.to_string(), collector.dropped_by_model);
        jcts.push(collector.jct_by_id);
        tick();
    }
    let common: Vec<(&str, f64, f64)> = jcts[0]
        .iter()
        .filter_map(|(id, (model, eb))| jcts[1].get(id).map(|(_, eg)| (model.as_str(), *eb, *eg)))
        .collect();
    let n = common.len().max(1) as f64;
    let mut common_by_model: BTreeMap<String, (f64, f64, usize)> = BTreeMap::new();
    for &(model, eb, eg) in &common {
        let e = common_by_model.entry(model.to_string()).or_default();
        *e = (e.0 + eb, e.1 + eg, e.2 + 1);
    }
    for e in common_by_model.values_mut() {
        *e = (e.0 / e.2 as f64, e.1 / e.2 as f64, e.2);
    }
    Ok(SweepPoint {
        rate_per_h: options.rates_per_h[k],
        summaries,
        dropped_by_model,
        common_avg_jct_s: (
            common.iter().map(|c| c.1).sum::<f64>() / n,
            common.iter().map(|c| c.2).sum::<f64>() / n,
        ),
        common_jobs: common.len(),
        common_by_model,
    })
}

/// The report of [`reproduce_paper`] for `points` (the sweep) and `ablation`. Every measured
/// figure in it is computed from them; the others are settings, input facts or the paper's
/// published claims, labelled as such.
pub fn paper_report(
    options: &PaperOptions,
    points: &[SweepPoint],
    ablation: &[AblationRow],
) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Paper reproduction: elastic batch vs elastic GPUs vs static\n"
    );
    md.push_str(&PAPER_INTRO.replace("{validated_ranges}", &validated_ranges(options)));
    let spec = options.generator(0);
    let total_weight: f64 = spec.mix.iter().map(|m| m.weight).sum();
    let mix: Vec<String> = spec
        .mix
        .iter()
        .map(|m| format!("{} {:.0} %", m.model, m.weight / total_weight * 100.0))
        .collect();
    let _ = writeln!(
        md,
        "## Setup\n\n\
         - Poisson arrivals of {} jobs per rate on {} nodes × {} GPUs (seed {}), admit-or-drop, \
         the allocator on every arrival and completion; elastic-batch (GPUs and batch adapt), \
         elastic-gpu (GPUs adapt, batch fixed at the user's), static (the user's GPUs and batch).\n\
         - Jobs: the Pollux workloads' model mix and requested GPU counts \
         (`GeneratorSpec::pollux_mix`: {}); run time at the requested configuration log-normal, \
         median {:.0} min, σ = {}, {:.0} min to {:.0} h; a job is done after the samples its \
         requested configuration makes in that time (samples progress: any batch in range trains \
         equally well, the paper's claim).\n\
         - User's batch: {}.\n\
         - Batch range: {}.\n\
         - Fewest GPUs per job: {}; a fixed batch also needs `ceil(batch / max per-GPU batch)`.\n\
         - Objective: {} summed over jobs; {:.0} s without progress per (re)start.\n",
        options.jobs,
        options.cluster.nodes,
        options.cluster.gpus_per_node,
        options.seed,
        mix.join(", "),
        options.median_duration_s / 60.0,
        spec.duration_sigma,
        spec.duration_range_s.0 / 60.0,
        spec.duration_range_s.1 / 3600.0,
        match options.user_batch {
            UserBatch::AsRequested => "the `(GPUs, batch)` pairs of the Pollux workloads".to_string(),
            UserBatch::PerGpuRecipe =>
                "the model's single-GPU batch `B0` per requested GPU (linear scaling rule), capped by \
                 memory and the model's largest validated batch".to_string(),
        },
        match options.batch_range {
            BatchRangeRule::Model => "the model's validated `[B0, Bmax]`".to_string(),
            BatchRangeRule::AroundUser { factor } => format!(
                "{factor}× wide with the user's batch at its geometric middle, shifted into the \
                 model's validated `[B0, Bmax]`"
            ),
        },
        options.min_gpus.name(),
        options.utility,
        options.restart_delay_s
    );
    let _ = writeln!(
        md,
        "## Results\n\n| rate (jobs/h) | policy | completed | dropped | avg JCT (s) | p99 JCT (s) | GPU util | reallocations |\n|---|---|---|---|---|---|---|---|"
    );
    for pt in points {
        for s in &pt.summaries {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {:.0} | {:.0} | {:.3} | {} |",
                pt.rate_per_h,
                s.policy,
                s.completed,
                s.dropped,
                s.avg_jct_s,
                s.p99_jct_s,
                s.gpu_utilization,
                s.reallocations
            );
        }
    }
    let _ = writeln!(
        md,
        "\n## Ratios elastic-batch / elastic-gpu\n\n| rate (jobs/h) | completed ratio | dropped (eb / eg) | avg JCT: eg / eb | jobs both completed | their avg JCT eb / eg (s) | eg / eb on them |\n|---|---|---|---|---|---|---|"
    );
    for pt in points {
        let (eb, eg) = (&pt.summaries[0], &pt.summaries[1]);
        let (c_eb, c_eg) = pt.common_avg_jct_s;
        let _ = writeln!(
            md,
            "| {} | {:.2}× | {} / {} | {:.2}× | {} | {:.0} / {:.0} | {:.2}× |",
            pt.rate_per_h,
            eb.completed as f64 / eg.completed.max(1) as f64,
            eb.dropped,
            eg.dropped,
            eg.avg_jct_s / eb.avg_jct_s.max(1e-9),
            pt.common_jobs,
            c_eb,
            c_eg,
            c_eg / c_eb.max(1e-9)
        );
    }
    let models: Vec<&String> = {
        let mut m: Vec<&String> = points
            .iter()
            .flat_map(|pt| pt.common_by_model.keys())
            .collect();
        m.sort();
        m.dedup();
        m
    };
    let _ = writeln!(
        md,
        "\n## Where the JCT gain comes from: eg / eb avg JCT per model, jobs both completed\n\n| rate (jobs/h) | {} |\n|---|{}",
        models
            .iter()
            .map(|m| m.as_str())
            .collect::<Vec<_>>()
            .join(" | "),
        "---|".repeat(models.len())
    );
    for pt in points {
        let cells: Vec<String> = models
            .iter()
            .map(|m| {
                pt.common_by_model
                    .get(*m)
                    .map_or("—".to_string(), |&(eb, eg, n)| {
                        format!("{:.2}× ({n})", eg / eb.max(1e-9))
                    })
            })
            .collect();
        let _ = writeln!(md, "| {} | {} |", pt.rate_per_h, cells.join(" | "));
    }
    if !ablation.is_empty() {
        let _ = writeln!(
            md,
            "\n## Ablation: one setting changed at a time (elastic-batch vs elastic-gpu)\n\n| variant | rate (jobs/h) | completed eb / eg | dropped eb / eg | avg JCT eb / eg (s) | completed ratio | eg / eb avg JCT | eg / eb on jobs both completed |\n|---|---|---|---|---|---|---|---|"
        );
        for row in ablation {
            for pt in &row.points {
                let (eb, eg) = (&pt.summaries[0], &pt.summaries[1]);
                let (c_eb, c_eg) = pt.common_avg_jct_s;
                let _ = writeln!(
                    md,
                    "| {} | {} | {} / {} | {} / {} | {:.0} / {:.0} | {:.2}× | {:.2}× | {:.2}× |",
                    row.label,
                    pt.rate_per_h,
                    eb.completed,
                    eg.completed,
                    eb.dropped,
                    eg.dropped,
                    eb.avg_jct_s,
                    eg.avg_jct_s,
                    eb.completed as f64 / eg.completed.max(1) as f64,
                    eg.avg_jct_s / eb.avg_jct_s.max(1e-9),
                    c_eg / c_eb.max(1e-9)
                );
            }
        }
    }
    let _ = writeln!(
        md,
        "\n## Drops by model\n\n| rate (jobs/h) | policy | dropped jobs by model |\n|---|---|---|"
    );
    for pt in points {
        for (policy, by_model) in &pt.dropped_by_model {
            let list: Vec<String> = by_model.iter().map(|(m, n)| format!("{m} {n}")).collect();
            let _ = writeln!(
                md,
                "| {} | {} | {} |",
                pt.rate_per_h,
                policy,
                list.join(", ")
            );
        }
    }
    let _ = writeln!(
        md,
        "\n## Plots\n\n![completed](completed.svg) ![dropped](dropped.svg)\n![average JCT](avg_jct.svg) ![utilisation](utilization.svg)\n"
    );
    md.push_str(&paper_discussion(options, points, ablation));
    md
}

/// The spread of the mix's models' validated batch ranges, `Bmax / B0` ("32–128×"), from the
/// bundled profiles.
pub(super) fn validated_ranges(options: &PaperOptions) -> String {
    let spans: Vec<f64> = options
        .generator(0)
        .mix
        .iter()
        .filter_map(|m| {
            let eff = profiles::bundled(&m.model).ok()?.efficiency?;
            Some(f64::from(eff.largest_measured_batch()) / f64::from(eff.init_batch().max(1)))
        })
        .collect();
    if spans.is_empty() {
        return "are the models'".to_string();
    }
    let (lo, hi) = min_max(&spans);
    if lo == hi {
        format!("span {lo:.0}×")
    } else {
        format!("span {lo:.0}–{hi:.0}×")
    }
}

/// Why the default setup is the paper's, as far as we know it (MISSION.md §1–2).
pub(super) const PAPER_INTRO: &str = "The paper (Saxena et al., MASCOTS 2020) reports (published, not ours), for elastic-batch \
against elastic-gpu under Poisson arrivals with admit-or-drop, up to ~2× more jobs completed, ~3× \
fewer dropped and up to ~10× lower average JCT. Its full text was not available to us; every choice it leaves open is a \
`PaperOptions` setting, and the defaults follow its stated formulation:

- **A job's GPU range is the job's, not the policy's.** The formulation gives each job a GPU range \
`[gmin, gmax]` that every admitted job must get at least the bottom of, and defines elastic-gpu as \
the same optimizer with `Bmin = Bmax` = the user's batch. So `gmin` applies to both policies (a \
fixed batch adds `ceil(b / max per-GPU batch)`). A generated user states one GPU count, so that count \
is the job's `gmin`: elastic scaling grows jobs into idle GPUs and shrinks them back to what their \
users asked for, never below (`MinGpusRule::Requested`). Letting every job shrink to 1 GPU \
(`MinGpusRule::One`) assumes users accept any count, which the paper does not state; it is in the \
ablation.
- **Users pick a per-GPU batch, not a tuned global one.** The paper's premise is that users' batch \
sizes leave throughput on the table. A user requesting `g` GPUs keeps the model's standard \
single-GPU batch `B0` per GPU (`b = g × B0`, the linear scaling rule; `UserBatch::PerGpuRecipe`). \
This is exactly how Pollux's \"realistic\" workloads (`workloads-realistic/`, its paper's naive \
users) pick batches, and how trace jobs are mapped here. The bundled `workloads/` pairs are \
Pollux's \"TunedJobs\", well-chosen per job for its baselines (`UserBatch::AsRequested`, in the \
ablation). The GPU counts stay those of `workloads/`: the realistic ones are mostly 1 GPU.
- **The batch range is the paper's 8×.** The paper reports unchanged accuracy over an 8× range, so a \
job's range is 8× wide with the user's batch at its geometric middle, moved inside the model's \
validated `[B0, Bmax]` (`BatchRangeRule::AroundUser`). The validated ranges themselves {validated_ranges} \
(Pollux validated them with its own learning-rate adaptation and efficiency accounting).
- **Objective, progress, restarts.** The sum of per-job speedups (throughput over the job's own \
throughput at its fewest GPUs), as in the paper; progress in samples (the paper claims accuracy \
does not depend on the batch within the range, so statistical efficiency is out of scope); a \
checkpoint-restart costs 30 s of progress.

";

/// The elastic-batch, elastic-gpu and static summaries of a point, looked up by policy name.
pub(super) fn by_policy(pt: &SweepPoint, policy: PolicyInfo) -> Option<&Summary> {
    pt.summaries.iter().find(|s| s.policy == policy.name)
}

/// `num / den`, or `None` when `den` is not positive.
pub(super) fn ratio_of(num: f64, den: f64) -> Option<f64> {
    (den > 0.0).then(|| num / den)
}

/// "2 / 4 / 8 jobs/h" style rate lists: "8 and 16 jobs/h".
pub(super) fn rates_named(rates: &[f64]) -> String {
    if rates.is_empty() {
        "no rate".to_string()
    } else {
        format!("{} jobs/h", and_list(rates))
    }
}

/// The published claims of the paper (Saxena et al., MASCOTS 2020) for elastic-batch against
/// elastic-gpu: jobs completed, jobs dropped, average JCT. Not measurements of ours.
pub(super) const PAPER_PUBLISHED: &str =
    "up to ~2× more jobs completed, ~3× fewer dropped and up to ~10× \
lower average JCT";

/// "What drives the result", every measured figure computed from `points` and `ablation`.
pub(super) fn paper_discussion(
    options: &PaperOptions,
    points: &[SweepPoint],
    ablation: &[AblationRow],
) -> String {
    let mut md = format!(
        "## What drives the result\n\nEvery figure below is computed from the tables above (seed \
         {}, one arrival stream per rate); other seeds give other numbers.\n\n",
        options.seed
    );
    // Per model, pooled over the rates: elastic-gpu's over elastic-batch's average JCT on the
    // jobs both completed.
    let mut pooled: BTreeMap<&str, (f64, f64, usize)> = BTreeMap::new();
    for pt in points {
        for (model, &(eb, eg, n)) in &pt.common_by_model {
            let e = pooled.entry(model.as_str()).or_default();
            *e = (e.0 + eb * n as f64, e.1 + eg * n as f64, e.2 + n);
        }
    }
    let mut per_model: Vec<(&str, f64, usize)> = pooled
        .into_iter()
        .filter_map(|(m, (eb, eg, n))| ratio_of(eg, eb).map(|r| (m, r, n)))
        .collect();
    per_model.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    let model_ratios: Vec<f64> = per_model.iter().map(|m| m.1).collect();
    let mut bullets: Vec<String> = Vec::new();
    // Where the gain comes from.
    {
        let mut s = String::from("- **Where the JCT gain comes from.** ");
        match options.batch_range {
            BatchRangeRule::AroundUser { factor } => {
                let _ = write!(
                    s,
                    "Elastic-batch may move a job's batch within a range {factor}× wide with the \
                     user's batch at its geometric middle, so up to √{factor} = {} the user's batch \
                     unless the model's validated range shifts the window; ",
                    times(factor.sqrt())
                );
            }
            BatchRangeRule::Model => {
                s.push_str(
                    "Elastic-batch may move a job's batch anywhere in the model's validated range; ",
                );
            }
        }
        s.push_str("elastic-gpu keeps the user's batch, so more GPUs shrink its per-GPU batch.");
        if !per_model.is_empty() {
            let list: Vec<String> = per_model
                .iter()
                .map(|(m, r, n)| format!("{m} {} ({n} jobs)", times(*r)))
                .collect();
            let _ = write!(
                s,
                " On the jobs both policies completed, pooled over the rates, elastic-gpu's \
                 average JCT over elastic-batch's is, per model: {} (per rate in the per-model \
                 table).",
                list.join(", ")
            );
        }
        let all: Vec<(f64, f64)> = points
            .iter()
            .filter_map(|pt| {
                let eb = by_policy(pt, ELASTIC_BATCH)?;
                let eg = by_policy(pt, ELASTIC_GPU)?;
                Some((
                    ratio_of(eg.avg_jct_s, eb.avg_jct_s)?,
                    ratio_of(pt.common_avg_jct_s.1, pt.common_avg_jct_s.0)?,
                ))
            })
            .collect();
        if !all.is_empty() {
            let lower = all.iter().filter(|a| a.0 > 1.0).count();
            let at = if lower == all.len() {
                "at every rate".to_string()
            } else {
                format!("at {lower} of {} rates", all.len())
            };
            let overall: Vec<f64> = all.iter().map(|a| a.0).collect();
            let common: Vec<f64> = all.iter().map(|a| a.1).collect();
            let _ = write!(
                s,
                " Over all completed jobs elastic-batch's average JCT is below elastic-gpu's {at} \
                 (elastic-gpu / elastic-batch {}); on the jobs both completed, {}.",
                range_x(&overall),
                range_x(&common)
            );
        }
        bullets.push(s);
    }
    // Completions and drops.
    {
        let mut s = String::from("- **Completions and drops.** ");
        if options.min_gpus == MinGpusRule::Requested {
            s.push_str(
                "Both policies admit a job only when its requested GPUs fit beside the admitted \
                 jobs' minimums (every job's minimum is its request), so they differ only in how \
                 fast admitted jobs leave. ",
            );
        }
        let drops: Vec<String> = points
            .iter()
            .filter_map(|pt| {
                let eb = by_policy(pt, ELASTIC_BATCH)?;
                let eg = by_policy(pt, ELASTIC_GPU)?;
                Some(format!("{} at {}", drop_pair(eb, eg), pt.rate_per_h))
            })
            .collect();
        let completed: Vec<(f64, f64)> = points
            .iter()
            .filter_map(|pt| {
                let eb = by_policy(pt, ELASTIC_BATCH)?;
                let eg = by_policy(pt, ELASTIC_GPU)?;
                ratio_of(eb.completed as f64, eg.completed as f64).map(|r| (pt.rate_per_h, r))
            })
            .collect();
        if !drops.is_empty() {
            let _ = write!(
                s,
                "Dropped, elastic-batch / elastic-gpu, per rate (jobs/h): {}.",
                drops.join(", ")
            );
        }
        if let Some(&(rate, best)) = completed.iter().max_by(|a, b| a.1.total_cmp(&b.1)) {
            let ratios: Vec<f64> = completed.iter().map(|c| c.1).collect();
            let _ = write!(
                s,
                " Jobs completed, elastic-batch / elastic-gpu: {} (most {} at {} jobs/h).",
                range_x(&ratios),
                times(best),
                rate
            );
        }
        let vs_static: Vec<(f64, f64)> = points
            .iter()
            .filter_map(|pt| {
                let eg = by_policy(pt, ELASTIC_GPU)?;
                let st = by_policy(pt, STATIC)?;
                Some((
                    ratio_of(eg.completed as f64, st.completed as f64)?,
                    ratio_of(eg.avg_jct_s, st.avg_jct_s)?,
                ))
            })
            .collect();
        if !vs_static.is_empty() {
            let c: Vec<f64> = vs_static.iter().map(|v| v.0).collect();
            let j: Vec<f64> = vs_static.iter().map(|v| v.1).collect();
            let _ = write!(
                s,
                " Elastic-gpu against static: jobs completed {}, average JCT {} of static's",
                range_x(&c),
                range_x(&j)
            );
            s.push_str(if options.min_gpus == MinGpusRule::Requested {
                " (elastic-gpu cannot shrink jobs below their requests, and its fixed batch \
                 shrinks per GPU as it grows)."
            } else {
                " (its fixed batch shrinks per GPU as it grows)."
            });
        }
        bullets.push(s);
    }
    // The ablation.
    let rows: Vec<AblationRatios> = ablation.iter().filter_map(AblationRatios::of).collect();
    let base = rows.iter().find(|r| r.row.base);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    if let Some(b) = base {
        let (bc, bj, bcommon) = (&b.completed, &b.jct, &b.common);
        let mut s = format!(
            "- **Which setting matters (ablation, at {}).** Means over those rates: this setup \
             has completed ratio {}, elastic-gpu / elastic-batch average JCT {} ({} on the jobs \
             both completed). With one setting changed, furthest from this setup's JCT ratio \
             first:",
            rates_named(&options.ablation_rates),
            times(mean(bc)),
            times(mean(bj)),
            times(mean(bcommon))
        );
        let mut others: Vec<(&str, f64, f64, f64)> = rows
            .iter()
            .filter(|r| !r.row.base)
            .map(|r| {
                (
                    r.row.label.as_str(),
                    mean(&r.completed),
                    mean(&r.jct),
                    mean(&r.common),
                )
            })
            .collect();
        others.sort_by(|a, b| (b.2 - mean(bj)).abs().total_cmp(&(a.2 - mean(bj)).abs()));
        let others: Vec<String> = others
            .iter()
            .map(|(label, c, j, common)| {
                format!(
                    " *{label}* completed {}, JCT {} ({})",
                    times(*c),
                    times(*j),
                    times(*common)
                )
            })
            .collect();
        s.push_str(&others.join(";"));
        s.push_str(". Per rate in the ablation table.");
        bullets.push(s);
    }
    // Against the paper's published claims.
    {
        let mut s = format!(
            "- **Against the paper's published claims** ({PAPER_PUBLISHED}; not our \
             measurements). This sweep's most:"
        );
        let best = |f: &dyn Fn(&SweepPoint) -> Option<f64>| {
            points
                .iter()
                .filter_map(|pt| f(pt).map(|v| (pt.rate_per_h, v)))
                .max_by(|a, b| a.1.total_cmp(&b.1))
        };
        let mut parts = Vec::new();
        if let Some((rate, v)) = best(&|pt| {
            ratio_of(
                by_policy(pt, ELASTIC_BATCH)?.completed as f64,
                by_policy(pt, ELASTIC_GPU)?.completed as f64,
            )
        }) {
            parts.push(format!(" {} the jobs completed ({rate} jobs/h)", times(v)));
        }
        if let Some((rate, v)) = best(&|pt| {
            ratio_of(
                by_policy(pt, ELASTIC_GPU)?.dropped as f64,
                by_policy(pt, ELASTIC_BATCH)?.dropped as f64,
            )
        }) {
            parts.push(format!(
                " elastic-gpu's drops at {} elastic-batch's ({rate} jobs/h)",
                times(v)
            ));
        }
        if let Some((rate, v)) = best(&|pt| {
            ratio_of(
                by_policy(pt, ELASTIC_GPU)?.avg_jct_s,
                by_policy(pt, ELASTIC_BATCH)?.avg_jct_s,
            )
        }) {
            parts.push(format!(
                " elastic-gpu's average JCT at {} elastic-batch's ({rate} jobs/h)",
                times(v)
            ));
        }
        s.push_str(&parts.join(","));
        s.push('.');
        let ablation_best = rows
            .iter()
            .flat_map(|r| {
                r.jct
                    .iter()
                    .zip(&r.rates)
                    .map(move |(v, rate)| (r.row.label.as_str(), *rate, *v))
            })
            .max_by(|a, b| a.2.total_cmp(&b.2));
        if let Some((label, rate, v)) = ablation_best {
            let _ = write!(
                s,
                " Across the ablation the largest JCT ratio is {} (*{label}*, {rate} jobs/h).",
                times(v)
            );
        }
        if !model_ratios.is_empty() {
            let _ = write!(
                s,
                " The JCT gain comes from how much faster a job runs at a larger batch on its \
                 GPUs; the per-model gains above span {}. A 10× gain would need users far below their \
                 models' efficient batch with a range wide enough to reach it, or a JCT that \
                 counts something else (for example waiting time under queueing).",
                range_x(&model_ratios)
            );
        }
        s.push_str(" We did not tune toward the paper's numbers.");
        bullets.push(s);
    }
    md.push_str(&bullets.join("\n"));
    md.push_str("\n\n");
    // Weak points.
    md.push_str(
        "Weak points: the requested GPU counts are TunedJobs' (Pollux's realistic users mostly ask \
         for 1 GPU, which would make the two minimum-GPU rules nearly coincide; not run here), \
         the throughput tables are interpolated Pollux measurements on T4 GPUs (some non-monotone \
         in GPUs), ",
    );
    let spec = options.generator(0);
    let total_weight: f64 = spec.mix.iter().map(|m| m.weight).sum();
    if let (Some(top), true) = (
        spec.mix.iter().max_by(|a, b| a.weight.total_cmp(&b.weight)),
        model_ratios.len() > 1,
    ) {
        let _ = write!(
            md,
            "the overall ratios mix models whose gains differ ({}) in proportions set by the \
             mix ({} is {} of the jobs), ",
            range_x(&model_ratios),
            top.model,
            pct(top.weight / total_weight * 100.0)
        );
    }
    md.push_str(
        "and the paper's own job mix, cluster and rates are unknown. The absolute JCTs depend on \
         the generated run times; compare the ratios.\n",
    );
    md
}

/// An ablation row's ratios per rate, elastic-batch against elastic-gpu.
pub(super) struct AblationRatios<'a> {
    row: &'a AblationRow,
    rates: Vec<f64>,
    /// Jobs completed, elastic-batch / elastic-gpu.
    completed: Vec<f64>,
    /// Average JCT, elastic-gpu / elastic-batch.
    jct: Vec<f64>,
    /// The same on the jobs both completed.
    common: Vec<f64>,
}

impl<'a> AblationRatios<'a> {
    fn of(row: &'a AblationRow) -> Option<Self> {
        let mut r = AblationRatios {
            row,
            rates: Vec::new(),
            completed: Vec::new(),
            jct: Vec::new(),
            common: Vec::new(),
        };
        for pt in &row.points {
            let eb = by_policy(pt, ELASTIC_BATCH)?;
            let eg = by_policy(pt, ELASTIC_GPU)?;
            r.rates.push(pt.rate_per_h);
            r.completed
                .push(ratio_of(eb.completed as f64, eg.completed as f64)?);
            r.jct.push(ratio_of(eg.avg_jct_s, eb.avg_jct_s)?);
            r.common
                .push(ratio_of(pt.common_avg_jct_s.1, pt.common_avg_jct_s.0)?);
        }
        (!r.rates.is_empty()).then_some(r)
    }
}

/// "1 / 1" dropped, elastic-batch / elastic-gpu.
pub(super) fn drop_pair(eb: &Summary, eg: &Summary) -> String {
    format!("{} / {}", eb.dropped, eg.dropped)
}
