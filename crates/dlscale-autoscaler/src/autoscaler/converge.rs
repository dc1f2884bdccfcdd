//! Convergence: stops for running jobs whose target changed, launches for waiting jobs whose GPUs
//! are free.

use dlscale_core::GpuCount;

use super::{Autoscaler, Out, Target};
use crate::output::{Action, Event, LaunchSpec, Shape, StopReason};
use crate::record::{Launch, PendingRebatch, Status, StopRequest, Waiting};

impl Autoscaler {
    /// Stops running jobs whose target differs; launches waiting jobs whose GPUs are free.
    pub(super) fn converge(&mut self, now: f64, out: &mut Out) {
        // The free GPUs of each node, counted only once a queued job is to be placed (most calls
        // place none, and counting looks up every share of every running job).
        let mut free: Option<Vec<GpuCount>> = None;
        let mut i = 0;
        while i < self.live.len() {
            let r = &self.live[i];
            let target = self.plan.get(&r.seq);
            match (r.status, target) {
                (Status::Starting | Status::Running, Some(Target::Run(shape))) => {
                    // What it was last told to run: a pending rebatch counts as decided.
                    let current = r.launch.as_ref().map(|l| l.decided());
                    let in_place = |c: &Shape| {
                        r.batch_in_place && c.gpus == shape.gpus && c.shares == shape.shares
                    };
                    if current.is_some_and(|c| !c.same_run(shape) && in_place(c)) {
                        let shape = shape.clone();
                        self.rebatch(now, i, shape, out);
                    } else if !current.is_some_and(|c| c.same_run(shape)) {
                        let reason = match current {
                            Some(c) if c.gpus == shape.gpus && c.batch_size == shape.batch_size => {
                                StopReason::Repack
                            }
                            _ => StopReason::Rescale,
                        };
                        let shape = shape.clone();
                        self.request_stop(now, i, reason, Some(shape), out);
                    }
                }
                (Status::Starting | Status::Running, Some(Target::Wait | Target::Drop)) => {
                    self.request_stop(now, i, StopReason::Preempt, None, out)
                }
                (Status::Queued, Some(Target::Run(shape))) => {
                    let free = free.get_or_insert_with(|| self.free_gpus());
                    let blocked = self.stale.iter().any(|(s, _)| s == &r.id);
                    let room = |s: &dlscale_core::placement::Share| {
                        self.node_index
                            .get(&s.node)
                            .is_some_and(|&k| free[k] >= s.gpus)
                    };
                    let fits = shape.shares.iter().all(room);
                    let retry_at = r.retry_at_s.filter(|&t| t > now);
                    if self.awaiting_observation {
                        self.wait(i, Waiting::ForObservation, out);
                    } else if blocked {
                        self.wait(i, Waiting::ForStaleLaunch, out);
                    } else if let Some(at_s) = retry_at {
                        self.wait(i, Waiting::ForRetry { at_s }, out);
                    } else if fits {
                        let shape = shape.clone();
                        for s in &shape.shares {
                            if let Some(&k) = self.node_index.get(&s.node) {
                                free[k] -= s.gpus;
                            }
                        }
                        self.launch(now, i, shape, out);
                    } else {
                        let short: Vec<&str> = shape
                            .shares
                            .iter()
                            .filter(|s| !room(s))
                            .map(|s| &*s.node)
                            .collect();
                        let mut held_by: Vec<String> = self
                            .live
                            .iter()
                            .filter(|o| {
                                o.shape().is_some_and(|sh| {
                                    sh.shares.iter().any(|s| short.contains(&&*s.node))
                                })
                            })
                            .map(|o| o.id.clone())
                            .collect();
                        held_by.sort();
                        self.wait(i, Waiting::ForGpus { held_by }, out);
                    }
                }
                // Admit-or-drop: a job is dropped only before its first launch (a resubmitted
                // id's first is numbered after its earlier submissions').
                (Status::Queued, Some(Target::Drop)) if r.attempt == r.attempts_before => {
                    out.event(Event::Dropped { id: r.id.clone() });
                    self.finish(now, i, Status::Dropped, out);
                    continue;
                }
                (Status::Queued, Some(_)) => self.wait(i, Waiting::NotChosen, out),
                (Status::Queued, None) => self.wait(i, Waiting::ForDecision, out),
                _ => {}
            }
            i += 1;
        }
    }

    /// The GPUs of each node (in topology order) that no live launch holds.
    fn free_gpus(&self) -> Vec<GpuCount> {
        let mut free: Vec<GpuCount> = self.topology.nodes.iter().map(|n| n.gpus).collect();
        for r in &self.live {
            for s in r.shape().map_or(&[][..], |shape| &shape.shares) {
                if let Some(&k) = self.node_index.get(&s.node) {
                    free[k] = free[k].saturating_sub(s.gpus);
                }
            }
        }
        free
    }

    pub(super) fn wait(&mut self, i: usize, why: Waiting, out: &mut Out) {
        let r = &mut self.live[i];
        if r.waiting.as_ref() != Some(&why) {
            r.waiting = Some(why);
            out.touched.insert(r.id.clone());
        }
    }

    pub(super) fn launch(&mut self, now: f64, i: usize, shape: Shape, out: &mut Out) {
        let r = &mut self.live[i];
        // The stop that ended the last launch announced a shape: say so when a later decision
        // changed it.
        let announced = r
            .launch
            .as_ref()
            .and_then(|l| l.stop.as_ref())
            .and_then(|s| s.next.clone());
        let replanned = match (announced, &r.planned) {
            (Some(a), Some((planned, why))) if &a != planned || a != shape => {
                Some((a, why.clone()))
            }
            _ => None,
        };
        r.attempt += 1;
        r.status = Status::Starting;
        r.waiting = None;
        r.retry_at_s = None;
        r.completed_attempt = None;
        r.launch = Some(Launch {
            shape: shape.clone(),
            launched_s: now,
            started_s: None,
            stop: None,
            rebatch: None,
        });
        let (id, attempt) = (r.id.clone(), r.attempt);
        out.touched.insert(id.clone());
        out.event(Event::Launching {
            id: id.clone(),
            attempt,
            shape: shape.clone(),
            replanned,
        });
        out.action(Action::Launch(LaunchSpec { id, attempt, shape }));
    }

    /// Has the running launch of job `i` take `shape`'s batch on the GPUs it holds: pending
    /// until its workers report at that batch ([`Autoscaler::metrics`]), or cleared when the
    /// decision goes back to the batch they run.
    fn rebatch(&mut self, now: f64, i: usize, shape: Shape, out: &mut Out) {
        let r = &mut self.live[i];
        let Some(launch) = r.launch.as_mut() else {
            return;
        };
        let from = launch.decided().batch_size;
        launch.rebatch = (shape != launch.shape).then(|| PendingRebatch {
            shape: shape.clone(),
            at_s: now,
        });
        let (id, attempt) = (r.id.clone(), r.attempt);
        out.touched.insert(id.clone());
        out.event(Event::Rebatched {
            id: id.clone(),
            attempt,
            from,
            shape: shape.clone(),
        });
        out.action(Action::Rebatch { id, attempt, shape });
    }

    /// Asks the launch of job `i` to stop; the signal goes out once the launch is confirmed.
    pub(super) fn request_stop(
        &mut self,
        now: f64,
        i: usize,
        reason: StopReason,
        next: Option<Shape>,
        out: &mut Out,
    ) {
        let r = &mut self.live[i];
        let Some(launch) = r.launch.as_mut() else {
            return;
        };
        let started = launch.started_s.is_some();
        launch.stop = Some(StopRequest {
            reason,
            at_s: now,
            sent_s: started.then_some(now),
            delivered: false,
            killed_s: None,
            next: next.clone(),
        });
        // A batch its workers have not taken is not taken now: the next launch runs what was
        // decided for it.
        launch.rebatch = None;
        r.status = Status::Stopping;
        let (id, attempt) = (r.id.clone(), r.attempt);
        if started {
            out.action(Action::Stop {
                id: id.clone(),
                attempt,
                reason,
            });
        }
        out.touched.insert(id.clone());
        out.event(Event::Stopping {
            id,
            attempt,
            reason,
            next,
        });
    }
}
