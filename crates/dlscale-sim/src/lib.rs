//! dlscale-sim: a discrete-event simulator of dlscale's allocators (and Tiresias, Optimus) on
//! GPU-cluster workloads.
//!
//! - [`workload`]: Pollux workloads (8 bundled), Philly and ITP traces, dlscale's JSON format and a
//!   Poisson generator, with documented rules mapping trace jobs to models and batch ranges.
//! - [`simulate`]: the event loop — arrivals, completions, allocator runs, restarts with lost
//!   progress, node-level placement; progress by samples or by Pollux's goodput. Deterministic.
//! - [`world`]: whose rules the jobs follow (dlscale's, Pollux's artifact's), behind one
//!   interface.
//! - [`report`]: per-job CSV, `summary.json`, SVG and PNG plots; [`run_to_dir`] does it all.
//! - [`teams`]: teams' quotas from a workload's shares or a file, and what each team got.
//! - [`reproduce`]: the paper's arrival-rate sweep and Pollux's yardstick, each writing `report.md`.

#![warn(missing_docs)]

pub mod config;
pub mod engine;
pub mod error;
pub mod metrics;
pub mod plot;
pub mod pollux_artifact;
pub mod report;
pub mod reproduce;
pub mod teams;
pub mod workload;
pub mod world;

pub use config::{Knowledge, Preset, ProgressMode, Reporting, SimConfig, World};
/// What a decision on an arrival or a completion may change ([`SimConfig::on_events`]).
pub use dlscale_autoscaler::OnEvents;
pub use engine::{simulate, SimResult};
pub use error::{Result, SimError};
pub use metrics::{CsvJobWriter, JobRecord, Outcome, SimObserver, Summary, Timeline};
pub use report::{run_to_dir, write_reports};
pub use reproduce::{
    reproduce_hetero, reproduce_paper, reproduce_pollux, reproduce_teams, HeteroOptions,
    PaperOptions, PolluxOptions,
};
pub use workload::{parse_workload, ReadOptions, Workload, WorkloadFormat};
