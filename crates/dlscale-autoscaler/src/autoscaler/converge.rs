//! Convergence: stops for running jobs whose target changed, launches for waiting jobs whose GPUs
//! are free.

use std::collections::BTreeMap;

use dlscale_core::GpuCount;

use super::{Autoscaler, Out, Target};
use crate::output::{Action, Event, LaunchSpec, Shape, StopReason};
use crate::record::{Launch, Status, StopRequest, Waiting};

impl Autoscaler {
    /// Stops running jobs whose target differs; launches waiting jobs whose GPUs are free.
    pub(super) fn converge(&mut self, now: f64, out: &mut Out) {
        let mut free: BTreeMap<String, GpuCount> = self
            .topology
            .nodes
            .iter()
            .map(|n| (n.name.clone(), n.gpus))
            .collect();
        let mut holder: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for r in &self.live {
            if let Some(shape) = r.shape() {
                for s in &shape.shares {
                    if let Some(f) = free.get_mut(&s.node) {
                        *f = f.saturating_sub(s.gpus);
                    }
                    holder.entry(s.node.clone()).or_default().push(r.id.clone());
                }
            }
        }
        let mut i = 0;
        while i < self.live.len() {
            let id = self.live[i].id.clone();
            let target = self.plan.get(&id).cloned();
            match (self.live[i].status, target) {
                (Status::Starting | Status::Running, Some(Target::Run(shape))) => {
                    let current = self.live[i].launch.as_ref().map(|l| &l.shape);
                    if current != Some(&shape) {
                        let reason = match current {
                            Some(c) if c.gpus == shape.gpus && c.batch_size == shape.batch_size => {
                                StopReason::Repack
                            }
                            _ => StopReason::Rescale,
                        };
                        self.request_stop(now, i, reason, Some(shape), out);
                    }
                }
                (Status::Starting | Status::Running, Some(Target::Wait | Target::Drop)) => {
                    self.request_stop(now, i, StopReason::Preempt, None, out)
                }
                (Status::Queued, Some(Target::Run(shape))) => {
                    let blocked = self.stale.iter().any(|(s, _)| s == &id);
                    let fits = shape
                        .shares
                        .iter()
                        .all(|s| free.get(&s.node).is_some_and(|&f| f >= s.gpus));
                    if blocked {
                        self.wait(i, Waiting::ForStaleLaunch, out);
                    } else if fits {
                        for s in &shape.shares {
                            if let Some(f) = free.get_mut(&s.node) {
                                *f -= s.gpus;
                            }
                        }
                        self.launch(now, i, shape, out);
                    } else {
                        let mut held_by: Vec<String> = shape
                            .shares
                            .iter()
                            .filter(|s| free.get(&s.node).is_none_or(|&f| f < s.gpus))
                            .flat_map(|s| holder.get(&s.node).cloned().unwrap_or_default())
                            .collect();
                        held_by.sort();
                        held_by.dedup();
                        self.wait(i, Waiting::ForGpus { held_by }, out);
                    }
                }
                (Status::Queued, Some(Target::Drop)) if self.live[i].attempt == 0 => {
                    out.event(Event::Dropped { id: id.clone() });
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
        r.completed_attempt = None;
        r.launch = Some(Launch {
            shape: shape.clone(),
            launched_s: now,
            started_s: None,
            stop: None,
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
        launch.stop = Some(StopRequest {
            reason,
            at_s: now,
            delivered: false,
            killed_s: None,
            next: next.clone(),
        });
        r.status = Status::Stopping;
        let (id, attempt) = (r.id.clone(), r.attempt);
        if launch.started_s.is_some() {
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
