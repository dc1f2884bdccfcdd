//! Reproductions: the paper's arrival-rate sweep, Pollux's simulator yardstick, the teams'
//! yardstick (issue 27) and the mixed fleet's (issue 29). Each writes a
//! `report.md` with tables and plots into its output directory.
mod hetero;
mod jcts;
mod paper;
mod pollux;
mod pollux_loads;
mod pollux_report;
mod teams;
mod words;

pub use hetero::{
    hetero_report, reproduce_hetero, HeteroOptions, HeteroRow, TARGET_AGAINST_SIA,
    TARGET_AGAINST_TYPE_BLIND,
};
pub use paper::{paper_report, reproduce_paper, AblationRow, PaperOptions, SweepPoint};
pub use pollux::{reproduce_pollux, PolluxOptions, PolluxRow, PolluxRun, Published};
pub use pollux_loads::{pollux_workload, published_avg_jct_s, Load};
pub use pollux_report::{pollux_report, FIDELITY_BOUND, TARGET_AGAINST_POLLUX, TARGET_LOADS};
pub use teams::{reproduce_teams, TARGET_AGAINST_BLIND, TARGET_AGAINST_PARTITIONS};
