//! Where each team stands now: its guarantee, what its jobs hold, what of that is borrowed,
//! what of its guarantee others hold, its jobs waiting and its fair share. One computation for
//! `GET /v1/teams`, the dashboard's team bars and the per-team Prometheus gauges.

use serde::{Deserialize, Serialize};

use dlscale_autoscaler::Status;
use dlscale_core::allocator::Teams;
use dlscale_core::GpuCount;

use crate::service::View;

/// Configured teams that do not fit what the service found (guarantees beyond its GPUs, a team
/// its live jobs name left out): the configuration's error, found only at the start or a reload.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("teams: {0}")]
pub struct TeamsMisfit(pub String);

/// Refuses teams whose guarantees add up to more than `gpus`, the GPUs the cluster has
/// (`offered_by` says whose they are, and what follows).
pub fn ensure_guarantees_fit(
    teams: &Teams,
    gpus: GpuCount,
    offered_by: &str,
) -> Result<(), TeamsMisfit> {
    let guaranteed: u64 = teams
        .quotas()
        .iter()
        .map(|q| u64::from(q.guaranteed_gpus))
        .sum();
    if guaranteed > u64::from(gpus) {
        return Err(TeamsMisfit(format!(
            "the guarantees add up to {guaranteed} GPUs, more than the {gpus} {offered_by}"
        )));
    }
    Ok(())
}

/// One team now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeamView {
    /// Its name ([`dlscale_core::allocator::DEFAULT_TEAM`] for jobs that name none).
    pub team: String,
    /// What it holds whenever its jobs can use it.
    pub guaranteed_gpus: GpuCount,
    /// The most its jobs hold together (`None`: no limit).
    pub max_gpus: Option<GpuCount>,
    /// What its jobs hold.
    pub gpus: GpuCount,
    /// What its jobs hold beyond its guarantee.
    pub borrowed_gpus: GpuCount,
    /// What of its guarantee other teams' jobs hold.
    pub lent_gpus: GpuCount,
    /// Its jobs waiting for GPUs.
    pub jobs_waiting: u32,
    /// Its fair-share factor, multiplying its jobs' values: 1 when it used nothing lately, 0.5
    /// at exactly its share, less above it (`None`: fair share is off).
    pub fair_share: Option<f64>,
    /// Its GPU-hours with fair share's decay (`None`: fair share is off).
    pub decayed_gpu_hours: Option<f64>,
}

/// Each team of `teams` in `view`, in the teams' order. What others borrow is counted as lent
/// out of the idle guarantees, in that order.
pub fn team_views(view: &View, teams: &Teams) -> Vec<TeamView> {
    let n = teams.quotas().len();
    let (mut held, mut waiting) = (vec![0; n], vec![0; n]);
    for j in view.jobs.values() {
        let t = teams.of_name(j.spec.entry.team.as_deref());
        held[t] += j.record.shape().map_or(0, |s| s.gpus);
        waiting[t] += u32::from(j.record.status == Status::Queued);
    }
    let borrowed: Vec<GpuCount> = teams
        .quotas()
        .iter()
        .zip(&held)
        .map(|(q, &h)| h.saturating_sub(q.guaranteed_gpus))
        .collect();
    let mut to_place: GpuCount = borrowed.iter().sum();
    let factors = view.team_usage.as_ref().map(|u| u.factors(teams));
    let mut out = Vec::with_capacity(n);
    for (t, (name, quota)) in teams.names().iter().zip(teams.quotas()).enumerate() {
        let idle = quota.guaranteed_gpus.saturating_sub(held[t]);
        let lent = idle.min(to_place);
        to_place -= lent;
        out.push(TeamView {
            team: name.to_string(),
            guaranteed_gpus: quota.guaranteed_gpus,
            max_gpus: Some(quota.max_gpus).filter(|&m| m != GpuCount::MAX),
            gpus: held[t],
            borrowed_gpus: borrowed[t],
            lent_gpus: lent,
            jobs_waiting: waiting[t],
            fair_share: factors.as_ref().map(|f| f[t]),
            decayed_gpu_hours: view
                .team_usage
                .as_ref()
                .and_then(|u| u.decayed_gpu_s.get(t))
                .map(|s| s / 3600.0),
        });
    }
    out
}
