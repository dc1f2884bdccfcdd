//! Pollux's yardstick: the bundled workloads at each of the artifact's loads under the Pollux
//! preset ([`SimConfig::pollux`]), the runs and their rows.

use std::path::Path;

use serde::{Serialize, Serializer};

use dlscale_autoscaler::OnEvents;
use dlscale_core::allocator::{ELASTIC_BATCH, OPTIMUS, TIRESIAS};
use dlscale_core::PolicyInfo;

use crate::config::{Knowledge, Reporting, SimConfig};
use crate::engine::simulate;
use crate::error::{Result, SimError};
use crate::metrics::Summary;
use crate::plot::{line_chart, Axis, Chart, Series};
use crate::workload::BUNDLED_POLLUX_WORKLOADS;

use super::pollux_loads::{pollux_workload, published_avg_jct_s, Load};
use super::pollux_report::pollux_report;

/// Settings of [`reproduce_pollux`].
#[derive(Debug, Clone, PartialEq)]
pub struct PolluxOptions {
    /// Which bundled workloads (1 to 8).
    pub workloads: Vec<usize>,
    /// At which of the artifact's loads.
    pub loads: Vec<Load>,
}

impl Default for PolluxOptions {
    /// All eight workloads at all four loads.
    fn default() -> Self {
        PolluxOptions {
            workloads: (1..=BUNDLED_POLLUX_WORKLOADS).collect(),
            loads: Load::ALL.to_vec(),
        }
    }
}

/// The runs of [`reproduce_pollux`], one row per load each. In `pollux.json` each is its
/// [`PolluxRun::key`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolluxRun {
    /// Tiresias under the preset: the fidelity check.
    Tiresias,
    /// Optimus+Oracle under the preset: the fidelity check (an oracle baseline by definition).
    OptimusOracle,
    /// Elastic-batch learning each job's model from its simulated reports, deciding every
    /// interval only (as Pollux does).
    ElasticBatchInterval,
    /// [`PolluxRun::ElasticBatchInterval`] with another seed of the measurement noise: how
    /// much of a figure is the noise one seed drew.
    ElasticBatchIntervalSeed(u64),
    /// [`PolluxRun::ElasticBatchInterval`]'s settings, also deciding on every arrival and
    /// completion (waiting jobs start on idle GPUs at once, running jobs change at the periodic
    /// decisions: [`OnEvents::Admit`], the default outside the preset).
    ElasticBatchEvents,
    /// [`PolluxRun::ElasticBatchEvents`] with another seed of the measurement noise, to set
    /// beside [`PolluxRun::ElasticBatchIntervalSeed`]'s.
    ElasticBatchEventsSeed(u64),
    /// Interval-only and learned, but no job declares its length: no remaining work is known,
    /// so shortest remaining first weighs every job alike (what a cluster whose users give no
    /// epochs gets).
    ElasticBatchLengthUnknown,
    /// Interval-only and learned, lengths declared, but no job names its model family: each
    /// learns from its own reports alone (what a cluster running a new model gets).
    ElasticBatchNoFamilies,
    /// Interval-only and learned with what Pollux's policy knows: no declared lengths, no model
    /// families (each job's reports, its age, its restarts).
    ElasticBatchPolluxInformation,
    /// Interval-only and learned, each declared length wrong: the true length times a factor
    /// drawn log-uniformly in `[1 / WRONG_LENGTHS_BY, WRONG_LENGTHS_BY]` per job.
    ElasticBatchWrongLengths,
    /// Interval-only and learned from step times alone: no report carries a compute time (what
    /// a training program outside the worker library sends), so learned models fit the plain sum.
    ElasticBatchStepTimesOnly,
    /// Interval-only and learned, but every batch change is a restart: no job changes its
    /// batch in place (what a training program that does not take new batches while it runs
    /// gets; Pollux's own jobs re-pick theirs at every epoch at no cost).
    ElasticBatchRestartsToRebatch,
    /// Elastic-batch given each job's bundled model from the start (an oracle baseline, not a
    /// result: the service learns; under the preset the bundled tables, by node count, are
    /// close to the world's exact-shape step times but not them).
    ElasticBatchOracle,
    /// [`PolluxRun::ElasticBatchOracle`] without the lengths: each job's true model and
    /// gradient statistics from the start, no job's remaining work. Not a result either: it is
    /// what perfect learning would reach on what Pollux's policy knows, so the gap between it
    /// and [`PolluxRun::ElasticBatchPolluxInformation`] is what learning costs there.
    ElasticBatchOracleNoLengths,
}

impl PolluxRun {
    /// The measurement-noise seeds of the interval-only and event-driven runs besides the
    /// default one.
    pub const OTHER_SEEDS: [u64; 2] = [2, 3];

    /// How wrong [`PolluxRun::ElasticBatchWrongLengths`]'s declared lengths are at most, as a
    /// factor either way.
    pub const WRONG_LENGTHS_BY: f64 = 2.0;

    /// Every run, in the report's order.
    pub const ALL: [PolluxRun; 16] = [
        PolluxRun::Tiresias,
        PolluxRun::OptimusOracle,
        PolluxRun::ElasticBatchInterval,
        PolluxRun::ElasticBatchIntervalSeed(PolluxRun::OTHER_SEEDS[0]),
        PolluxRun::ElasticBatchIntervalSeed(PolluxRun::OTHER_SEEDS[1]),
        PolluxRun::ElasticBatchEvents,
        PolluxRun::ElasticBatchEventsSeed(PolluxRun::OTHER_SEEDS[0]),
        PolluxRun::ElasticBatchEventsSeed(PolluxRun::OTHER_SEEDS[1]),
        PolluxRun::ElasticBatchLengthUnknown,
        PolluxRun::ElasticBatchNoFamilies,
        PolluxRun::ElasticBatchPolluxInformation,
        PolluxRun::ElasticBatchWrongLengths,
        PolluxRun::ElasticBatchStepTimesOnly,
        PolluxRun::ElasticBatchRestartsToRebatch,
        PolluxRun::ElasticBatchOracle,
        PolluxRun::ElasticBatchOracleNoLengths,
    ];

    /// Its key in `pollux.json`: `tiresias`, `optimus-oracle`, `elastic-batch-interval`,
    /// `elastic-batch-interval-seed-2`, `elastic-batch-events`, `elastic-batch-events-seed-2`,
    /// `elastic-batch-length-unknown`,
    /// `elastic-batch-no-families`, `elastic-batch-pollux-information`,
    /// `elastic-batch-wrong-lengths`, `elastic-batch-step-times-only`,
    /// `elastic-batch-restarts-to-rebatch`, `elastic-batch-oracle`,
    /// `elastic-batch-oracle-no-lengths`.
    pub fn key(self) -> String {
        match self {
            PolluxRun::Tiresias => "tiresias".into(),
            PolluxRun::OptimusOracle => "optimus-oracle".into(),
            PolluxRun::ElasticBatchInterval => "elastic-batch-interval".into(),
            PolluxRun::ElasticBatchIntervalSeed(seed) => {
                format!("elastic-batch-interval-seed-{seed}")
            }
            PolluxRun::ElasticBatchEvents => "elastic-batch-events".into(),
            PolluxRun::ElasticBatchEventsSeed(seed) => format!("elastic-batch-events-seed-{seed}"),
            PolluxRun::ElasticBatchLengthUnknown => "elastic-batch-length-unknown".into(),
            PolluxRun::ElasticBatchNoFamilies => "elastic-batch-no-families".into(),
            PolluxRun::ElasticBatchPolluxInformation => "elastic-batch-pollux-information".into(),
            PolluxRun::ElasticBatchWrongLengths => "elastic-batch-wrong-lengths".into(),
            PolluxRun::ElasticBatchStepTimesOnly => "elastic-batch-step-times-only".into(),
            PolluxRun::ElasticBatchRestartsToRebatch => "elastic-batch-restarts-to-rebatch".into(),
            PolluxRun::ElasticBatchOracle => "elastic-batch-oracle".into(),
            PolluxRun::ElasticBatchOracleNoLengths => "elastic-batch-oracle-no-lengths".into(),
        }
    }

    /// Whether it repeats another run with another measurement-noise seed (the report's line
    /// over seeds; left out of the charts).
    pub fn is_other_seed(self) -> bool {
        matches!(
            self,
            PolluxRun::ElasticBatchIntervalSeed(_) | PolluxRun::ElasticBatchEventsSeed(_)
        )
    }

    /// The measurement-noise seed of a learned run (`None` for the oracle runs).
    pub fn noise_seed(self) -> Option<u64> {
        match self.config().knowledge {
            Knowledge::Learned(reporting) => Some(reporting.seed),
            Knowledge::Oracle { .. } => None,
        }
    }

    /// What the report calls it.
    pub fn label(self) -> String {
        match self {
            PolluxRun::Tiresias => "tiresias (Pollux preset)".into(),
            PolluxRun::OptimusOracle => "optimus+oracle (Pollux preset; an oracle baseline)".into(),
            PolluxRun::ElasticBatchInterval => "elastic-batch, learned, interval-only".into(),
            PolluxRun::ElasticBatchIntervalSeed(seed) => {
                format!("elastic-batch, learned, interval-only, noise seed {seed}")
            }
            PolluxRun::ElasticBatchEvents => "elastic-batch, learned, event-driven".into(),
            PolluxRun::ElasticBatchEventsSeed(seed) => {
                format!("elastic-batch, learned, event-driven, noise seed {seed}")
            }
            PolluxRun::ElasticBatchLengthUnknown => {
                "elastic-batch, learned, interval-only, no job declaring its length".into()
            }
            PolluxRun::ElasticBatchNoFamilies => {
                "elastic-batch, learned, interval-only, no model families".into()
            }
            PolluxRun::ElasticBatchPolluxInformation => {
                "elastic-batch, learned, interval-only, what Pollux knows (no lengths, no families)"
                    .into()
            }
            PolluxRun::ElasticBatchWrongLengths => format!(
                "elastic-batch, learned, interval-only, lengths wrong by up to {}× either way",
                PolluxRun::WRONG_LENGTHS_BY
            ),
            PolluxRun::ElasticBatchStepTimesOnly => {
                "elastic-batch, learned, interval-only, step times only (no compute times)".into()
            }
            PolluxRun::ElasticBatchRestartsToRebatch => {
                "elastic-batch, learned, interval-only, every batch change a restart".into()
            }
            PolluxRun::ElasticBatchOracle => {
                "elastic-batch + oracle (bundled models and exact remaining work from the start; not a result)".into()
            }
            PolluxRun::ElasticBatchOracleNoLengths => {
                "elastic-batch + oracle without lengths (bundled models from the start, no remaining work; not a result)".into()
            }
        }
    }

    /// The artifact's system it is compared with.
    pub fn compared_with(self) -> Published {
        match self {
            PolluxRun::Tiresias => Published::Tiresias,
            PolluxRun::OptimusOracle => Published::OptimusOracle,
            _ => Published::Pollux,
        }
    }

    /// The policy it runs.
    pub fn policy(self) -> PolicyInfo {
        match self {
            PolluxRun::Tiresias => TIRESIAS,
            PolluxRun::OptimusOracle => OPTIMUS,
            _ => ELASTIC_BATCH,
        }
    }

    /// Its settings: the preset, with an oracle or decisions on events where it says so.
    pub fn config(self) -> SimConfig {
        let preset = SimConfig::pollux();
        let reporting = match preset.knowledge {
            Knowledge::Learned(reporting) => reporting,
            Knowledge::Oracle { .. } => Reporting::default(),
        };
        match self {
            PolluxRun::Tiresias | PolluxRun::ElasticBatchInterval => preset,
            PolluxRun::OptimusOracle | PolluxRun::ElasticBatchOracle => SimConfig {
                knowledge: Knowledge::ORACLE,
                ..preset
            },
            PolluxRun::ElasticBatchOracleNoLengths => SimConfig {
                knowledge: Knowledge::Oracle { lengths: false },
                ..preset
            },
            PolluxRun::ElasticBatchIntervalSeed(seed) => SimConfig {
                knowledge: Knowledge::Learned(Reporting { seed, ..reporting }),
                ..preset
            },
            PolluxRun::ElasticBatchEvents => SimConfig {
                on_events: OnEvents::Admit,
                ..preset
            },
            PolluxRun::ElasticBatchEventsSeed(seed) => SimConfig {
                on_events: OnEvents::Admit,
                knowledge: Knowledge::Learned(Reporting { seed, ..reporting }),
                ..preset
            },
            PolluxRun::ElasticBatchLengthUnknown => SimConfig {
                knowledge: Knowledge::Learned(Reporting {
                    declares_length: false,
                    ..reporting
                }),
                ..preset
            },
            PolluxRun::ElasticBatchNoFamilies => SimConfig {
                knowledge: Knowledge::Learned(Reporting {
                    families: false,
                    ..reporting
                }),
                ..preset
            },
            PolluxRun::ElasticBatchPolluxInformation => SimConfig {
                knowledge: Knowledge::Learned(Reporting {
                    declares_length: false,
                    families: false,
                    ..reporting
                }),
                ..preset
            },
            PolluxRun::ElasticBatchWrongLengths => SimConfig {
                knowledge: Knowledge::Learned(Reporting {
                    length_error: PolluxRun::WRONG_LENGTHS_BY,
                    ..reporting
                }),
                ..preset
            },
            PolluxRun::ElasticBatchStepTimesOnly => SimConfig {
                knowledge: Knowledge::Learned(Reporting {
                    reports_compute_time: false,
                    ..reporting
                }),
                ..preset
            },
            PolluxRun::ElasticBatchRestartsToRebatch => SimConfig {
                batch_in_place: false,
                ..preset
            },
        }
    }
}

impl Serialize for PolluxRun {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.key())
    }
}

/// One row of the Pollux tables: one run at one load.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolluxRow {
    /// Which run it is (the key the report's prose looks rows up by).
    pub id: PolluxRun,
    /// At which load.
    pub load: Load,
    /// One summary per workload, in [`PolluxOptions::workloads`] order.
    pub summaries: Vec<Summary>,
}

impl PolluxRow {
    /// Mean over workloads of the average JCT, s.
    pub fn mean_avg_jct_s(&self) -> f64 {
        self.summaries.iter().map(|s| s.avg_jct_s).sum::<f64>() / self.summaries.len().max(1) as f64
    }
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

    /// Its published average JCT on bundled workload `n` at `load`, s.
    pub fn on(self, load: Load, n: usize) -> Option<f64> {
        published_avg_jct_s(self, load, n).ok()
    }

    /// The mean of its published results over `workloads` at `load`, s (`None` if one is
    /// unknown or there are none).
    pub fn mean_over(self, load: Load, workloads: &[usize]) -> Option<f64> {
        let per = workloads
            .iter()
            .map(|&n| self.on(load, n))
            .collect::<Option<Vec<f64>>>()?;
        (!per.is_empty()).then(|| per.iter().sum::<f64>() / per.len() as f64)
    }
}

/// The file name (without extension) of the plot of `load`: `avg_jct_by_workload_1_5`.
pub(super) fn plot_name(load: Load) -> String {
    format!("avg_jct_by_workload_{}", load.name().replace('.', "_"))
}

/// Pollux's yardstick: the bundled workloads at each load of `options` under the Pollux preset,
/// for Tiresias and Optimus+Oracle (against the artifact) and elastic-batch (against Pollux).
/// Writes `report.md`, `pollux.json` and a plot per load into `out_dir`.
pub fn reproduce_pollux(
    out_dir: &Path,
    options: &PolluxOptions,
    on_progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<PolluxRow>> {
    if options.workloads.is_empty() || options.loads.is_empty() {
        return Err(SimError::Config("no workload or no load to run".into()));
    }
    std::fs::create_dir_all(out_dir).map_err(|e| SimError::io(out_dir, e))?;
    let total = options.loads.len() * PolluxRun::ALL.len() * options.workloads.len();
    let mut rows = Vec::new();
    let mut done = 0;
    for &load in &options.loads {
        let workloads = options
            .workloads
            .iter()
            .map(|&n| pollux_workload(load, n))
            .collect::<Result<Vec<_>>>()?;
        for id in PolluxRun::ALL {
            let config = id.config();
            let mut summaries = Vec::new();
            for workload in &workloads {
                summaries.push(simulate(workload, &config, id.policy(), &mut ())?.summary);
                done += 1;
                on_progress(done, total);
            }
            rows.push(PolluxRow {
                id,
                load,
                summaries,
            });
        }
        let series: Vec<Series> = rows
            .iter()
            .filter(|r| r.load == load && !r.id.is_other_seed())
            .map(|r| Series {
                label: r.id.label(),
                points: r
                    .summaries
                    .iter()
                    .zip(&options.workloads)
                    .map(|(s, &n)| (n as f64, s.avg_jct_s))
                    .collect(),
            })
            .collect();
        let title = format!("Average JCT per Pollux workload, {load} load");
        line_chart(
            &out_dir.join(plot_name(load)),
            &Chart {
                title: &title,
                x_label: "workload",
                y_label: "average JCT (s)",
                x_axis: Axis::Linear,
                series: &series,
                markers: true,
            },
        )?;
    }
    let json = serde_json::to_string_pretty(&rows).map_err(|e| SimError::Config(e.to_string()))?;
    let path = out_dir.join("pollux.json");
    std::fs::write(&path, json + "\n").map_err(|e| SimError::io(&path, e))?;
    let path = out_dir.join("report.md");
    std::fs::write(&path, pollux_report(options, &rows)).map_err(|e| SimError::io(&path, e))?;
    Ok(rows)
}
