//! Reproductions: the paper's arrival-rate sweep and Pollux's simulator yardstick. Each writes a
//! `report.md` with tables and plots into its output directory.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use dlscale_core::{Admission, Cluster, Policy, RestartAwareness, Settings, Utility};

use crate::config::{ProgressMode, SimConfig, SimPolicy, TiresiasSettings};
use crate::engine::simulate;
use crate::error::{Result, SimError};
use crate::metrics::{JobRecord, Outcome, SimObserver, Summary};
use crate::plot::{line_chart, Chart, Series};
use crate::workload::{bundled_pollux_workload, generate, GeneratorSpec, BUNDLED_POLLUX_WORKLOADS};

/// A sweep plot: file stem, title, y label, and the value plotted.
type SweepPlot = (
    &'static str,
    &'static str,
    &'static str,
    fn(&Summary) -> f64,
);

/// Settings of [`reproduce_paper`].
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
}

impl Default for PaperOptions {
    /// Six rates from 2 to 64 jobs/h (offered load ≈ 0.2× to 6× of 64 GPUs), 300 jobs each,
    /// 16 nodes × 4 GPUs.
    fn default() -> Self {
        PaperOptions {
            rates_per_h: vec![2.0, 4.0, 8.0, 16.0, 32.0, 64.0],
            jobs: 300,
            cluster: Cluster {
                nodes: 16,
                gpus_per_node: 4,
            },
            seed: 1,
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
}

/// Counts drops by model and keeps completed jobs' JCTs by id.
#[derive(Debug, Default)]
struct SweepCollector {
    dropped_by_model: BTreeMap<String, usize>,
    jct_by_id: BTreeMap<String, f64>,
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
                self.jct_by_id.insert(record.id.clone(), jct);
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
    let config = SimConfig {
        cluster: options.cluster,
        interval_s: None,
        schedule_on_events: true,
        progress: ProgressMode::Samples,
        settings: Settings {
            utility: Utility::Speedup,
            admission: Admission::Drop,
            ..Settings::default()
        },
        ..SimConfig::default()
    };
    let policies = [Policy::ElasticBatch, Policy::ElasticGpu, Policy::Static];
    let total = options.rates_per_h.len() * policies.len();
    let mut points = Vec::new();
    for (k, &rate) in options.rates_per_h.iter().enumerate() {
        let spec =
            GeneratorSpec::pollux_mix(options.jobs, rate, options.seed.wrapping_add(k as u64));
        let workload = generate(&spec)?;
        let mut summaries = Vec::new();
        let mut dropped_by_model = BTreeMap::new();
        let mut jcts = Vec::new();
        for policy in policies {
            let mut collector = SweepCollector::default();
            let result = simulate(&workload, &config, SimPolicy::Core(policy), &mut collector)?;
            summaries.push(result.summary);
            dropped_by_model.insert(policy.name().to_string(), collector.dropped_by_model);
            jcts.push(collector.jct_by_id);
            on_progress(points.len() * policies.len() + summaries.len(), total);
        }
        let common: Vec<(f64, f64)> = jcts[0]
            .iter()
            .filter_map(|(id, &eb)| jcts[1].get(id).map(|&eg| (eb, eg)))
            .collect();
        let n = common.len().max(1) as f64;
        points.push(SweepPoint {
            rate_per_h: rate,
            summaries,
            dropped_by_model,
            common_avg_jct_s: (
                common.iter().map(|c| c.0).sum::<f64>() / n,
                common.iter().map(|c| c.1).sum::<f64>() / n,
            ),
            common_jobs: common.len(),
        });
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
                label: policy.name().to_string(),
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
    let path = out_dir.join("report.md");
    std::fs::write(&path, paper_report(options, &points)).map_err(|e| SimError::io(&path, e))?;
    Ok(points)
}

fn paper_report(options: &PaperOptions, points: &[SweepPoint]) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Paper reproduction: elastic batch vs elastic GPUs vs static\n"
    );
    let _ = writeln!(
        md,
        "Poisson arrivals of {} jobs per rate on {} nodes × {} GPUs (seed {}); the Pollux workloads' \
         model mix and user requests (`GeneratorSpec::pollux_mix`: ncf 39 %, cifar10 39 %, \
         deepspeech2 9 %, bert 7 %, yolov3 5 %, imagenet 2 %, each with the `(GPUs, batch)` pairs \
         users chose in those workloads); run time at the requested configuration log-normal, \
         median 30 min. Admit-or-drop, allocator on every arrival and completion, samples \
         progress, the paper's speedup utility, 30 s per restart. Batch range of a job: its \
         model's `[B0, Bmax]` (smallest and largest validated batch).\n",
        options.jobs, options.cluster.nodes, options.cluster.gpus_per_node, options.seed
    );
    let _ = writeln!(
        md,
        "| rate (jobs/h) | policy | completed | dropped | avg JCT (s) | p99 JCT (s) | GPU util | reallocations |\n|---|---|---|---|---|---|---|---|"
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

const PAPER_DISCUSSION: &str = "## What drives the result (and where it falls short of the paper)

- **Admission drives completions.** Under admit-or-drop a job is admitted only if every admitted
  job can still get its minimum. With its batch fixed at the user's choice, a job's minimum under
  elastic-gpu is the fewest GPUs whose memory holds that batch (`ceil(batch / max per-GPU
  batch)`): 32 GPUs for imagenet at 6,400, 16 at 3,200, 8 for deepspeech2 at 640, 4 for cifar10 at
  4,096 and yolov3 at 64, 6–16 for bert (its requested GPUs: 384 needs gradient accumulation below
  32). With the batch free in `[B0, Bmax]` every job's minimum is one GPU. So as load rises
  elastic-gpu turns away the big-batch jobs first (see the drops-by-model table), and
  elastic-batch keeps admitting until 64 jobs share the cluster. This is the mechanism behind the
  paper's \"more jobs completed, fewer dropped\"; here it gives the completed ratio in the table
  (about 1.2× at overload, not the paper's 2×).
- **JCT at high load goes the other way here.** The paper's objective (sum of per-job speedups)
  is maximised by giving many admitted jobs one GPU each (scaling is sublinear), so at overload
  elastic-batch runs up to 64 jobs on about one GPU each and their JCTs grow; elastic-gpu runs
  fewer, larger jobs faster and drops the rest. Even on the jobs both policies completed,
  elastic-batch is slower at the two highest rates. At light and moderate load elastic-batch is
  10–15 % faster (larger batches on the GPUs it has).
- **Why no several-fold JCT gain.** Batch adaptation speeds a job up only when the user's batch is
  below what its GPUs process efficiently. The Pollux workloads' users already chose large batches
  (cifar10 2,048–4,096 of a 4,096 maximum, ncf at its maximum 32,768, imagenet 3,200–6,400), so
  there is little per-GPU throughput to gain; the paper's 10× presumably came from small user
  batches on many GPUs or from counting dropped jobs differently. We did not tune the mix to reach
  it.

The absolute JCTs depend on the generated run times; compare the ratios.
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
    /// One summary per workload.
    pub summaries: Vec<Summary>,
}

impl PolluxRow {
    /// Mean over workloads of the average JCT, s.
    pub fn mean_avg_jct_s(&self) -> f64 {
        self.summaries.iter().map(|s| s.avg_jct_s).sum::<f64>() / self.summaries.len().max(1) as f64
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
    let base = pollux_config();
    let variants: Vec<(&str, Option<f64>, &str, SimPolicy, SimConfig)> = vec![
        (
            "elastic-batch (fair p=-1, restart-aware, min gain 5 %)",
            Some(2751.0),
            "Pollux",
            SimPolicy::Core(Policy::ElasticBatch),
            base.clone(),
        ),
        (
            "elastic-gpu (same settings, batch fixed)",
            Some(5682.0),
            "Optimus+Oracle",
            SimPolicy::Core(Policy::ElasticGpu),
            base.clone(),
        ),
        (
            "tiresias (threshold 57,600 GPU-s, Pollux's artifact)",
            Some(4038.0),
            "Tiresias",
            SimPolicy::Tiresias,
            SimConfig {
                tiresias: TiresiasSettings {
                    threshold_gpu_s: 57_600.0,
                },
                ..base.clone()
            },
        ),
        (
            "tiresias (threshold 3,200 GPU-s)",
            Some(4038.0),
            "Tiresias",
            SimPolicy::Tiresias,
            base.clone(),
        ),
        (
            "static (FIFO with backfill)",
            None,
            "",
            SimPolicy::Core(Policy::Static),
            base.clone(),
        ),
    ];
    let workloads = options
        .workloads
        .iter()
        .map(|&n| bundled_pollux_workload(n))
        .collect::<Result<Vec<_>>>()?;
    let total = variants.len() * workloads.len();
    let mut rows = Vec::new();
    let mut done = 0;
    for (label, published_s, published_as, policy, config) in variants {
        let mut summaries = Vec::new();
        for workload in &workloads {
            summaries.push(simulate(workload, &config, policy, &mut ())?.summary);
            done += 1;
            on_progress(done, total);
        }
        rows.push(PolluxRow {
            label: label.to_string(),
            published_s,
            published_as: published_as.to_string(),
            summaries,
        });
    }
    let json = serde_json::to_string_pretty(&rows).map_err(|e| SimError::Config(e.to_string()))?;
    let path = out_dir.join("pollux.json");
    std::fs::write(&path, json + "\n").map_err(|e| SimError::io(&path, e))?;
    let series: Vec<Series> = rows
        .iter()
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
    for r in rows {
        let per: Vec<String> = r
            .summaries
            .iter()
            .map(|s| format!("{:.0}", s.avg_jct_s))
            .collect();
        let n = r.summaries.len().max(1) as f64;
        let realloc = r
            .summaries
            .iter()
            .map(|s| s.reallocations as f64)
            .sum::<f64>()
            / n;
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
            per.join(", "),
            realloc,
            opt
        );
    }
    md.push_str("\n![average JCT per workload](avg_jct_by_workload.svg)\n\n");
    md.push_str(POLLUX_DISCUSSION);
    md
}

const POLLUX_DISCUSSION: &str = "## How this simulator differs from Pollux's

- Throughput comes from dlscale-core's interpolation of the same measured tables (placements and
  scalability), on the nodes a job actually spans after placement; Pollux interpolates with
  SciPy's `LinearNDInterpolator`. Statistical efficiency uses the same gradient statistics per
  epoch and batch.
- Pollux's own policy re-fits throughput models from what each job has run so far and caps a
  job's GPUs at twice what it has been profiled on; elastic-batch here sees the true table from
  the start (an oracle, like Optimus+Oracle).
- A fixed batch that does not fit the requested GPUs' memory (BERT's 384 on 6–16 GPUs) uses
  gradient accumulation in both simulators; Pollux's also caps yolov3's per-GPU batch at 8 where
  the bundled profile allows 16.
- Tiresias in Pollux's artifact demotes at 16 GPU-hours of attained service (two queues, no
  starvation guard); both thresholds are shown. With 57,600 GPU-s the row lands between the
  artifact's own Tiresias result (3,470 s) and the paper's 4,038 s. With 3,200 GPU-s almost every
  job is demoted within its first hour, so long jobs preempt each other in FIFO order of demotion
  and the low queue behaves like FIFO with restarts: much worse.
- elastic-gpu lands far above Optimus+Oracle (5,682 s), mostly on workloads 2, 4 and 5. The likely
  cause (not yet verified by an experiment): Optimus in Pollux's simulator starts every job at one
  replica and reaches a fixed batch by gradient accumulation, while elastic-gpu here keeps the
  paper's rule that a fixed batch must fit in GPU memory, so its minimum is `ceil(batch / max
  per-GPU batch)` GPUs — 32 for imagenet at 6,400, 16 at 3,200, 8 for deepspeech2 at 640 — and
  under queue admission such jobs wait for large blocks and then hold them. It also maximises
  the fair goodput utility rather than Optimus's remaining-time marginal gain.
- Placement: the allocator values consolidated placements; a job that restarts anyway and lands
  on extra nodes triggers a defragmenting repack (`SimConfig::defragment_moves_per_job`, 4 here)
  that re-places all running jobs when that consolidates more jobs than it moves per job; it
  lowers elastic-batch's mean from about 2,830 s (off) to about 2,610 s.
";
