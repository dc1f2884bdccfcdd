//! Pollux's artifact's job loads: its workloads at 0.5×, 1×, 1.5× and 2× the arrival rate
//! (bundled), and the average JCTs it publishes for each (`data/pollux-published/`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Result, SimError};
use crate::workload::{
    bundled_pollux_workload, read_pollux, ReadOptions, Workload, BUNDLED_POLLUX_WORKLOADS,
};

use super::pollux::Published;

/// One of the artifact's job loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Load {
    /// Half the arrival rate (`workloads-0.5`).
    Half,
    /// The paper's (`workloads`).
    One,
    /// 1.5 times (`workloads-1.5`).
    OneAndHalf,
    /// Twice (`workloads-2.0`).
    Two,
}

impl Load {
    /// Every load, lightest first.
    pub const ALL: [Load; 4] = [Load::Half, Load::One, Load::OneAndHalf, Load::Two];

    /// Its name in the artifact's file names (`0.5`, `1.0`, `1.5`, `2.0`).
    pub fn name(self) -> &'static str {
        match self {
            Load::Half => "0.5",
            Load::One => "1.0",
            Load::OneAndHalf => "1.5",
            Load::Two => "2.0",
        }
    }
}

impl fmt::Display for Load {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let short = match self {
            Load::Half => "0.5",
            Load::One => "1",
            Load::OneAndHalf => "1.5",
            Load::Two => "2",
        };
        write!(f, "{short}×")
    }
}

impl FromStr for Load {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        let s = s.trim_end_matches(['x', '×']);
        let value: f64 = s
            .parse()
            .map_err(|_| format!("unknown load '{s}' (expected 0.5, 1, 1.5 or 2)"))?;
        Load::ALL
            .into_iter()
            .find(|l| l.name().parse::<f64>().is_ok_and(|v| v == value))
            .ok_or_else(|| format!("unknown load '{s}' (expected 0.5, 1, 1.5 or 2)"))
    }
}

macro_rules! workloads {
    ($dir:literal) => {
        [
            include_str!(concat!("../../data/", $dir, "/workload-1.csv")),
            include_str!(concat!("../../data/", $dir, "/workload-2.csv")),
            include_str!(concat!("../../data/", $dir, "/workload-3.csv")),
            include_str!(concat!("../../data/", $dir, "/workload-4.csv")),
            include_str!(concat!("../../data/", $dir, "/workload-5.csv")),
            include_str!(concat!("../../data/", $dir, "/workload-6.csv")),
            include_str!(concat!("../../data/", $dir, "/workload-7.csv")),
            include_str!(concat!("../../data/", $dir, "/workload-8.csv")),
        ]
    };
}

const HALF: [&str; BUNDLED_POLLUX_WORKLOADS] = workloads!("pollux-workloads-0.5");
const ONE_AND_HALF: [&str; BUNDLED_POLLUX_WORKLOADS] = workloads!("pollux-workloads-1.5");
const TWO: [&str; BUNDLED_POLLUX_WORKLOADS] = workloads!("pollux-workloads-2.0");

const PUBLISHED_CSV: &str = include_str!("../../data/pollux-published/avg-jct.csv");

/// Bundled Pollux workload `number` (1 to 8) at `load`.
pub fn pollux_workload(load: Load, number: usize) -> Result<Workload> {
    let set = match load {
        Load::One => return bundled_pollux_workload(number),
        Load::Half => &HALF,
        Load::OneAndHalf => &ONE_AND_HALF,
        Load::Two => &TWO,
    };
    let text = number
        .checked_sub(1)
        .and_then(|i| set.get(i))
        .ok_or_else(|| {
            SimError::Config(format!(
                "no bundled Pollux workload {number} (there are 1 to {BUNDLED_POLLUX_WORKLOADS})"
            ))
        })?;
    let name = format!("workload-{number} ({load})");
    let mut workload = read_pollux(text.as_bytes(), &name, &ReadOptions::default())?;
    workload.name = name;
    Ok(workload)
}

/// The artifact's published average JCT of `system` on workload `number` at `load`, s
/// (`results-jobload/<policy>-<load>/summary.json`, `avgs`).
pub fn published_avg_jct_s(system: Published, load: Load, number: usize) -> Result<f64> {
    #[derive(Deserialize)]
    struct Row {
        policy: String,
        load: String,
        workload: usize,
        avg_jct_s: f64,
    }
    let policy = match system {
        Published::Tiresias => "tiresias",
        Published::OptimusOracle => "optimus",
        Published::Pollux => "pollux",
    };
    let name = "data/pollux-published/avg-jct.csv";
    let mut reader = csv::Reader::from_reader(PUBLISHED_CSV.as_bytes());
    for (i, row) in reader.deserialize::<Row>().enumerate() {
        let row = row.map_err(|e| SimError::Config(format!("{name}, line {}: {e}", i + 2)))?;
        if row.policy == policy && row.load == load.name() && row.workload == number {
            return Ok(row.avg_jct_s);
        }
    }
    Err(SimError::Config(format!(
        "{name}: no {policy} result for workload {number} at load {load}"
    )))
}
