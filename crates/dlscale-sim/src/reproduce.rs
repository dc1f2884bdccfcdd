//! Reproductions: the paper's arrival-rate sweep and Pollux's simulator yardstick. Each writes a
//! `report.md` with tables and plots into its output directory.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use dlscale_core::allocator::{ELASTIC_BATCH, ELASTIC_GPU, OPTIMUS, STATIC, TIRESIAS};
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
    for (label, variant) in &variants {
        let mut row = AblationRow {
            label: label.clone(),
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
    /// One point per ablation rate (elastic-batch and elastic-gpu only).
    pub points: Vec<SweepPoint>,
}

/// The ablation's variants: the setup as given, then one setting changed at a time.
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

fn paper_report(options: &PaperOptions, points: &[SweepPoint], ablation: &[AblationRow]) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Paper reproduction: elastic batch vs elastic GPUs vs static\n"
    );
    md.push_str(PAPER_INTRO);
    let _ = writeln!(
        md,
        "## Setup\n\n\
         - Poisson arrivals of {} jobs per rate on {} nodes × {} GPUs (seed {}), admit-or-drop, \
         the allocator on every arrival and completion; elastic-batch (GPUs and batch adapt), \
         elastic-gpu (GPUs adapt, batch fixed at the user's), static (the user's GPUs and batch).\n\
         - Jobs: the Pollux workloads' model mix and requested GPU counts \
         (`GeneratorSpec::pollux_mix`: ncf 39 %, cifar10 39 %, deepspeech2 9 %, bert 7 %, yolov3 \
         5 %, imagenet 2 %); run time at the requested configuration log-normal, median {:.0} min, \
         σ = 1, 5 min to 8 h; a job is done after the samples its requested configuration makes in \
         that time (samples progress: any batch in range trains equally well, the paper's claim).\n\
         - User's batch: {}.\n\
         - Batch range: {}.\n\
         - Fewest GPUs per job: {}; a fixed batch also needs `ceil(batch / max per-GPU batch)`.\n\
         - Objective: {} summed over jobs; {:.0} s without progress per (re)start.\n",
        options.jobs,
        options.cluster.nodes,
        options.cluster.gpus_per_node,
        options.seed,
        options.median_duration_s / 60.0,
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
    md.push_str(PAPER_DISCUSSION);
    md
}

/// Why the default setup is the paper's, as far as we know it (MISSION.md §1–2).
const PAPER_INTRO: &str = "The paper (Saxena et al., MASCOTS 2020) reports, for elastic-batch against elastic-gpu \
under Poisson arrivals with admit-or-drop, up to ~2× more jobs completed, ~3× fewer dropped and up \
to ~10× lower average JCT. Its full text was not available to us; every choice it leaves open is a \
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
validated `[B0, Bmax]` (`BatchRangeRule::AroundUser`). The validated ranges themselves span 32–128× \
(Pollux validated them with its own learning-rate adaptation and efficiency accounting).
- **Objective, progress, restarts.** The sum of per-job speedups (throughput over the job's own \
throughput at its fewest GPUs), as in the paper; progress in samples (the paper claims accuracy \
does not depend on the batch within the range, so statistical efficiency is out of scope); a \
checkpoint-restart costs 30 s of progress.

";

const PAPER_DISCUSSION: &str = "## What drives the result

Numbers below are from the defaults (seed 1); other seeds move the ratios by about ±0.15.

- **The gain is per-GPU throughput from a larger batch.** With the users' per-GPU batch, elastic-batch \
runs each job at up to 2.8× its user's batch on the same GPUs or more. That speeds jobs up about 2× \
for cifar10, deepspeech2 and bert, 1.2–1.4× for yolov3 and imagenet (their `B0` per GPU is already \
half to all of memory) and about 6× for ncf, whose step time barely grows with the batch (see the \
per-model table). Average JCT is 2.6–2.9× lower at every rate, 2.8–4× on the jobs both policies \
completed (at overload elastic-gpu's survivors are the shorter jobs).
- **Completions and drops follow from speed, not from admission.** Both policies admit a job only \
when its requested GPUs fit beside the admitted jobs' minimums, so they differ only in how fast \
admitted jobs leave. Faster jobs free GPUs sooner: about 3× fewer drops at 8–16 jobs/h (12 vs 37, \
20 vs 62) and 1.3–1.4× more jobs completed at 32–64 jobs/h. Elastic-gpu does little better than \
static here: the users' batches stop it from scaling a job far (`b / g` shrinks) and it cannot \
shrink jobs below their requests.
- **Which factor matters (ablation).** The user's batch matters most: with Pollux's tuned pairs \
(TunedJobs) elastic-batch gains nothing (completed 0.9–1.0×, JCT 0.97–1.07×), as the paper says of \
jobs whose batch cannot usefully vary. The minimum-GPU rule decides whether the gain survives load: \
with every job allowed down to 1 GPU, elastic-batch admits more jobs (its minimum holds `Bmin`, not \
the user's batch) but the sum of speedups then packs them onto about one GPU each (scaling is \
sublinear), so at 32–64 jobs/h it completes only ~1.1× more and its JCT is no better than \
elastic-gpu's; this is what the earlier version of this experiment ran. Imposing the fixed-batch \
minimum on both lands between (1.04–1.2× completed, 1.35–1.4× JCT). A wider batch range (the \
validated one) raises the JCT gain to ~3.3× (~4.9× on common jobs). Raw throughput as the objective \
gives about the same as speedups; the fair objective (beyond the paper) halves the JCT gain because \
it spends GPUs on the slowest jobs. Restart cost (0–120 s) moves the ratios by about 10 %.
- **Where it falls short of the paper.** At most ~1.4× more jobs completed (paper ~2×), ~3× fewer \
drops at moderate load but ~1.4× at overload, ~3× lower JCT (paper up to ~10×). We did not find a \
setting we could defend that gives 10×: the JCT gain is bounded by how much faster a job runs at up \
to 2.8× its user's batch, which these profiles put at 1.2–6×. A 10× gain needs users far below \
their models' efficient batch with a range wide enough to reach it, or a JCT that counts something \
else (for example waiting time under queueing). We did not tune toward the paper's numbers.

Weak points: the requested GPU counts are TunedJobs' (Pollux's realistic users mostly ask for 1 \
GPU, which would make the two minimum-GPU rules nearly coincide; not run here), the throughput tables are interpolated Pollux measurements on T4 GPUs (some \
non-monotone in GPUs), ncf (39 % of jobs) dominates the average JCT ratio, and the paper's own job \
mix, cluster and rates are unknown. The absolute JCTs depend on the generated run times; compare \
the ratios.
";

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
    /// What ran.
    pub label: String,
    /// Published mean average JCT of the comparable system, s, if any.
    pub published_s: Option<f64>,
    /// The comparable system.
    pub published_as: String,
    /// Which table of the report it belongs to.
    pub part: PolluxPart,
    /// One summary per workload.
    pub summaries: Vec<Summary>,
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
    label: &'static str,
    published_s: Option<f64>,
    published_as: &'static str,
    part: PolluxPart,
    policy: PolicyInfo,
    config: SimConfig,
    rules: ArtifactRules,
}

/// The runs of [`reproduce_pollux`]: the main table, then the baseline analysis.
fn pollux_variants() -> Vec<PolluxVariant> {
    let base = pollux_config();
    let artifact_tiresias = SimConfig {
        policy_options: PolicyOptions {
            tiresias_threshold_gpu_s: 57_600.0,
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
    let main = |label, published_s, published_as, policy, config| PolluxVariant {
        label,
        published_s,
        published_as,
        part: PolluxPart::Main,
        policy,
        config,
        rules: none,
    };
    let why = |label, policy, config, rules| PolluxVariant {
        label,
        published_s: None,
        published_as: "",
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
    vec![
        main(
            "elastic-batch, learned (fair p=-1, restart-aware, min gain 5 %)",
            Some(2751.0),
            "Pollux",
            ELASTIC_BATCH,
            base.clone(),
        ),
        main(
            "elastic-batch + oracle (true models from the start; not a result)",
            Some(2751.0),
            "Pollux",
            ELASTIC_BATCH,
            oracle.clone(),
        ),
        PolluxVariant {
            label: "optimus+oracle (Pollux's artifact: greedy, accumulation, ncf on 1 GPU)",
            published_s: Some(5682.0),
            published_as: "Optimus+Oracle",
            part: PolluxPart::Main,
            policy: OPTIMUS,
            config: oracle.clone(),
            rules: artifact,
        },
        main(
            "elastic-gpu (same settings, batch fixed, no accumulation)",
            None,
            "",
            gpu,
            base.clone(),
        ),
        main(
            "tiresias (threshold 57,600 GPU-s, Pollux's artifact)",
            Some(4038.0),
            "Tiresias",
            TIRESIAS,
            artifact_tiresias.clone(),
        ),
        main(
            "tiresias (threshold 3,200 GPU-s)",
            Some(4038.0),
            "Tiresias",
            TIRESIAS,
            base.clone(),
        ),
        main(
            "static (FIFO with backfill)",
            None,
            "",
            STATIC,
            base.clone(),
        ),
        why("elastic-gpu + accumulation", gpu, base.clone(), accum),
        why(
            "elastic-gpu + accumulation + ncf on 1 GPU",
            gpu,
            base.clone(),
            artifact,
        ),
        why(
            "elastic-gpu + accumulation + ncf on 1 GPU, no restart awareness",
            gpu,
            no_restart_awareness.clone(),
            artifact,
        ),
        why(
            "optimus (greedy, oracle), no accumulation",
            OPTIMUS,
            oracle.clone(),
            none,
        ),
        why(
            "optimus + accumulation (ncf free to scale)",
            OPTIMUS,
            oracle.clone(),
            accum,
        ),
        why(
            "optimus+oracle row, no defragmenting repack",
            OPTIMUS,
            no_defrag(&oracle),
            artifact,
        ),
        why(
            "elastic-batch + ncf on 1 GPU",
            ELASTIC_BATCH,
            base.clone(),
            ArtifactRules {
                ncf_one_gpu: true,
                ..none
            },
        ),
        why(
            "optimus + all four artifact rules (+ yolov3 at 8 per GPU, 1-GPU split)",
            OPTIMUS,
            oracle.clone(),
            artifact_all,
        ),
        why(
            "elastic-gpu + all four artifact rules",
            gpu,
            base.clone(),
            artifact_all,
        ),
        why(
            "elastic-batch + all four artifact rules",
            ELASTIC_BATCH,
            base.clone(),
            artifact_all,
        ),
        why(
            "tiresias (57,600 GPU-s) + yolov3 at 8 per GPU",
            TIRESIAS,
            artifact_tiresias.clone(),
            yolo8,
        ),
        why(
            "tiresias (57,600 GPU-s) + yolov3 at 8 per GPU + 1-GPU split",
            TIRESIAS,
            artifact_tiresias.clone(),
            yolo8_split,
        ),
        why(
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
            label: v.label.to_string(),
            published_s: v.published_s,
            published_as: v.published_as.to_string(),
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

fn pollux_report(options: &PolluxOptions, rows: &[PolluxRow]) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# Pollux yardstick\n");
    let _ = writeln!(
        md,
        "Workloads {:?} of Pollux's OSDI'21 artifact (bundled), 16 nodes × 4 GPUs (T4 profiles), \
         allocator every 60 s (not on events, as in Pollux's simulator), 30 s without progress at \
         every (re)start, goodput progress (statistical-efficiency-weighted, epoch by epoch, done \
         after the model's epochs), queue admission with backfill.\n",
        options.workloads
    );
    let _ = writeln!(
        md,
        "| policy | mean avg JCT (s) | published | per workload (s) | reallocations (mean) | optimizer (ms/decision) |\n|---|---|---|---|---|---|"
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
    md.push_str(POLLUX_DISCUSSION);
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
        let reference = rows
            .iter()
            .filter(|r| r.part == PolluxPart::Main && r.label.starts_with("elastic-gpu"));
        for r in reference.chain(analysis) {
            let _ = writeln!(
                md,
                "| {} | {:.0} | {} | {:.0} |",
                r.label,
                r.mean_avg_jct_s(),
                r.per_workload_jct(),
                r.mean_reallocations()
            );
        }
        if options.workloads == (1..=BUNDLED_POLLUX_WORKLOADS).collect::<Vec<_>>() {
            for (label, per) in ARTIFACT_RESULTS {
                let mean = per.iter().sum::<f64>() / per.len() as f64;
                let per: Vec<String> = per.iter().map(|v| format!("{v:.0}")).collect();
                let _ = writeln!(md, "| {label} | {mean:.0} | {} | — |", per.join(", "));
            }
        }
        md.push_str(POLLUX_BASELINES_FINDINGS);
    }
    md
}

/// Pollux's artifact's own per-workload average JCTs, s (`simulator/results-jobload/*-1.0/
/// summary.json`, branch `osdi21-artifact`); their means are the published numbers.
const ARTIFACT_RESULTS: [(&str, [f64; 8]); 3] = [
    (
        "*Pollux artifact, Optimus+Oracle (published)*",
        [
            4087.0, 6914.0, 3944.0, 5968.0, 5656.0, 5302.0, 7291.0, 6294.0,
        ],
    ),
    (
        "*Pollux artifact, Tiresias (published)*",
        [
            2474.0, 5145.0, 3876.0, 3280.0, 3501.0, 3470.0, 5480.0, 5080.0,
        ],
    ),
    (
        "*Pollux artifact, Pollux (published)*",
        [
            2089.0, 3323.0, 2188.0, 2721.0, 2674.0, 2446.0, 3616.0, 2952.0,
        ],
    ),
];

const POLLUX_DISCUSSION: &str = "## How this simulator differs from Pollux's

- Throughput comes from dlscale-core's interpolation of the same measured tables (placements and
  scalability), on the nodes a job actually spans after placement; Pollux interpolates with
  SciPy's `LinearNDInterpolator`. Statistical efficiency uses the same gradient statistics per
  epoch and batch.
- Pollux's own policy re-fits throughput models from what each job has run so far and caps a
  job's GPUs at twice what it has been profiled on. So does elastic-batch here (its *learned*
  rows): each job starts on the service's linear-scaling prior at its requested GPUs, its
  simulated workers report the true throughput with measurement noise and the true gradient
  statistics, the autoscaler fits its model from the reports and lets it grow to twice what it
  has been measured on. The *oracle* row sees the true tables from the start, like
  Optimus+Oracle: a bound, not a result.
- A fixed batch that does not fit the requested GPUs' memory (BERT's 384 on 6–16 GPUs) uses
  gradient accumulation in both simulators; Pollux's also caps yolov3's per-GPU batch at 8 where
  the bundled profile allows 16.
- Tiresias in Pollux's artifact demotes at 16 GPU-hours of attained service (two queues, no
  starvation guard); both thresholds are shown. The published 4,038 s is the artifact's own mean
  over the 8 workloads (its README's 3,470 s is workload 6 alone). With 3,200 GPU-s almost every
  job is demoted within its first hour, so long jobs preempt each other in FIFO order of demotion
  and the low queue behaves like FIFO with restarts: much worse.
- The Optimus+Oracle row is the artifact's baseline re-implemented (the `optimus` policy with
  gradient accumulation and ncf on one GPU, both part of that baseline's definition; see below).
  elastic-gpu is dlscale's own fixed-batch baseline (the exact DP over the same fair goodput as
  elastic-batch, a fixed batch must fit GPU memory): it has no published counterpart.
- Placement: the allocator values consolidated placements; a job that restarts anyway and lands
  on extra nodes triggers a defragmenting repack (`SimConfig::defragment_moves_per_job`, 4 here)
  that re-places all running jobs when that consolidates more jobs than it moves per job; it
  lowers elastic-batch's mean from about 2,830 s (off) to about 2,610 s.
";

const POLLUX_BASELINES_INTRO: &str = "
## Why the baselines differ from the published numbers

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
`with_single_gpu_split` in `workload.rs`). Measured (same settings as the table above):

";
const POLLUX_BASELINES_FINDINGS: &str = "
- **Accumulation is the main cause of elastic-gpu's gap (verified).** Without it a fixed batch
  needs `ceil(batch / memory)` GPUs — 32 for imagenet at 6,400, 16 at 3,200, 8 for deepspeech2 at
  640, 4 for cifar10 at 4,096 — so under queue admission such jobs wait for large blocks and then
  hold them (workloads 2, 4 and 5 average 15,000–21,000 s). With accumulation from one GPU
  elastic-gpu drops from 9,352 s to 3,256 s, and Optimus's greedy from 12,947 s to 5,639 s. Since
  Pollux's baseline defines the minimum as one replica, the Optimus+Oracle row uses it by default;
  elastic-gpu keeps the paper's no-accumulation rule (its own definition).
- **With the artifact's rules the Optimus row reproduces the published result:** 5,639 s (5,712 s
  with all four rules) against 5,682 s, every workload within 11 % (workload 3, with the most
  yolov3 jobs, is the largest gap; yolov3 at 8 per GPU closes half of it). Capping ncf at one GPU
  changes nothing here (the greedy never gives ncf a second GPU), nor does the defragmenting
  repack (+47 s without it).
- **Our exact optimizer is a much stronger fixed-batch baseline than Optimus.** With the same
  accumulation rule, elastic-gpu (exact DP over the fair goodput utility, restart-aware) averages
  3,256 s against Optimus's 5,639 s: Optimus weights a GPU's time saved by the job's remaining
  iterations, so long jobs collect the spare GPUs while short ones stay at one GPU, and it restarts
  jobs more often (775 against 463 reallocations per workload). We did not separate the greedy
  from the objective (that needs the Optimus objective in dlscale-core's value tables).
  Restart awareness is not what makes the difference: without it elastic-gpu stays at 3,262 s.
  So against the published Optimus+Oracle number, elastic-batch's 2.2× advantage is mostly the
  allocator, not the batch: against elastic-gpu with accumulation it is 1.25×.
- **Tiresias (3,740 s vs 4,038 s published).** The artifact caps yolov3 at 8 samples per GPU
  (`max_local_bsz=8` in `applications.py`) where the bundled profile allows 16, so yolov3's
  requested 64 on 4 GPUs runs as two micro-steps there; with that cap our Tiresias rises to 3,876 s
  (gap −7 % → −4 %), mostly on workloads 3 and 7, which have the most yolov3 jobs. The one-GPU
  split adds 5 s; the defragmenting repack none (Tiresias rarely restarts). Not explained: the rest
  (workload 3 still 3,487 vs 3,876 s, workload 7 4,892 vs 5,480 s). Candidates, not measured: the
  artifact places new jobs on the nodes with the most free GPUs, which can spread a 4- or 6-GPU job
  over more nodes than needed (slower synchronisation) where dlscale consolidates; its throughput
  interpolation (SciPy `LinearNDInterpolator` over nodes × replicas × per-GPU batch) differs from
  dlscale-core's piecewise-linear one for unmeasured placements; its accumulation counts compute
  time as `step − sync` at the job's own placement where dlscale uses the one-GPU step.
- **elastic-batch under the artifact's rules** rises from 2,614 s to 2,685 s (Pollux published
  2,751 s): yolov3 at 8 per GPU slows it, accumulation barely helps it.
";
