//! Pollux's yardstick: the runs (workloads, settings, the artifact's rules) and their rows.

use std::path::Path;

use serde::Serialize;

use dlscale_core::allocator::{ELASTIC_BATCH, ELASTIC_GPU, OPTIMUS, STATIC, TIRESIAS};
use dlscale_core::{
    Admission, Cluster, PolicyInfo, PolicyOptions, RestartAwareness, Settings, Utility,
};

use crate::config::{Knowledge, ProgressMode, SimConfig};
use crate::engine::simulate;
use crate::error::{Result, SimError};
use crate::metrics::Summary;
use crate::plot::{line_chart, Chart, Series};
use crate::workload::{
    bundled_pollux_workload, with_fixed_batch_accumulation, with_gpu_cap, with_memory_cap,
    with_single_gpu_split, Workload, BUNDLED_POLLUX_WORKLOADS,
};

use super::pollux_report::pollux_report;
use super::words::*;

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
pub(super) struct PolluxVariant {
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
pub(super) const ARTIFACT_TIRESIAS_THRESHOLD_GPU_S: f64 = 57_600.0;

/// The runs of [`reproduce_pollux`]: the main table, then the baseline analysis.
pub(super) fn pollux_variants() -> Vec<PolluxVariant> {
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
    pub(super) fn per_workload_jct(&self) -> String {
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
