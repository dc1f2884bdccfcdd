//! Durable state in SQLite (WAL, `synchronous=FULL`): jobs, allocations, events, metrics and
//! profiles. Every change of a job is one transaction; the API answers only after it committed.
//!
//! SQLite calls block, so the async side goes through [`Store::call`], which runs them on
//! tokio's blocking pool.

use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, Context, Result};
use dlscale_core::throughput::{AnalyticModel, FitQuality};
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

use crate::job::{Event, JobRecord, JobStatus, Runtime};
use crate::placement::Share;
use crate::spec::JobSpec;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL UNIQUE,
    spec TEXT NOT NULL,
    state TEXT NOT NULL,
    runtime TEXT NOT NULL,
    submitted_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS allocations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL REFERENCES jobs(id),
    at REAL NOT NULL,
    attempt INTEGER NOT NULL,
    gpus INTEGER NOT NULL,
    batch_size INTEGER NOT NULL,
    local_batch_size INTEGER NOT NULL,
    slots TEXT NOT NULL,
    nodes TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_job ON events(job_id, id);
CREATE TABLE IF NOT EXISTS metrics (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL REFERENCES jobs(id),
    at REAL NOT NULL,
    attempt INTEGER NOT NULL,
    step INTEGER NOT NULL,
    samples_per_s REAL NOT NULL,
    batch_size INTEGER NOT NULL,
    world_size INTEGER NOT NULL,
    loss REAL,
    samples_seen INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS metrics_job ON metrics(job_id, id);
CREATE TABLE IF NOT EXISTS profiles (
    name TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    quality TEXT,
    source TEXT NOT NULL,
    updated_at REAL NOT NULL
);
";

/// A stored throughput profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Name (`job:<id>` for models fitted from a job's metrics).
    pub name: String,
    /// The fitted model.
    pub model: AnalyticModel,
    /// How well it fits its measurements, when known.
    pub quality: Option<FitQuality>,
    /// `profile` (from `dlscale profile`), `metrics` (fitted by the server) or `user`.
    pub source: String,
    /// Seconds since the epoch.
    pub updated_at: f64,
}

/// One metrics report of a worker, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MetricsRow {
    /// Launch it came from.
    pub attempt: u32,
    /// Global step.
    pub step: u64,
    /// Measured samples per second.
    pub samples_per_s: f64,
    /// Global batch.
    pub batch_size: u32,
    /// Workers.
    pub world_size: u32,
    /// Mean loss over the report window.
    pub loss: Option<f64>,
    /// Samples seen so far.
    pub samples_seen: u64,
}

/// An allocation applied to a job (one launch).
#[derive(Debug, Clone, PartialEq)]
pub struct AllocationRow {
    /// Launch number.
    pub attempt: u32,
    /// Workers.
    pub gpus: u32,
    /// Global batch.
    pub batch_size: u32,
    /// Per-worker batch.
    pub local_batch_size: u32,
    /// Slot ids (local executor).
    pub slots: Vec<u32>,
    /// Nodes and GPUs per node.
    pub nodes: Vec<Share>,
}

/// Handle to the database; cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    conn: Arc<Mutex<Connection>>,
}

/// Seconds since the epoch.
pub fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn json<T: Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).context("serialising for the database")
}

impl Store {
    /// Opens (creating if needed) the database at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let conn = Connection::open(path)
            .with_context(|| format!("cannot open database {}", path.display()))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.execute_batch(SCHEMA)
            .context("creating the database schema")?;
        // Databases from before node-aware placement lack allocations.nodes.
        let has_nodes = conn
            .prepare("SELECT 1 FROM pragma_table_info('allocations') WHERE name = 'nodes'")?
            .exists([])?;
        if !has_nodes {
            conn.execute_batch(
                "ALTER TABLE allocations ADD COLUMN nodes TEXT NOT NULL DEFAULT '[]'",
            )
            .context("adding allocations.nodes to the database")?;
        }
        Ok(Store {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// Runs `f` with the connection on the blocking thread pool.
    pub async fn call<R, F>(&self, f: F) -> Result<R>
    where
        F: FnOnce(&mut Connection) -> Result<R> + Send + 'static,
        R: Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            let mut guard = conn
                .lock()
                .map_err(|_| anyhow!("database connection lock poisoned"))?;
            f(&mut guard)
        })
        .await
        .context("database task panicked")?
    }

    /// Inserts a new job and its `submitted` event in one transaction. Fails on a duplicate id.
    pub async fn insert_job(&self, rec: JobRecord, detail: String) -> Result<()> {
        self.call(move |conn| {
            let tx = conn.transaction()?;
            tx.execute(
                "INSERT INTO jobs (id, seq, spec, state, runtime, submitted_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)",
                params![
                    rec.spec.id,
                    rec.seq,
                    json(&rec.spec)?,
                    rec.status.name(),
                    json(&rec.rt)?,
                    rec.submitted_at
                ],
            )?;
            insert_event(&tx, Some(&rec.spec.id), "submitted", &detail)?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// Saves a job's state and runtime, with its new events and (for a launch) the allocation,
    /// in one transaction.
    pub async fn update_job(
        &self,
        id: String,
        status: JobStatus,
        rt: Runtime,
        events: Vec<(String, String)>,
        allocation: Option<AllocationRow>,
    ) -> Result<()> {
        self.call(move |conn| {
            let tx = conn.transaction()?;
            let t = now();
            let changed = tx.execute(
                "UPDATE jobs SET state = ?2, runtime = ?3, updated_at = ?4 WHERE id = ?1",
                params![id, status.name(), json(&rt)?, t],
            )?;
            if changed != 1 {
                return Err(anyhow!("job '{id}' is not in the database"));
            }
            for (kind, detail) in &events {
                insert_event(&tx, Some(&id), kind, detail)?;
            }
            if let Some(a) = allocation {
                tx.execute(
                    "INSERT INTO allocations (job_id, at, attempt, gpus, batch_size, local_batch_size, slots, nodes)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                    params![id, t, a.attempt, a.gpus, a.batch_size, a.local_batch_size, json(&a.slots)?, json(&a.nodes)?],
                )?;
            }
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// Every job, in submission order.
    pub async fn load_jobs(&self) -> Result<Vec<JobRecord>> {
        self.call(|conn| {
            let mut stmt = conn.prepare(
                "SELECT id, seq, spec, state, runtime, submitted_at FROM jobs ORDER BY seq",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, f64>(5)?,
                ))
            })?;
            let mut jobs = Vec::new();
            for row in rows {
                let (id, seq, spec, state, runtime, submitted_at) = row?;
                let spec: JobSpec = serde_json::from_str(&spec)
                    .with_context(|| format!("job '{id}': stored spec is unreadable"))?;
                let status: JobStatus = serde_json::from_value(serde_json::Value::String(state))
                    .with_context(|| format!("job '{id}': stored state is unknown"))?;
                let rt: Runtime = serde_json::from_str(&runtime)
                    .with_context(|| format!("job '{id}': stored runtime is unreadable"))?;
                jobs.push(JobRecord {
                    seq,
                    spec,
                    status,
                    rt,
                    submitted_at,
                });
            }
            Ok(jobs)
        })
        .await
    }

    /// The last `limit` events of a job, oldest first.
    pub async fn events(&self, id: String, limit: u32) -> Result<Vec<Event>> {
        self.call(move |conn| {
            let mut stmt = conn.prepare(
                "SELECT at, kind, detail FROM events WHERE job_id = ?1 ORDER BY id DESC LIMIT ?2",
            )?;
            let mut events = stmt
                .query_map(params![id, limit], |r| {
                    Ok(Event {
                        at: r.get(0)?,
                        kind: r.get(1)?,
                        detail: r.get(2)?,
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            events.reverse();
            Ok(events)
        })
        .await
    }

    /// Stores a metrics report and the job's updated runtime in one transaction.
    pub async fn insert_metrics(&self, id: String, row: MetricsRow, rt: Runtime) -> Result<()> {
        self.call(move |conn| {
            let tx = conn.transaction()?;
            let t = now();
            tx.execute(
                "INSERT INTO metrics (job_id, at, attempt, step, samples_per_s, batch_size, world_size, loss, samples_seen)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![id, t, row.attempt, row.step as i64, row.samples_per_s, row.batch_size,
                        row.world_size, row.loss, row.samples_seen as i64],
            )?;
            tx.execute(
                "UPDATE jobs SET runtime = ?2, updated_at = ?3 WHERE id = ?1",
                params![id, json(&rt)?, t],
            )?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// The last `limit` metrics reports of a job, oldest first.
    pub async fn metrics(&self, id: String, limit: u32) -> Result<Vec<MetricsRow>> {
        self.call(move |conn| {
            let mut stmt = conn.prepare(
                "SELECT attempt, step, samples_per_s, batch_size, world_size, loss, samples_seen
                 FROM metrics WHERE job_id = ?1 ORDER BY id DESC LIMIT ?2",
            )?;
            let mut rows = stmt
                .query_map(params![id, limit], |r| {
                    Ok(MetricsRow {
                        attempt: r.get(0)?,
                        step: r.get::<_, i64>(1)?.max(0) as u64,
                        samples_per_s: r.get(2)?,
                        batch_size: r.get(3)?,
                        world_size: r.get(4)?,
                        loss: r.get(5)?,
                        samples_seen: r.get::<_, i64>(6)?.max(0) as u64,
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            rows.reverse();
            Ok(rows)
        })
        .await
    }

    /// Inserts or replaces a profile.
    pub async fn put_profile(&self, profile: Profile) -> Result<()> {
        self.call(move |conn| {
            conn.execute(
                "INSERT INTO profiles (name, model, quality, source, updated_at) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT(name) DO UPDATE SET model = excluded.model, quality = excluded.quality,
                 source = excluded.source, updated_at = excluded.updated_at",
                params![
                    profile.name,
                    json(&profile.model)?,
                    profile.quality.as_ref().map(json).transpose()?,
                    profile.source,
                    profile.updated_at
                ],
            )?;
            Ok(())
        })
        .await
    }

    /// Every profile.
    pub async fn load_profiles(&self) -> Result<Vec<Profile>> {
        self.call(|conn| {
            let mut stmt = conn.prepare(
                "SELECT name, model, quality, source, updated_at FROM profiles ORDER BY name",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, f64>(4)?,
                ))
            })?;
            let mut profiles = Vec::new();
            for row in rows {
                let (name, model, quality, source, updated_at) = row?;
                profiles.push(Profile {
                    model: serde_json::from_str(&model)
                        .with_context(|| format!("profile '{name}': stored model is unreadable"))?,
                    quality: quality
                        .map(|q| serde_json::from_str(&q))
                        .transpose()
                        .with_context(|| {
                            format!("profile '{name}': stored quality is unreadable")
                        })?,
                    name,
                    source,
                    updated_at,
                });
            }
            Ok(profiles)
        })
        .await
    }

    /// The allocations applied to a job, oldest first.
    pub async fn allocations(&self, id: String) -> Result<Vec<AllocationRow>> {
        self.call(move |conn| {
            let mut stmt = conn.prepare(
                "SELECT attempt, gpus, batch_size, local_batch_size, slots, nodes FROM allocations
                 WHERE job_id = ?1 ORDER BY id",
            )?;
            let rows = stmt.query_map(params![id], |r| {
                Ok((
                    r.get::<_, u32>(0)?,
                    r.get::<_, u32>(1)?,
                    r.get::<_, u32>(2)?,
                    r.get::<_, u32>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, String>(5)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (attempt, gpus, batch_size, local_batch_size, slots, nodes) = row?;
                out.push(AllocationRow {
                    attempt,
                    gpus,
                    batch_size,
                    local_batch_size,
                    slots: serde_json::from_str(&slots).context("stored slots are unreadable")?,
                    nodes: serde_json::from_str(&nodes).context("stored nodes are unreadable")?,
                });
            }
            Ok(out)
        })
        .await
    }

    /// Whether a job id exists in the database.
    pub async fn job_exists(&self, id: String) -> Result<bool> {
        self.call(move |conn| {
            Ok(conn
                .query_row("SELECT 1 FROM jobs WHERE id = ?1", params![id], |_| Ok(()))
                .optional()?
                .is_some())
        })
        .await
    }
}

fn insert_event(
    tx: &rusqlite::Transaction<'_>,
    job: Option<&str>,
    kind: &str,
    detail: &str,
) -> Result<()> {
    tx.execute(
        "INSERT INTO events (job_id, at, kind, detail) VALUES (?1, ?2, ?3, ?4)",
        params![job, now(), kind, detail],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, seq: i64) -> JobRecord {
        let spec = JobSpec::from_value(serde_json::json!({
            "id": id, "min_batch": 32, "max_batch": 64, "max_local_batch": 64,
            "command": ["true"], "workdir": "/tmp", "launcher": "plain"}))
        .unwrap();
        JobRecord {
            seq,
            spec,
            status: JobStatus::Queued,
            rt: Runtime::default(),
            submitted_at: 1.0,
        }
    }

    #[tokio::test]
    async fn jobs_survive_reopen_and_duplicates_fail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        {
            let store = Store::open(&path).unwrap();
            store.insert_job(record("a", 1), "x".into()).await.unwrap();
            assert!(store.insert_job(record("a", 2), "x".into()).await.is_err());
            let rt = Runtime {
                attempt: 1,
                slots: vec![0, 1],
                pid: Some(42),
                ..Runtime::default()
            };
            store
                .update_job(
                    "a".into(),
                    JobStatus::Running,
                    rt,
                    vec![("started".into(), "on 2".into())],
                    Some(AllocationRow {
                        attempt: 1,
                        gpus: 2,
                        batch_size: 64,
                        local_batch_size: 32,
                        slots: vec![0, 1],
                        nodes: vec![Share {
                            node: "local".into(),
                            gpus: 2,
                        }],
                    }),
                )
                .await
                .unwrap();
            assert!(store
                .update_job(
                    "zz".into(),
                    JobStatus::Running,
                    Runtime::default(),
                    vec![],
                    None
                )
                .await
                .is_err());
        }
        let store = Store::open(&path).unwrap();
        let jobs = store.load_jobs().await.unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].status, JobStatus::Running);
        assert_eq!(jobs[0].rt.slots, vec![0, 1]);
        let events = store.events("a".into(), 10).await.unwrap();
        let kinds: Vec<_> = events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, ["submitted", "started"]);
        assert_eq!(store.allocations("a".into()).await.unwrap().len(), 1);
        assert!(store.job_exists("a".into()).await.unwrap());
    }

    #[tokio::test]
    async fn profiles_and_metrics_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db")).unwrap();
        store.insert_job(record("a", 1), "x".into()).await.unwrap();
        let row = MetricsRow {
            attempt: 1,
            step: 10,
            samples_per_s: 100.0,
            batch_size: 32,
            world_size: 1,
            loss: None,
            samples_seen: 320,
        };
        store
            .insert_metrics("a".into(), row, Runtime::default())
            .await
            .unwrap();
        assert_eq!(store.metrics("a".into(), 5).await.unwrap(), vec![row]);
        let p = Profile {
            name: "p".into(),
            model: crate::spec::PRIOR,
            quality: None,
            source: "user".into(),
            updated_at: 1.0,
        };
        store.put_profile(p.clone()).await.unwrap();
        store.put_profile(p.clone()).await.unwrap();
        assert_eq!(store.load_profiles().await.unwrap(), vec![p]);
    }
}
