//! An executor that starts no process, for the router and driver tests: a launch is running
//! from the moment it is started until the test ends it ([`FakeExecutor::end`]) or dlscale
//! stops or kills it (then it ends as a worker that checkpointed on SIGTERM would, with the
//! stop exit code). Its observations are level-triggered like the real executors'.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Result;
use dlscale_autoscaler::{
    Input, LaunchSpec, LaunchState, Observation, ObservedLaunch, Outcome, Shape,
};
use dlscale_server::executor::{
    Believed, Capacity, ExecContext, Executor, Handle, LaunchJob, Reports, STOP_EXIT_CODE,
};

/// The node of a fake executor's GPUs, unless it is given several.
pub const NODE: &str = "fake";

/// See the module documentation.
#[derive(Debug)]
pub struct FakeExecutor {
    ctx: ExecContext,
    /// Its nodes, never changed.
    capacity: Capacity,
    running: Mutex<BTreeMap<(String, u32), Shape>>,
    ended: Mutex<BTreeMap<(String, u32), Outcome>>,
    launches: Mutex<Vec<(String, u32, Shape)>>,
    reports: Reports,
}

impl FakeExecutor {
    /// An executor over the nodes of `capacity` (one node, [`NODE`], or typed ones, say).
    pub fn on(ctx: ExecContext, capacity: Capacity, reports: Reports) -> FakeExecutor {
        FakeExecutor {
            ctx,
            capacity,
            running: Mutex::default(),
            ended: Mutex::default(),
            launches: Mutex::default(),
            reports,
        }
    }

    /// Every launch started so far, in order: job id, attempt, shape.
    pub fn launches(&self) -> Vec<(String, u32, Shape)> {
        self.launches.lock().unwrap().clone()
    }

    /// The launches running now, by (job id, attempt).
    pub fn running(&self) -> BTreeMap<(String, u32), Shape> {
        self.running.lock().unwrap().clone()
    }

    /// Ends launch `attempt` of `id` with `outcome`, as its processes exiting would; `false`
    /// when it is not running.
    pub fn end(&self, id: &str, attempt: u32, outcome: Outcome) -> bool {
        let key = (id.to_string(), attempt);
        if self.running.lock().unwrap().remove(&key).is_none() {
            return false;
        }
        self.ended.lock().unwrap().insert(key, outcome.clone());
        let _ = self.reports.send(vec![Input::Exited {
            id: id.to_string(),
            attempt,
            outcome,
        }]);
        true
    }
}

#[async_trait::async_trait]
impl Executor for FakeExecutor {
    fn name(&self) -> &'static str {
        "fake"
    }

    fn ctx(&self) -> &ExecContext {
        &self.ctx
    }

    async fn capacity(&self) -> Result<Capacity> {
        Ok(self.capacity.clone())
    }

    fn poll_interval(&self) -> Duration {
        Duration::from_millis(50)
    }

    async fn observe(&self, believed: &[Believed]) -> Result<Observation> {
        let running = self.running.lock().unwrap();
        let ended = self.ended.lock().unwrap();
        let mut launches: Vec<ObservedLaunch> = running
            .keys()
            .map(|(id, attempt)| ObservedLaunch {
                id: id.clone(),
                attempt: *attempt,
                state: LaunchState::Running,
            })
            .collect();
        for b in believed {
            if let Some(outcome) = ended.get(&(b.id.clone(), b.attempt)) {
                launches.push(ObservedLaunch {
                    id: b.id.clone(),
                    attempt: b.attempt,
                    state: LaunchState::Ended {
                        outcome: outcome.clone(),
                    },
                });
            }
        }
        Ok(Observation {
            taken_at_s: self.ctx.clock.now_s(),
            asked: Believed::keys(believed),
            launches,
        })
    }

    async fn launch(&self, launch: &LaunchSpec, _job: &LaunchJob) -> Result<()> {
        let key = (launch.id.clone(), launch.attempt);
        let mut running = self.running.lock().unwrap();
        let busy: u32 = running.values().map(|s| s.gpus).sum();
        let free = self.capacity.topology.total().saturating_sub(busy);
        anyhow::ensure!(
            launch.shape.gpus <= free,
            "{} GPUs asked for, {free} free",
            launch.shape.gpus
        );
        running.insert(key, launch.shape.clone());
        self.launches.lock().unwrap().push((
            launch.id.clone(),
            launch.attempt,
            launch.shape.clone(),
        ));
        Ok(())
    }

    async fn stop(&self, id: &str, attempt: u32, _job: Option<&LaunchJob>) -> Result<bool> {
        // Delivered, and the workers checkpoint and exit at once.
        Ok(self.end(id, attempt, Outcome::Exited(STOP_EXIT_CODE)))
    }

    async fn kill(&self, id: &str, attempt: u32) {
        self.end(id, attempt, Outcome::Exited(-9));
    }

    fn handles(&self) -> BTreeMap<(String, u32), Handle> {
        self.running
            .lock()
            .unwrap()
            .keys()
            .map(|k| (k.clone(), Handle::default()))
            .collect()
    }
}
