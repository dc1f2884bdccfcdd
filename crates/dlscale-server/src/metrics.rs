//! Prometheus metrics (`GET /metrics`), through the `prometheus-client` crate: counters and
//! histograms that live as long as the service, and per-job gauges read from the current view at
//! each scrape (label values escaped by the encoder).

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use dlscale_core::allocator::{Teams, DEFAULT_TEAM};

use crate::service::View;
use crate::teams::team_views;

/// Labels of a per-route metric.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// HTTP method.
    pub method: String,
    /// The route's path template (`/v1/jobs/{id}`), not the requested path.
    pub route: String,
    /// Status code class.
    pub status: String,
}

/// Labels of a per-job gauge.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    job: String,
    team: String,
}

/// Labels of a per-team gauge.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TeamLabels {
    team: String,
}

/// Labels of a per-state gauge.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

/// The service's long-lived metrics.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// Time the autoscaler took for batches that decided, seconds.
    pub decision_seconds: Histogram,
    /// HTTP request latency by route, seconds.
    pub http_seconds: Family<RouteLabels, Histogram>,
    /// Launches handed to the executor.
    pub launches: Counter,
    /// Stops handed to the executor.
    pub stops: Counter,
    /// Kills handed to the executor.
    pub kills: Counter,
    /// Batch changes in place handed out.
    pub rebatches: Counter,
    /// Metrics reports received from workers.
    pub reports: Counter,
}

fn latency_histogram() -> Histogram {
    // 100 µs to ~100 s.
    Histogram::new(exponential_buckets(1e-4, 2.0, 20))
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            decision_seconds: latency_histogram(),
            http_seconds: Family::new_with_constructor(latency_histogram),
            launches: Counter::default(),
            stops: Counter::default(),
            kills: Counter::default(),
            rebatches: Counter::default(),
            reports: Counter::default(),
        }
    }
}

impl Metrics {
    /// The text exposition of every metric, with per-job gauges from `view`.
    pub fn render(&self, view: &View) -> String {
        let mut registry = <Registry>::with_prefix("dlscale");
        registry.register(
            "decision_seconds",
            "Time the autoscaler took for batches that decided",
            self.decision_seconds.clone(),
        );
        registry.register(
            "http_request_seconds",
            "HTTP request latency by route",
            self.http_seconds.clone(),
        );
        registry.register(
            "launches",
            "Launches handed to the executor",
            self.launches.clone(),
        );
        registry.register("stops", "Stops handed to the executor", self.stops.clone());
        registry.register("kills", "Kills handed to the executor", self.kills.clone());
        registry.register(
            "rebatches",
            "Batch changes in place, answered to the jobs' reports",
            self.rebatches.clone(),
        );
        registry.register(
            "metrics_reports",
            "Metrics reports received from workers",
            self.reports.clone(),
        );
        let jobs = Family::<StateLabels, Gauge>::default();
        let gpus_total: Gauge = Gauge::default();
        let gpus_used: Gauge = Gauge::default();
        gpus_total.set(i64::from(view.topology.total()));
        let job_gpus = Family::<JobLabels, Gauge>::default();
        let job_batch = Family::<JobLabels, Gauge>::default();
        let job_rate = Family::<JobLabels, Gauge<f64, AtomicU64>>::default();
        let job_step = Family::<JobLabels, Gauge>::default();
        let job_restarts = Family::<JobLabels, Gauge>::default();
        for j in view.jobs.values() {
            let r = &j.record;
            jobs.get_or_create(&StateLabels {
                state: r.status.name().to_string(),
            })
            .inc();
            let team = j.spec.entry.team.as_deref().unwrap_or(DEFAULT_TEAM);
            let labels = JobLabels {
                job: r.id.clone(),
                team: team.to_string(),
            };
            if let Some(shape) = r.shape() {
                gpus_used.inc_by(i64::from(shape.gpus));
                job_gpus.get_or_create(&labels).set(i64::from(shape.gpus));
                job_batch
                    .get_or_create(&labels)
                    .set(i64::from(shape.batch_size));
            }
            if let Some(rate) = r.progress.samples_per_s {
                job_rate.get_or_create(&labels).set(rate);
            }
            if let Some(step) = r.progress.step {
                job_step
                    .get_or_create(&labels)
                    .set(i64::try_from(step).unwrap_or(i64::MAX));
            }
            job_restarts
                .get_or_create(&labels)
                .set(i64::from(r.restarts));
        }
        registry.register("jobs", "Live jobs by state", jobs);
        registry.register("gpus", "GPUs dlscale may use now", gpus_total);
        registry.register("gpus_used", "GPUs held by live launches", gpus_used);
        registry.register("job_gpus", "GPUs a job's launch holds", job_gpus);
        registry.register(
            "job_batch_size",
            "Global batch of a job's launch",
            job_batch,
        );
        registry.register(
            "job_samples_per_s",
            "Throughput a job reported last",
            job_rate,
        );
        registry.register("job_step", "Step a job reported last", job_step);
        registry.register("job_restarts", "Relaunches of a job", job_restarts);
        if let Some(teams) = &view.teams {
            register_teams(&mut registry, view, teams);
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &registry);
        out
    }
}

/// The per-team gauges ([`team_views`]): each team's guarantee, what its jobs hold, what of that
/// is borrowed (beyond its guarantee), what of its guarantee others hold (lent), its jobs
/// waiting, and its fair-share factor (with fair share).
fn register_teams(registry: &mut Registry, view: &View, teams: &Teams) {
    let gauges: [(&str, &str, Family<TeamLabels, Gauge>); 5] = [
        (
            "team_guaranteed_gpus",
            "GPUs a team is guaranteed",
            Family::default(),
        ),
        ("team_gpus", "GPUs a team's jobs hold", Family::default()),
        (
            "team_borrowed_gpus",
            "GPUs a team's jobs hold beyond its guarantee",
            Family::default(),
        ),
        (
            "team_lent_gpus",
            "GPUs of a team's guarantee that other teams' jobs hold",
            Family::default(),
        ),
        (
            "team_jobs_waiting",
            "A team's jobs waiting for GPUs",
            Family::default(),
        ),
    ];
    let fair_share = Family::<TeamLabels, Gauge<f64, AtomicU64>>::default();
    for t in team_views(view, teams) {
        let labels = TeamLabels { team: t.team };
        let values = [
            t.guaranteed_gpus,
            t.gpus,
            t.borrowed_gpus,
            t.lent_gpus,
            t.jobs_waiting,
        ];
        for ((_, _, family), value) in gauges.iter().zip(values) {
            family.get_or_create(&labels).set(i64::from(value));
        }
        if let Some(factor) = t.fair_share {
            fair_share.get_or_create(&labels).set(factor);
        }
    }
    if view.team_usage.is_some() {
        registry.register(
            "team_fair_share",
            "A team's fair-share factor, multiplying its jobs' values (1: it used nothing lately; 0.5: its share)",
            fair_share,
        );
    }
    for (name, help, family) in gauges {
        registry.register(name, help, family);
    }
}
