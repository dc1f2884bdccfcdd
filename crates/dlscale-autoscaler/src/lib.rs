//! dlscale-autoscaler: the one autoscaler of dlscale, a pure state machine.
//!
//! The simulator and the service drive the same [`Autoscaler`]: they hand it timestamped
//! [`Input`]s (a job submitted or cancelled, a metrics report, a launch started or ended, an
//! executor's snapshot, the usable GPUs, a tick) and carry out the [`Action`]s it answers with
//! (launch a job on these nodes with this batch, stop a launch at a checkpoint, kill one),
//! logging its typed [`Event`]s. It does no I/O, reads no clock and runs nothing: the same inputs
//! give the same actions, so a simulation is what the service would do, and a service's
//! recorded inputs replay into the same decisions.
//!
//! - [`input`]: the closed set of inputs; [`output`]: actions, events, refusals.
//! - [`record`]: a job's state (what a shell persists); [`lifecycle`]: what a launch's end means.
//! - [`learn`]: throughput models learned from reports.
//! - [`autoscaler`]: the state machine (decisions through the core's policies and placement).
//! - [`explain`]: why each job has what a decision gave it, from the decision's inputs.

pub mod autoscaler;
pub mod config;
pub mod explain;
pub mod input;
pub mod learn;
pub mod lifecycle;
pub mod output;
pub mod record;

pub use autoscaler::{
    decide_placed, equal_batch, Autoscaler, DecidedJob, DecisionRecord, PlacedDecision, Target,
};
pub use config::{AutoscalerConfig, OnEvents, MIN_INTERVAL_S};
pub use explain::{DecisionInputs, Explanation, Explored, Limit};
pub use input::{
    Input, LaunchState, MetricsReport, ModelSource, Observation, ObservedLaunch, Oracle, Outcome,
    Submission,
};
pub use output::{Action, Event, LaunchSpec, Next, Refusal, Shape, Step, StopReason, Trigger};
pub use record::{
    JobRecord, Launch, PendingRebatch, Progress, Status, StopRequest, Waiting, STOP_RESEND_AFTER_S,
};
