//! Reproductions: the paper's arrival-rate sweep and Pollux's simulator yardstick. Each writes a
//! `report.md` with tables and plots into its output directory.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use dlscale_core::allocator::{ELASTIC_BATCH, ELASTIC_GPU, OPTIMUS, STATIC, TIRESIAS};
use dlscale_core::profiles;
use dlscale_core::{
    Admission, Cluster, PolicyInfo, PolicyOptions, RestartAwareness, Settings, Utility,
};

use crate::config::{Knowledge, ProgressMode, SimConfig};
use crate::engine::simulate;
use crate::error::{Result, SimError};
use crate::metrics::{JobRecord, Outcome, SimObserver, Summary};
use crate::plot::{line_chart, Chart, Series};
use crate::workload::{
    bundled_pollux_workload, generate, with_fixed_batch_accumulation, with_gpu_cap,
    with_memory_cap, with_single_gpu_split, BatchRangeRule, GeneratorSpec, MinGpusRule, UserBatch,
    Workload, BUNDLED_POLLUX_WORKLOADS,
};

/// A sweep plot: file stem, title, y label, and the value plotted.
type SweepPlot = (
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
            schedule_on_events: true,
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
struct SweepCollector {
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
fn ablation_variants(options: &PaperOptions) -> Vec<(String, PaperOptions)> {
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
fn sweep_point(
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
fn validated_ranges(options: &PaperOptions) -> String {
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
const PAPER_INTRO: &str = "The paper (Saxena et al., MASCOTS 2020) reports (published, not ours), for elastic-batch \
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
fn by_policy(pt: &SweepPoint, policy: PolicyInfo) -> Option<&Summary> {
    pt.summaries.iter().find(|s| s.policy == policy.name)
}

/// `num / den`, or `None` when `den` is not positive.
fn ratio_of(num: f64, den: f64) -> Option<f64> {
    (den > 0.0).then(|| num / den)
}

/// "2 / 4 / 8 jobs/h" style rate lists: "8 and 16 jobs/h".
fn rates_named(rates: &[f64]) -> String {
    let names: Vec<String> = rates.iter().map(|r| r.to_string()).collect();
    match names.as_slice() {
        [] => "no rate".to_string(),
        [one] => format!("{one} jobs/h"),
        [rest @ .., last] => format!("{} and {last} jobs/h", rest.join(", ")),
    }
}

/// The published claims of the paper (Saxena et al., MASCOTS 2020) for elastic-batch against
/// elastic-gpu: jobs completed, jobs dropped, average JCT. Not measurements of ours.
const PAPER_PUBLISHED: &str = "up to ~2× more jobs completed, ~3× fewer dropped and up to ~10× \
lower average JCT";

/// "What drives the result", every measured figure computed from `points` and `ablation`.
fn paper_discussion(
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
struct AblationRatios<'a> {
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
fn drop_pair(eb: &Summary, eg: &Summary) -> String {
    format!("{} / {}", eb.dropped, eg.dropped)
}

/// Settings of [`reproduce_pollux`].
#[derive(Debug, Clone, PartialEq)]
pub struct PolluxOptions {
    /// Which bundled workloads (1 to 8).
    pub workloads: Vec<usize>,
}

impl Default for PolluxOptions {
    /// All eight.
    fn default() -> Self {
        PolluxOptions {
            workloads: (1..=BUNDLED_POLLUX_WORKLOADS).collect(),
        }
    }
}

/// One row of the Pollux table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolluxRow {
    /// Which run it is (the key the report's prose looks rows up by).
    pub id: PolluxRun,
    /// What ran.
    pub label: String,
    /// Published mean average JCT of the comparable system over the same workloads, s, if any.
    pub published_s: Option<f64>,
    /// The comparable system.
    pub published_as: String,
    /// Which table of the report it belongs to.
    pub part: PolluxPart,
    /// One summary per workload, in [`PolluxOptions::workloads`] order.
    pub summaries: Vec<Summary>,
}

/// The runs of [`reproduce_pollux`], one row each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolluxRun {
    /// Elastic-batch learning each job's model from its simulated reports: the headline.
    ElasticBatch,
    /// Elastic-batch with the true models from the start (a bound, not a result).
    ElasticBatchOracle,
    /// The `optimus` policy with the true models and the artifact's accumulation and ncf rules.
    OptimusOracle,
    /// Elastic-gpu, learned, no accumulation.
    ElasticGpu,
    /// Tiresias at the artifact's 57,600 GPU-s threshold.
    TiresiasArtifact,
    /// Tiresias at dlscale-core's default threshold.
    TiresiasDefault,
    /// Static: FIFO with backfill.
    Static,
    /// Elastic-gpu with accumulation.
    ElasticGpuAccumulation,
    /// Elastic-gpu with accumulation and ncf on one GPU.
    ElasticGpuArtifact,
    /// Elastic-gpu with accumulation and ncf on one GPU, true models (Optimus+Oracle's rules and
    /// knowledge).
    ElasticGpuArtifactOracle,
    /// Elastic-gpu with accumulation and ncf on one GPU, no restart awareness.
    ElasticGpuArtifactNoRestartAwareness,
    /// Optimus (oracle) without accumulation.
    OptimusNoAccumulation,
    /// Optimus (oracle) with accumulation, ncf free to scale.
    OptimusAccumulation,
    /// The Optimus+Oracle row without the defragmenting repack.
    OptimusOracleNoDefrag,
    /// Elastic-batch (learned) without the defragmenting repack.
    ElasticBatchNoDefrag,
    /// Elastic-batch (learned) with ncf on one GPU.
    ElasticBatchNcfOneGpu,
    /// Optimus (oracle) under all four artifact rules.
    OptimusAllRules,
    /// Elastic-gpu (learned) under all four artifact rules.
    ElasticGpuAllRules,
    /// Elastic-batch (learned) under all four artifact rules.
    ElasticBatchAllRules,
    /// Tiresias (57,600 GPU-s) with yolov3 at 8 per GPU.
    TiresiasYolov3Local8,
    /// Tiresias (57,600 GPU-s) with yolov3 at 8 per GPU and the one-GPU split.
    TiresiasYolov3Local8Split,
    /// Tiresias (57,600 GPU-s) without the defragmenting repack.
    TiresiasNoDefrag,
}

/// A system whose per-workload results Pollux's artifact publishes (not measurements of ours).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// Optimus+Oracle.
    OptimusOracle,
    /// Tiresias.
    Tiresias,
    /// Pollux.
    Pollux,
}

impl Published {
    /// Its name in Pollux's paper.
    pub fn name(self) -> &'static str {
        match self {
            Published::OptimusOracle => "Optimus+Oracle",
            Published::Tiresias => "Tiresias",
            Published::Pollux => "Pollux",
        }
    }

    /// Its published average JCT on each bundled workload, s (workload 1 first). From Pollux's
    /// artifact, `simulator/results-jobload/*-1.0/summary.json`, branch `osdi21-artifact`; their
    /// means over the eight are the published numbers.
    pub fn per_workload(self) -> &'static [f64; BUNDLED_POLLUX_WORKLOADS] {
        match self {
            Published::OptimusOracle => &[
                4087.0, 6914.0, 3944.0, 5968.0, 5656.0, 5302.0, 7291.0, 6294.0,
            ],
            Published::Tiresias => &[
                2474.0, 5145.0, 3876.0, 3280.0, 3501.0, 3470.0, 5480.0, 5080.0,
            ],
            Published::Pollux => &[
                2089.0, 3323.0, 2188.0, 2721.0, 2674.0, 2446.0, 3616.0, 2952.0,
            ],
        }
    }

    /// Its published result on bundled workload `n`, s.
    pub fn on_workload(self, n: usize) -> Option<f64> {
        n.checked_sub(1)
            .and_then(|i| self.per_workload().get(i))
            .copied()
    }

    /// The mean of its published results over `workloads`, s (`None` if one is unknown or
    /// there are none).
    pub fn mean_over(self, workloads: &[usize]) -> Option<f64> {
        let per = workloads
            .iter()
            .map(|&n| self.on_workload(n))
            .collect::<Option<Vec<f64>>>()?;
        (!per.is_empty()).then(|| per.iter().sum::<f64>() / per.len() as f64)
    }
}

/// The tables of the Pollux report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolluxPart {
    /// The main comparison.
    Main,
    /// Variants of the baselines that test why they land where they do.
    BaselineAnalysis,
}

/// Rules of Pollux's artifact simulator that a run may adopt, applied to the workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ArtifactRules {
    /// A fixed batch may run on fewer GPUs than its memory needs, by gradient accumulation
    /// ([`with_fixed_batch_accumulation`]).
    pub accumulation: bool,
    /// `ncf` jobs get one GPU at most ([`with_gpu_cap`]).
    pub ncf_one_gpu: bool,
    /// `yolov3` micro-batches of at most 8 per GPU ([`with_memory_cap`]).
    pub yolov3_local_8: bool,
    /// A batch above the initial one runs as two micro-steps on one GPU
    /// ([`with_single_gpu_split`]).
    pub single_gpu_split: bool,
}

impl ArtifactRules {
    /// `workload` under these rules.
    pub fn apply(&self, workload: &Workload) -> Result<Workload> {
        let mut w = if self.accumulation {
            with_fixed_batch_accumulation(workload)?
        } else {
            workload.clone()
        };
        if self.ncf_one_gpu {
            w = with_gpu_cap(&w, "ncf", 1);
        }
        if self.yolov3_local_8 {
            w = with_memory_cap(&w, "yolov3", 8)?;
        }
        if self.single_gpu_split {
            w = with_single_gpu_split(&w);
        }
        Ok(w)
    }
}

/// One run of [`reproduce_pollux`].
struct PolluxVariant {
    id: PolluxRun,
    label: String,
    published: Option<Published>,
    part: PolluxPart,
    policy: PolicyInfo,
    config: SimConfig,
    rules: ArtifactRules,
}

/// The runs [`reproduce_pollux`] makes, in order: each one's id, label and table.
pub fn pollux_runs() -> Vec<(PolluxRun, String, PolluxPart)> {
    pollux_variants()
        .into_iter()
        .map(|v| (v.id, v.label, v.part))
        .collect()
}

/// The Tiresias threshold of Pollux's artifact, GPU-s (16 GPU-hours).
const ARTIFACT_TIRESIAS_THRESHOLD_GPU_S: f64 = 57_600.0;

/// The runs of [`reproduce_pollux`]: the main table, then the baseline analysis.
fn pollux_variants() -> Vec<PolluxVariant> {
    use PolluxRun as R;
    let base = pollux_config();
    let artifact_tiresias = SimConfig {
        policy_options: PolicyOptions {
            tiresias_threshold_gpu_s: ARTIFACT_TIRESIAS_THRESHOLD_GPU_S,
        },
        ..base.clone()
    };
    let no_restart_awareness = SimConfig {
        settings: Settings {
            restart: RestartAwareness::default(),
            ..base.settings
        },
        ..base.clone()
    };
    let no_defrag = |c: &SimConfig| SimConfig {
        defragment_moves_per_job: 0,
        ..c.clone()
    };
    let none = ArtifactRules::default();
    let accum = ArtifactRules {
        accumulation: true,
        ..none
    };
    let artifact = ArtifactRules {
        accumulation: true,
        ncf_one_gpu: true,
        ..none
    };
    let artifact_all = ArtifactRules {
        accumulation: true,
        ncf_one_gpu: true,
        yolov3_local_8: true,
        single_gpu_split: true,
    };
    let yolo8 = ArtifactRules {
        yolov3_local_8: true,
        ..none
    };
    let yolo8_split = ArtifactRules {
        yolov3_local_8: true,
        single_gpu_split: true,
        ..none
    };
    let main = |id, label: &str, published, policy, config, rules| PolluxVariant {
        id,
        label: label.to_string(),
        published,
        part: PolluxPart::Main,
        policy,
        config,
        rules,
    };
    let why = |id, label: &str, policy, config, rules| PolluxVariant {
        id,
        label: label.to_string(),
        published: None,
        part: PolluxPart::BaselineAnalysis,
        policy,
        config,
        rules,
    };
    let gpu = ELASTIC_GPU;
    // Optimus+Oracle is an oracle by definition: it sees the true step times and remaining work.
    let oracle = SimConfig {
        knowledge: Knowledge::Oracle,
        ..base.clone()
    };
    let tiresias_default = format!(
        "tiresias (threshold {} GPU-s)",
        int(base.policy_options.tiresias_threshold_gpu_s)
    );
    let tiresias_artifact = format!(
        "tiresias (threshold {} GPU-s, Pollux's artifact)",
        int(ARTIFACT_TIRESIAS_THRESHOLD_GPU_S)
    );
    vec![
        main(
            R::ElasticBatch,
            "elastic-batch, learned (fair p=-1, restart-aware, min gain 5 %)",
            Some(Published::Pollux),
            ELASTIC_BATCH,
            base.clone(),
            none,
        ),
        main(
            R::ElasticBatchOracle,
            "elastic-batch + oracle (true models from the start; not a result)",
            Some(Published::Pollux),
            ELASTIC_BATCH,
            oracle.clone(),
            none,
        ),
        main(
            R::OptimusOracle,
            "optimus+oracle (Pollux's artifact: greedy, accumulation, ncf on 1 GPU)",
            Some(Published::OptimusOracle),
            OPTIMUS,
            oracle.clone(),
            artifact,
        ),
        main(
            R::ElasticGpu,
            "elastic-gpu (same settings, batch fixed, no accumulation)",
            None,
            gpu,
            base.clone(),
            none,
        ),
        main(
            R::TiresiasArtifact,
            &tiresias_artifact,
            Some(Published::Tiresias),
            TIRESIAS,
            artifact_tiresias.clone(),
            none,
        ),
        main(
            R::TiresiasDefault,
            &tiresias_default,
            Some(Published::Tiresias),
            TIRESIAS,
            base.clone(),
            none,
        ),
        main(
            R::Static,
            "static (FIFO with backfill)",
            None,
            STATIC,
            base.clone(),
            none,
        ),
        why(
            R::ElasticGpuAccumulation,
            "elastic-gpu + accumulation",
            gpu,
            base.clone(),
            accum,
        ),
        why(
            R::ElasticGpuArtifact,
            "elastic-gpu + accumulation + ncf on 1 GPU",
            gpu,
            base.clone(),
            artifact,
        ),
        why(
            R::ElasticGpuArtifactOracle,
            "elastic-gpu + accumulation + ncf on 1 GPU + oracle (Optimus+Oracle's rules and knowledge)",
            gpu,
            oracle.clone(),
            artifact,
        ),
        why(
            R::ElasticGpuArtifactNoRestartAwareness,
            "elastic-gpu + accumulation + ncf on 1 GPU, no restart awareness",
            gpu,
            no_restart_awareness.clone(),
            artifact,
        ),
        why(
            R::OptimusNoAccumulation,
            "optimus (greedy, oracle), no accumulation",
            OPTIMUS,
            oracle.clone(),
            none,
        ),
        why(
            R::OptimusAccumulation,
            "optimus + accumulation (ncf free to scale)",
            OPTIMUS,
            oracle.clone(),
            accum,
        ),
        why(
            R::OptimusOracleNoDefrag,
            "optimus+oracle row, no defragmenting repack",
            OPTIMUS,
            no_defrag(&oracle),
            artifact,
        ),
        why(
            R::ElasticBatchNoDefrag,
            "elastic-batch, learned, no defragmenting repack",
            ELASTIC_BATCH,
            no_defrag(&base),
            none,
        ),
        why(
            R::ElasticBatchNcfOneGpu,
            "elastic-batch + ncf on 1 GPU",
            ELASTIC_BATCH,
            base.clone(),
            ArtifactRules {
                ncf_one_gpu: true,
                ..none
            },
        ),
        why(
            R::OptimusAllRules,
            "optimus + all four artifact rules (+ yolov3 at 8 per GPU, 1-GPU split)",
            OPTIMUS,
            oracle.clone(),
            artifact_all,
        ),
        why(
            R::ElasticGpuAllRules,
            "elastic-gpu + all four artifact rules",
            gpu,
            base.clone(),
            artifact_all,
        ),
        why(
            R::ElasticBatchAllRules,
            "elastic-batch + all four artifact rules",
            ELASTIC_BATCH,
            base.clone(),
            artifact_all,
        ),
        why(
            R::TiresiasYolov3Local8,
            "tiresias (57,600 GPU-s) + yolov3 at 8 per GPU",
            TIRESIAS,
            artifact_tiresias.clone(),
            yolo8,
        ),
        why(
            R::TiresiasYolov3Local8Split,
            "tiresias (57,600 GPU-s) + yolov3 at 8 per GPU + 1-GPU split",
            TIRESIAS,
            artifact_tiresias.clone(),
            yolo8_split,
        ),
        why(
            R::TiresiasNoDefrag,
            "tiresias (57,600 GPU-s), no defragmenting repack",
            TIRESIAS,
            no_defrag(&artifact_tiresias),
            none,
        ),
    ]
}

impl PolluxRow {
    /// Mean over workloads of the average JCT, s.
    pub fn mean_avg_jct_s(&self) -> f64 {
        self.summaries.iter().map(|s| s.avg_jct_s).sum::<f64>() / self.summaries.len().max(1) as f64
    }

    /// Mean over workloads of the reallocation count.
    pub fn mean_reallocations(&self) -> f64 {
        self.summaries
            .iter()
            .map(|s| s.reallocations as f64)
            .sum::<f64>()
            / self.summaries.len().max(1) as f64
    }

    /// Each workload's average JCT, s, formatted for a table cell.
    fn per_workload_jct(&self) -> String {
        let per: Vec<String> = self
            .summaries
            .iter()
            .map(|s| format!("{:.0}", s.avg_jct_s))
            .collect();
        per.join(", ")
    }
}

/// The settings of Pollux's simulator: 16 nodes × 4 GPUs, allocator every 60 s only, 30 s per
/// restart, goodput progress, queue admission with backfill.
pub fn pollux_config() -> SimConfig {
    SimConfig {
        cluster: Cluster {
            nodes: 16,
            gpus_per_node: 4,
        },
        interval_s: Some(60.0),
        schedule_on_events: false,
        restart_delay_s: 30.0,
        progress: ProgressMode::Goodput,
        settings: Settings {
            utility: Utility::Fair { p: -1.0 },
            admission: Admission::Queue,
            backfill: true,
            restart: RestartAwareness {
                min_gain: 0.05,
                cost_s: 30.0,
            },
            ..Settings::default()
        },
        ..SimConfig::default()
    }
}

/// Pollux's yardstick: the bundled workloads under [`pollux_config`], for elastic-batch,
/// elastic-gpu, Tiresias (Pollux's 16 GPU-hour threshold and 3,200 GPU-s) and static. Writes
/// `report.md`, `pollux.json` and a plot into `out_dir`.
pub fn reproduce_pollux(
    out_dir: &Path,
    options: &PolluxOptions,
    on_progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<PolluxRow>> {
    if options.workloads.is_empty() {
        return Err(SimError::Config("no workload to run".into()));
    }
    std::fs::create_dir_all(out_dir).map_err(|e| SimError::io(out_dir, e))?;
    let variants = pollux_variants();
    let mut workload_sets: Vec<(ArtifactRules, Vec<Workload>)> = Vec::new();
    let bundled = options
        .workloads
        .iter()
        .map(|&n| bundled_pollux_workload(n))
        .collect::<Result<Vec<_>>>()?;
    let total = variants.len() * bundled.len();
    let mut rows = Vec::new();
    let mut done = 0;
    for v in variants {
        if !workload_sets.iter().any(|(r, _)| *r == v.rules) {
            let set = bundled
                .iter()
                .map(|w| v.rules.apply(w))
                .collect::<Result<Vec<_>>>()?;
            workload_sets.push((v.rules, set));
        }
        let workloads = workload_sets
            .iter()
            .find(|(r, _)| *r == v.rules)
            .map(|(_, set)| set)
            .ok_or_else(|| SimError::Config("workload set missing".into()))?;
        let mut summaries = Vec::new();
        for workload in workloads {
            summaries.push(simulate(workload, &v.config, v.policy, &mut ())?.summary);
            done += 1;
            on_progress(done, total);
        }
        rows.push(PolluxRow {
            id: v.id,
            label: v.label,
            published_s: v.published.and_then(|p| p.mean_over(&options.workloads)),
            published_as: v.published.map_or("", Published::name).to_string(),
            part: v.part,
            summaries,
        });
    }
    let json = serde_json::to_string_pretty(&rows).map_err(|e| SimError::Config(e.to_string()))?;
    let path = out_dir.join("pollux.json");
    std::fs::write(&path, json + "\n").map_err(|e| SimError::io(&path, e))?;
    let series: Vec<Series> = rows
        .iter()
        .filter(|r| r.part == PolluxPart::Main)
        .map(|r| Series {
            label: r.label.clone(),
            points: r
                .summaries
                .iter()
                .zip(&options.workloads)
                .map(|(s, &n)| (n as f64, s.avg_jct_s))
                .collect(),
        })
        .collect();
    line_chart(
        &out_dir.join("avg_jct_by_workload"),
        &Chart {
            title: "Average JCT per Pollux workload",
            x_label: "workload",
            y_label: "average JCT (s)",
            series: &series,
            markers: true,
        },
    )?;
    let path = out_dir.join("report.md");
    std::fs::write(&path, pollux_report(options, &rows)).map_err(|e| SimError::io(&path, e))?;
    Ok(rows)
}

/// Rows of one Pollux run, looked up by [`PolluxRun`], with the run's workloads.
struct PolluxRows<'a> {
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
fn workloads_named(ns: &[usize]) -> String {
    let names: Vec<String> = ns.iter().map(|n| n.to_string()).collect();
    match names.as_slice() {
        [] => "no workload".to_string(),
        [one] => format!("workload {one}"),
        [rest @ .., last] => format!("workloads {} and {last}", rest.join(", ")),
    }
}

/// Input facts of the bundled workloads the prose cites (not measurements).
struct WorkloadFacts {
    /// yolov3 jobs per workload, in the run's order.
    yolov3_jobs: Vec<(usize, usize)>,
    /// Per model, the most GPUs a fixed batch of its jobs needs without accumulation
    /// (`ceil(batch / max per-GPU batch)`), and that batch; models needing one GPU left out.
    fixed_batch_needs: Vec<(String, u32, u32)>,
}

fn workload_facts(workloads: &[usize]) -> Option<WorkloadFacts> {
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
fn pollux_headline(r: &PolluxRows) -> String {
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
fn pollux_differences(r: &PolluxRows, config: &SimConfig) -> String {
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
fn pollux_findings(r: &PolluxRows, facts: Option<&WorkloadFacts>) -> String {
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

const POLLUX_DIFFERENCES: &str = "## How this simulator differs from Pollux's

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

const POLLUX_OPTIMUS_NOTE: &str =
    "- The Optimus+Oracle row is the artifact's baseline re-implemented (the `optimus` policy with
  gradient accumulation and ncf on one GPU, both part of that baseline's definition; see below).
  elastic-gpu is dlscale's own fixed-batch baseline (the exact DP over the same fair goodput as
  elastic-batch, a fixed batch must fit GPU memory): it has no published counterpart.
";

const POLLUX_BASELINES_INTRO: &str = "## Why the baselines differ from the published numbers

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

/// `x` rounded to a whole number with thousands separators ("12,947"; "−47").
fn int(x: f64) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    // The same rounding as the tables' `{:.0}`.
    let digits = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if x < 0.0 && digits != "0" {
        format!("−{out}")
    } else {
        out
    }
}

/// Seconds: "3,417 s".
fn secs(x: f64) -> String {
    format!("{} s", int(x))
}

/// A signed difference in seconds: "+47 s", "−3 s", "±0 s".
fn signed_secs(d: f64) -> String {
    match int(d).as_str() {
        "0" => "±0 s".to_string(),
        s if s.starts_with('−') => format!("{s} s"),
        s => format!("+{s} s"),
    }
}

/// A percentage's magnitude: one decimal below 10 %, none above ("2.7 %", "62 %").
fn pct(p: f64) -> String {
    let p = p.abs();
    if p < 9.95 {
        format!("{p:.1} %")
    } else {
        format!("{p:.0} %")
    }
}

/// The relative change from `from` to `to`, signed: "+2.7 %", "−62 %", "±0.0 %".
fn signed_pct(from: f64, to: f64) -> String {
    let p = (to / from - 1.0) * 100.0;
    let magnitude = pct(p);
    if magnitude == "0.0 %" {
        "±0.0 %".to_string()
    } else if p > 0.0 {
        format!("+{magnitude}")
    } else {
        format!("−{magnitude}")
    }
}

/// A ratio: "1.24×".
fn times(r: f64) -> String {
    format!("{r:.2}×")
}

/// How `a` compares with `b`, the direction from the sign: "24 % higher than", "12 % lower
/// than", "the same as" (within 0.05 %).
fn compared(a: f64, b: f64) -> String {
    let p = (a / b - 1.0) * 100.0;
    if pct(p) == "0.0 %" {
        "the same as".to_string()
    } else if p > 0.0 {
        format!("{} higher than", pct(p))
    } else {
        format!("{} lower than", pct(p))
    }
}

/// How a value moves from `from` to `to`: "rises from 2,614 s to 2,685 s (+2.7 %)", "falls from
/// …", or "stays at 3,740 s" when both round alike.
fn change(from: f64, to: f64) -> String {
    if int(from) == int(to) {
        format!("stays at {}", secs(from))
    } else {
        format!(
            "{} from {} to {} ({})",
            if to > from { "rises" } else { "falls" },
            secs(from),
            secs(to),
            signed_pct(from, to)
        )
    }
}

/// The range of `values` in seconds: "11,493–21,324 s" (one value: "3,249 s").
fn range_secs(values: &[f64]) -> String {
    let (lo, hi) = min_max(values);
    if int(lo) == int(hi) {
        secs(lo)
    } else {
        format!("{}–{}", int(lo), secs(hi))
    }
}

/// The range of ratios: "2.21–2.43×" (one value: "2.43×").
fn range_x(values: &[f64]) -> String {
    let (lo, hi) = min_max(values);
    if times(lo) == times(hi) {
        times(lo)
    } else {
        format!("{lo:.2}–{}", times(hi))
    }
}

fn min_max(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        })
}
