//! The JCT of each job a run completed, by id: what a report compares runs on, job by job (an
//! average over fewer jobs is not the same average).

use std::collections::BTreeMap;

use crate::error::Result;
use crate::metrics::{JobRecord, Outcome, SimObserver};

/// The JCT of each job a run completed, by id.
#[derive(Debug, Default)]
pub(super) struct Jcts(pub(super) BTreeMap<String, f64>);

impl SimObserver for Jcts {
    fn job_finished(&mut self, record: &JobRecord) -> Result<()> {
        if let (Outcome::Completed, Some(jct_s)) = (record.outcome, record.jct_s) {
            self.0.insert(record.id.clone(), jct_s);
        }
        Ok(())
    }
}

impl Jcts {
    /// The average JCT of the jobs it completed (0 with none).
    pub(super) fn mean(&self) -> f64 {
        self.0.values().sum::<f64>() / self.0.len().max(1) as f64
    }

    /// Over the jobs both this run and `other` completed: this run's average JCT, `other`'s,
    /// and how many jobs that is. The averages are 0 over none.
    pub(super) fn paired(&self, other: &Jcts) -> (f64, f64, usize) {
        let both: Vec<&String> = self
            .0
            .keys()
            .filter(|id| other.0.contains_key(*id))
            .collect();
        let n = both.len().max(1) as f64;
        (
            both.iter().map(|id| self.0[*id]).sum::<f64>() / n,
            both.iter().map(|id| other.0[*id]).sum::<f64>() / n,
            both.len(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::Jcts;

    /// Runs are compared over the jobs both completed.
    #[test]
    fn runs_pair_over_the_jobs_both_completed() {
        let run =
            |jcts: &[(&str, f64)]| Jcts(jcts.iter().map(|&(id, t)| (id.to_string(), t)).collect());
        let ours = run(&[("a", 10.0), ("b", 20.0), ("c", 30.0)]);
        let theirs = run(&[("b", 40.0), ("c", 60.0), ("d", 1.0)]);
        assert_eq!(ours.paired(&theirs), (25.0, 50.0, 2));
        assert_eq!(ours.mean(), 20.0);
        assert_eq!(ours.paired(&Jcts::default()), (0.0, 0.0, 0));
    }
}
