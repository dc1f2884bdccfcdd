//! The lifecycle table: what a launch's end means for its job.
//!
//! | completion reported | stop asked for | how it ended | next |
//! |---|---|---|---|
//! | yes | any | any | succeeded |
//! | no | cancel | any | cancelled |
//! | no | rescale, preempt, resubmit, repack | any | relaunched |
//! | no | none | exit 0 | succeeded |
//! | no | none | cancelled outside dlscale | cancelled |
//! | no | none | vanished, interrupted by the cluster | relaunched (not a failure; from the second in a row before a report, after a back-off) |
//! | no | none | another exit code, or it could not start | retried, or failed past `max_retries` |
//!
//! An exit after dlscale asked for a stop is a stop whatever its code: many programs checkpoint
//! on SIGTERM and exit 0, and torchrun exits 1 after passing SIGTERM on. A relaunch restarts the
//! program; it resumes where it was only if the program saves and loads a checkpoint.

use crate::input::Outcome;
use crate::output::{Next, StopReason};

/// What follows the end of a launch (see the module's table). `failures` counts the job's
/// failures before this one.
pub fn settle(
    completed: bool,
    stop: Option<StopReason>,
    outcome: &Outcome,
    failures: u32,
    max_retries: u32,
) -> Next {
    match (completed, stop, outcome) {
        (true, _, _) => Next::Succeeded,
        (false, Some(StopReason::Cancel), _) => Next::Cancelled,
        (false, Some(_), _) => Next::Relaunch,
        (false, None, Outcome::Exited(0)) => Next::Succeeded,
        (false, None, Outcome::CancelledOutside) => Next::Cancelled,
        (false, None, Outcome::Vanished | Outcome::Interrupted(_)) => Next::Resume,
        (false, None, Outcome::Exited(_) | Outcome::NotStarted(_)) => {
            let failures = failures + 1;
            if failures > max_retries {
                Next::Failed(failures)
            } else {
                Next::Retry(failures)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table() {
        use Outcome::*;
        let interrupted = Interrupted("NODE_FAIL".into());
        let cases: &[(bool, Option<StopReason>, Outcome, u32, Next)] = &[
            (true, None, Exited(0), 0, Next::Succeeded),
            (
                true,
                Some(StopReason::Rescale),
                Exited(1),
                0,
                Next::Succeeded,
            ),
            (true, Some(StopReason::Cancel), Vanished, 0, Next::Succeeded),
            (
                false,
                Some(StopReason::Cancel),
                Exited(0),
                0,
                Next::Cancelled,
            ),
            (
                false,
                Some(StopReason::Cancel),
                Exited(-9),
                0,
                Next::Cancelled,
            ),
            // The regression of issue 8: exit 0 after a rescale stop is a stop.
            (
                false,
                Some(StopReason::Rescale),
                Exited(0),
                0,
                Next::Relaunch,
            ),
            (
                false,
                Some(StopReason::Rescale),
                Exited(75),
                0,
                Next::Relaunch,
            ),
            (
                false,
                Some(StopReason::Preempt),
                Exited(1),
                2,
                Next::Relaunch,
            ),
            (
                false,
                Some(StopReason::Requeued),
                CancelledOutside,
                0,
                Next::Relaunch,
            ),
            (false, Some(StopReason::Repack), Vanished, 0, Next::Relaunch),
            (false, None, Exited(0), 0, Next::Succeeded),
            (false, None, CancelledOutside, 0, Next::Cancelled),
            (false, None, Vanished, 5, Next::Resume),
            (false, None, interrupted.clone(), 5, Next::Resume),
            (false, None, Exited(1), 0, Next::Retry(1)),
            (false, None, Exited(-9), 1, Next::Retry(2)),
            (false, None, Exited(1), 2, Next::Failed(3)),
            (
                false,
                None,
                NotStarted("no program".into()),
                0,
                Next::Retry(1),
            ),
        ];
        for (completed, stop, outcome, failures, next) in cases {
            assert_eq!(
                settle(*completed, *stop, outcome, *failures, 2),
                *next,
                "completed {completed}, stop {stop:?}, {outcome:?}, {failures} failures"
            );
        }
    }
}
