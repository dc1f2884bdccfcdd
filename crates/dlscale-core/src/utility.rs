//! Utilities: what an allocator maximises, summed over jobs.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The per-job value an allocator maximises (the sum over jobs, each times its weight).
///
/// `speedup`, `goodput` and `fair` are normalised by the job's own reference: its best value at
/// its smallest feasible GPU count, so that models of very different speeds compare.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Utility {
    /// Throughput over the job's reference throughput (the paper's objective).
    #[default]
    Speedup,
    /// Raw samples per second.
    Throughput,
    /// Goodput (throughput × statistical efficiency) over the job's reference goodput.
    Goodput,
    /// Power mean of goodput speedups with exponent `p < 0`, as the separable sum
    /// `Σ (sᵖ − 1) / p` (same maximiser as the power mean): favours the slowest jobs.
    Fair {
        /// The exponent, negative (−1 is Pollux's default).
        p: f64,
    },
}

impl Utility {
    /// Smallest speedup the `fair` utility distinguishes.
    pub const FAIR_FLOOR: f64 = 1e-3;

    /// The most negative exponent `fair` takes: the floor's utility is then about −1e29, which
    /// times the largest weight still sums finitely over any cluster's jobs; below about −103
    /// it overflows to −∞, and the knapsack could no longer tell one plan from another.
    pub const MIN_FAIR_EXPONENT: f64 = -10.0;

    /// Whether the metric multiplies throughput by statistical efficiency.
    pub fn uses_goodput(&self) -> bool {
        matches!(self, Utility::Goodput | Utility::Fair { .. })
    }

    /// Whether values are divided by the job's reference.
    pub fn normalised(&self) -> bool {
        !matches!(self, Utility::Throughput)
    }

    /// Turns a (normalised) metric into the job's utility, before its weight. For `fair`, speedups
    /// below [`Utility::FAIR_FLOOR`] count as the floor: a configuration worth (almost) nothing
    /// would otherwise weigh −∞ and swamp every other job's value in the sum.
    pub fn transform(&self, metric: f64) -> f64 {
        match *self {
            // p = −1 (the default) is a reciprocal, far cheaper than powf.
            Utility::Fair { p: -1.0 } => 1.0 - 1.0 / metric.max(Self::FAIR_FLOOR),
            Utility::Fair { p } => (metric.max(Self::FAIR_FLOOR).powf(p) - 1.0) / p,
            _ => metric,
        }
    }

    /// Short name as used on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            Utility::Speedup => "speedup",
            Utility::Throughput => "throughput",
            Utility::Goodput => "goodput",
            Utility::Fair { .. } => "fair",
        }
    }
}

impl fmt::Display for Utility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Utility::Fair { p } => write!(f, "fair:{p}"),
            other => f.write_str(other.name()),
        }
    }
}

impl FromStr for Utility {
    type Err = String;

    /// `speedup`, `throughput`, `goodput`, `fair` (p = −1) or `fair:P` with P in
    /// [[`Utility::MIN_FAIR_EXPONENT`], 0).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "speedup" => Ok(Utility::Speedup),
            "throughput" => Ok(Utility::Throughput),
            "goodput" => Ok(Utility::Goodput),
            "fair" => Ok(Utility::Fair { p: -1.0 }),
            _ => {
                let p = s
                    .strip_prefix("fair:")
                    .and_then(|p| p.parse::<f64>().ok())
                    .ok_or_else(|| format!("unknown utility '{s}' (expected speedup, throughput, goodput, fair or fair:P)"))?;
                if (Self::MIN_FAIR_EXPONENT..0.0).contains(&p) {
                    Ok(Utility::Fair { p })
                } else {
                    Err(format!(
                        "fair:P needs an exponent P in [{}, 0), got {p}",
                        Self::MIN_FAIR_EXPONENT
                    ))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        for s in ["speedup", "throughput", "goodput", "fair:-2"] {
            assert_eq!(s.parse::<Utility>().unwrap().to_string(), s);
        }
        assert_eq!(
            "fair".parse::<Utility>().unwrap(),
            Utility::Fair { p: -1.0 }
        );
        assert!("fair:0.5".parse::<Utility>().is_err());
        assert!("fair:-10".parse::<Utility>().is_ok());
        let e = "fair:-200".parse::<Utility>().unwrap_err();
        assert!(e.contains("in [-10, 0), got -200"), "{e}");
        // At the least exponent the floor's utility, at the largest weight, over a million
        // jobs, is finite.
        let floor = Utility::Fair {
            p: Utility::MIN_FAIR_EXPONENT,
        }
        .transform(0.0);
        assert!(
            (floor * crate::job::MAX_WEIGHT * 1e6).is_finite(),
            "{floor}"
        );
        assert!("speed"
            .parse::<Utility>()
            .unwrap_err()
            .contains("unknown utility 'speed'"));
    }

    #[test]
    fn fair_transform_orders_like_the_power_mean() {
        let u = Utility::Fair { p: -1.0 };
        assert_eq!(u.transform(1.0), 0.0);
        assert!((u.transform(2.0) - 0.5).abs() < 1e-12);
        // Balanced speedups beat unbalanced ones with the same sum.
        assert!(u.transform(2.0) + u.transform(2.0) > u.transform(1.0) + u.transform(3.0));
    }
}
