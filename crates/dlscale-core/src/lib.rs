//! dlscale-core: the pure heart of dlscale.
//!
//! Jobs ([`job`]) carry a throughput model ([`throughput`]) and optionally a statistical
//! efficiency model ([`efficiency`]). For each job and GPU count, [`options`] folds the best
//! feasible batch size into one value; [`allocator`] chooses GPU counts for all jobs at once —
//! exactly, by a knapsack over jobs × GPUs — and [`placement`] puts the GPUs on nodes.
//!
//! No I/O happens here beyond parsing text handed in, and nothing is async: the simulator and the
//! service build on this crate.

pub mod allocator;
pub mod cluster;
pub mod efficiency;
pub mod error;
pub mod fieldline;
pub mod fleet;
pub mod job;
pub mod jobfile;
pub mod options;
pub mod placement;
pub mod profiles;
pub mod synthetic;
pub mod throughput;
pub mod utility;

/// A number of GPUs.
pub type GpuCount = u32;
/// A number of samples in a batch (global or per GPU, as the name using it says).
pub type BatchSize = u32;

pub use allocator::{
    build_policy, policy_info, policy_names, Admission, CountRule, Decision, DecisionRequest,
    JobDecision, JobState, Policy, PolicyInfo, PolicyOptions, Settings, Weighing, REGISTRY,
};
pub use cluster::Cluster;
pub use error::{CoreError, Result};
pub use fleet::{Fleet, GpuPool};
pub use job::{BatchRange, CurrentAllocation, GpuRange, Hold, Job, JobHistory, Requested};
pub use options::{BatchChoice, RestartAwareness};
pub use utility::Utility;
