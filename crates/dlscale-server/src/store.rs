//! Durable state in SQLite (WAL, `synchronous=FULL`).
//!
//! Everything the autoscaler was told and everything it decided is written in one transaction
//! per batch ([`Store::commit`]) before any of its actions is carried out: the inputs (so that
//! `dlscale replay` can feed them through the autoscaler again), the job records that changed
//! (what a restart resumes from), the model families' pools of measurements that changed (what
//! a family learned outlives its jobs), the actions (intents) and the typed events. Nothing the
//! executors observe (process ids, Slurm job ids) is stored: they find their launches again by
//! the launch marker.
//!
//! Two connections: the driver writes through one, API reads go through the other (WAL lets
//! them run side by side), so a slow fsync never stalls a read. SQLite calls block, so every
//! call runs on tokio's blocking pool ([`Store::write`], [`Store::read`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail, Context, Result};
use dlscale_autoscaler::learn::Measurements;
use dlscale_autoscaler::{Action, Event, Input, JobRecord};
use dlscale_core::throughput::{AnalyticModel, FitQuality};
use rusqlite::{params, Connection, ErrorCode};
use serde::{Deserialize, Serialize};

use crate::spec::JobSpec;

/// The schema this version writes (`PRAGMA user_version`).
const SCHEMA_VERSION: i64 = 2;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL,
    spec TEXT NOT NULL,
    worker_token TEXT NOT NULL,
    record TEXT NOT NULL,
    status TEXT NOT NULL,
    submitted_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_id ON jobs(id, seq);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_live_id ON jobs(id)
    WHERE status IN ('queued', 'starting', 'running', 'stopping');
CREATE TABLE IF NOT EXISTS inputs (
    id INTEGER PRIMARY KEY,
    batch INTEGER NOT NULL,
    at REAL NOT NULL,
    input TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS inputs_batch ON inputs(batch);
CREATE TABLE IF NOT EXISTS intents (
    id INTEGER PRIMARY KEY,
    batch INTEGER NOT NULL,
    at REAL NOT NULL,
    action TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,
    batch INTEGER NOT NULL,
    at REAL NOT NULL,
    job_seq INTEGER,
    kind TEXT NOT NULL,
    event TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_job ON events(job_seq, id);
CREATE TABLE IF NOT EXISTS metrics (
    id INTEGER PRIMARY KEY,
    job_seq INTEGER NOT NULL,
    at REAL NOT NULL,
    report TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS metrics_job ON metrics(job_seq, id);
CREATE TABLE IF NOT EXISTS profiles (
    name TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    quality TEXT,
    source TEXT NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS families (
    name TEXT PRIMARY KEY,
    pool TEXT NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS starts (
    id INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    batch INTEGER NOT NULL,
    config TEXT NOT NULL
);
";

/// A submission as the service received it: what the autoscaler's input log stores, so that a
/// replay rebuilds the same job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Received {
    /// The submission.
    pub spec: JobSpec,
    /// The stored profile's model it named, as it was then.
    pub profile_model: Option<AnalyticModel>,
}

/// An input as recorded.
pub type RecordedInput = Input<Received>;

/// A stored throughput profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Name.
    pub name: String,
    /// The model.
    pub model: AnalyticModel,
    /// How well it fits its measurements, when known.
    pub quality: Option<FitQuality>,
    /// `profile` (from `dlscale profile`) or `user`.
    pub source: String,
    /// Seconds since the epoch.
    pub updated_at: f64,
}

/// A job as stored: its submission, the token its workers hold, and the autoscaler's record.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredJob {
    /// The submission.
    pub spec: JobSpec,
    /// The job-scoped token of its workers.
    pub worker_token: String,
    /// The autoscaler's record.
    pub record: JobRecord,
}

/// One stored event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredEvent {
    /// Seconds since the epoch.
    pub at: f64,
    /// The typed event.
    pub event: Event,
}

/// Whose a job is, for accounting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOwner {
    /// Job id.
    pub id: String,
    /// Its arrival number: which submission of the id it is (an id is free again once its job
    /// has ended).
    pub seq: u64,
    /// Its team (`None`: the default team).
    pub team: Option<String>,
    /// The user who submitted it (`None`: the admin).
    pub user: Option<String>,
}

/// A new job of a batch: its submission and worker token, stored with its first record.
#[derive(Debug, Clone)]
pub struct NewJob {
    /// Arrival number the autoscaler gave it.
    pub seq: u64,
    /// The submission.
    pub spec: JobSpec,
    /// Its workers' token.
    pub worker_token: String,
}

/// What one batch wrote.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    /// Batch number.
    pub number: u64,
    /// When it ran.
    pub at_s: f64,
    /// Its inputs.
    pub inputs: Vec<RecordedInput>,
    /// Jobs it accepted.
    pub new_jobs: Vec<NewJob>,
    /// The records it changed.
    pub records: Vec<JobRecord>,
    /// Its actions, in order.
    pub actions: Vec<Action>,
    /// Its events.
    pub events: Vec<Event>,
    /// Profiles it stored.
    pub profiles: Vec<Profile>,
    /// The model families' pools it changed ([`dlscale_autoscaler::Step::families`]), as they
    /// are now.
    pub families: Vec<(String, Measurements)>,
}

/// Why a batch could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// A live job with this id exists (SQLite's unique constraint).
    #[error("a live job '{0}' exists")]
    Duplicate(String),
    /// Anything else: the disk is full or read-only, the file is gone, ...
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// Handle to the database; cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    writer: Arc<Mutex<Connection>>,
    reader: Arc<Mutex<Connection>>,
}

fn json<T: Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).context("serialising for the database")
}

fn connect(path: &Path) -> Result<Connection> {
    let conn = Connection::open(path)
        .with_context(|| format!("cannot open database {}", path.display()))?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    Ok(conn)
}

impl Store {
    /// Opens (creating if needed) the database at `path`. A database of an older dlscale is
    /// refused with a message (its jobs would be misread).
    pub fn open(path: &Path) -> Result<Self> {
        let conn = connect(path)?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        let has_jobs = conn
            .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'jobs'")?
            .exists([])?;
        if has_jobs && version != SCHEMA_VERSION {
            bail!(
                "{} was written by an older dlscale (schema {version}, this one writes {SCHEMA_VERSION}); \
                 move the data directory away (or let its jobs finish with the old version) and start again",
                path.display()
            );
        }
        conn.execute_batch(SCHEMA)
            .context("creating the database schema")?;
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        let reader = connect(path)?;
        Ok(Store {
            writer: Arc::new(Mutex::new(conn)),
            reader: Arc::new(Mutex::new(reader)),
        })
    }

    async fn on<R, F>(conn: &Arc<Mutex<Connection>>, f: F) -> Result<R>
    where
        F: FnOnce(&mut Connection) -> Result<R> + Send + 'static,
        R: Send + 'static,
    {
        let conn = Arc::clone(conn);
        tokio::task::spawn_blocking(move || {
            let mut guard = conn
                .lock()
                .map_err(|_| anyhow!("database connection lock poisoned"))?;
            f(&mut guard)
        })
        .await
        .context("database task panicked")?
    }

    /// Runs `f` with the writing connection on the blocking pool.
    pub async fn write<R, F>(&self, f: F) -> Result<R>
    where
        F: FnOnce(&mut Connection) -> Result<R> + Send + 'static,
        R: Send + 'static,
    {
        Self::on(&self.writer, f).await
    }

    /// Runs `f` with the reading connection on the blocking pool.
    pub async fn read<R, F>(&self, f: F) -> Result<R>
    where
        F: FnOnce(&mut Connection) -> Result<R> + Send + 'static,
        R: Send + 'static,
    {
        Self::on(&self.reader, f).await
    }

    /// Writes one batch in one transaction: inputs, new jobs, changed records, intents, events,
    /// profiles. Nothing is written when it fails.
    pub async fn commit(&self, batch: Batch) -> std::result::Result<(), WriteError> {
        let result = self
            .write(move |conn| {
                let tx = conn.transaction()?;
                let at = batch.at_s;
                let number = batch.number as i64;
                for input in &batch.inputs {
                    tx.execute(
                        "INSERT INTO inputs (batch, at, input) VALUES (?1, ?2, ?3)",
                        params![number, at, json(input)?],
                    )?;
                    if let Input::Metrics { id, report } = input {
                        tx.execute(
                            "INSERT INTO metrics (job_seq, at, report)
                             SELECT seq, ?2, ?3 FROM jobs WHERE id = ?1 ORDER BY seq DESC LIMIT 1",
                            params![id, at, json(report)?],
                        )?;
                    }
                }
                // Changed records first: a job that ended in this batch frees its id before a
                // new submission of that id is inserted (the live id is unique).
                for record in &batch.records {
                    tx.execute(
                        "UPDATE jobs SET record = ?2, status = ?3, updated_at = ?4 WHERE seq = ?1",
                        params![record.seq as i64, json(record)?, record.status.name(), at],
                    )?;
                }
                for job in &batch.new_jobs {
                    let record = batch
                        .records
                        .iter()
                        .find(|r| r.seq == job.seq)
                        .ok_or_else(|| anyhow!("job '{}' has no record", job.spec.id))?;
                    let inserted = tx.execute(
                        "INSERT INTO jobs (seq, id, spec, worker_token, record, status, submitted_at, updated_at)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
                        params![
                            job.seq as i64,
                            job.spec.id,
                            json(&job.spec)?,
                            job.worker_token,
                            json(record)?,
                            record.status.name(),
                            at
                        ],
                    );
                    if let Err(e) = inserted {
                        if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) {
                            return Err(anyhow::Error::new(Duplicate(job.spec.id.clone())));
                        }
                        return Err(e.into());
                    }
                }
                for action in &batch.actions {
                    tx.execute(
                        "INSERT INTO intents (batch, at, action) VALUES (?1, ?2, ?3)",
                        params![number, at, json(action)?],
                    )?;
                }
                // Each event is its submission's. One about a launch goes to the earliest
                // submission whose launches reach its number (an id's submissions number their
                // launches one after another), whenever it arrives; another goes to the newest,
                // except that in a batch that submits the id again it goes to the earlier
                // submission until the new one's `submitted` event.
                let mut submitted_here: BTreeMap<&str, (i64, bool)> = batch
                    .new_jobs
                    .iter()
                    .map(|j| (j.spec.id.as_str(), (j.seq as i64, false)))
                    .collect();
                for event in &batch.events {
                    let id = event.job();
                    let newest = match id.and_then(|id| submitted_here.get_mut(id)) {
                        Some((seq, seen)) => {
                            *seen |= matches!(event, dlscale_autoscaler::Event::Submitted { .. });
                            if *seen { *seq } else { *seq - 1 }
                        }
                        None => i64::MAX,
                    };
                    tx.execute(
                        "INSERT INTO events (batch, at, job_seq, kind, event, detail)
                         VALUES (?1, ?2, COALESCE(
                             (SELECT seq FROM jobs WHERE id = ?3 AND seq <= ?7 AND ?8 IS NOT NULL
                                AND json_extract(record, '$.attempt') >= ?8 ORDER BY seq LIMIT 1),
                             (SELECT seq FROM jobs WHERE id = ?3 AND seq <= ?7 ORDER BY seq DESC LIMIT 1)),
                           ?4, ?5, ?6)",
                        params![
                            number,
                            at,
                            id,
                            event.kind(),
                            json(event)?,
                            event.to_string(),
                            newest,
                            event.attempt()
                        ],
                    )?;
                }
                for p in &batch.profiles {
                    tx.execute(
                        "INSERT INTO profiles (name, model, quality, source, updated_at) VALUES (?1, ?2, ?3, ?4, ?5)
                         ON CONFLICT(name) DO UPDATE SET model = excluded.model, quality = excluded.quality,
                         source = excluded.source, updated_at = excluded.updated_at",
                        params![p.name, json(&p.model)?, p.quality.as_ref().map(json).transpose()?, p.source, p.updated_at],
                    )?;
                }
                for (name, pool) in &batch.families {
                    tx.execute(
                        "INSERT INTO families (name, pool, updated_at) VALUES (?1, ?2, ?3)
                         ON CONFLICT(name) DO UPDATE SET pool = excluded.pool, updated_at = excluded.updated_at",
                        params![name, json(pool)?, at],
                    )?;
                }
                tx.commit()?;
                Ok(())
            })
            .await;
        result.map_err(|e| match e.downcast::<Duplicate>() {
            Ok(Duplicate(id)) => WriteError::Duplicate(id),
            Err(e) => WriteError::Other(e),
        })
    }

    /// Records a start of the server with its configuration; returns the next batch number.
    pub async fn record_start(&self, at_s: f64, config: serde_json::Value) -> Result<u64> {
        self.write(move |conn| {
            let next: i64 =
                conn.query_row("SELECT COALESCE(MAX(batch), 0) + 1 FROM inputs", [], |r| {
                    r.get(0)
                })?;
            conn.execute(
                "INSERT INTO starts (at, batch, config) VALUES (?1, ?2, ?3)",
                params![at_s, next, config.to_string()],
            )?;
            Ok(next as u64)
        })
        .await
    }

    /// How each id's last submission ended, and its last launch's number, for the ids whose last
    /// submission has ended.
    pub async fn ended(&self) -> Result<Vec<(String, dlscale_autoscaler::Status, u32)>> {
        self.read(|conn| {
            let mut stmt = conn.prepare(
                "SELECT id, status, json_extract(record, '$.attempt') FROM jobs j
                 WHERE seq = (SELECT MAX(seq) FROM jobs WHERE id = j.id)",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Option<u32>>(2)?,
                ))
            })?;
            let mut ended = Vec::new();
            for row in rows {
                let (id, name, attempt) = row?;
                let status = dlscale_autoscaler::Status::ALL
                    .into_iter()
                    .find(|s| s.name() == name);
                if let Some(status) = status.filter(|s| s.is_terminal()) {
                    ended.push((id, status, attempt.unwrap_or(0)));
                }
            }
            Ok(ended)
        })
        .await
    }

    /// The jobs that had not ended, in arrival order, and the next arrival number.
    pub async fn live_jobs(&self) -> Result<(Vec<StoredJob>, u64)> {
        self.read(|conn| {
            let next: i64 =
                conn.query_row("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs", [], |r| {
                    r.get(0)
                })?;
            let jobs = query_jobs(
                conn,
                "WHERE status IN ('queued', 'starting', 'running', 'stopping') ORDER BY seq",
                [],
            )?;
            Ok((jobs, next as u64))
        })
        .await
    }

    /// Every job or only the ended ones (`ended_only`), newest first, that arrived before
    /// arrival number `before` (every one when `None`), at most `limit`.
    pub async fn jobs(
        &self,
        ended_only: bool,
        before: Option<u64>,
        limit: u32,
    ) -> Result<Vec<StoredJob>> {
        let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
        self.read(move |conn| {
            let filter = if ended_only {
                "WHERE status NOT IN ('queued', 'starting', 'running', 'stopping') AND seq < ?2 \
                 ORDER BY seq DESC LIMIT ?1"
            } else {
                "WHERE seq < ?2 ORDER BY seq DESC LIMIT ?1"
            };
            query_jobs(conn, filter, params![limit, before])
        })
        .await
    }

    /// The newest job with this id.
    pub async fn job(&self, id: String) -> Result<Option<StoredJob>> {
        self.read(move |conn| {
            Ok(query_jobs(conn, "WHERE id = ?1 ORDER BY seq DESC LIMIT 1", params![id])?.pop())
        })
        .await
    }

    /// The last `limit` events of the job with arrival number `seq`, oldest first.
    pub async fn events(&self, seq: u64, limit: u32) -> Result<Vec<StoredEvent>> {
        self.read(move |conn| {
            query_events(
                conn,
                "SELECT at, event FROM events WHERE job_seq = ?1 ORDER BY id DESC LIMIT ?2",
                seq,
                limit,
            )
        })
        .await
    }

    /// The last `limit` launch events of the job with arrival number `seq` (launches handed
    /// out, launches ended, launches that failed to start), oldest first: its allocation
    /// history.
    pub async fn launch_events(&self, seq: u64, limit: u32) -> Result<Vec<StoredEvent>> {
        self.read(move |conn| {
            query_events(
                conn,
                "SELECT at, event FROM events WHERE job_seq = ?1
                 AND kind IN ('launch', 'ended', 'launch-failed') ORDER BY id DESC LIMIT ?2",
                seq,
                limit,
            )
        })
        .await
    }

    /// Every job's launch events that account for GPU time (launches handed out, started,
    /// adopted, ended, failed to start), oldest first, with the job's id and submission:
    /// what `GET /v1/usage` adds up.
    pub async fn usage_events(&self) -> Result<Vec<(JobOwner, Vec<StoredEvent>)>> {
        self.read(|conn| {
            let conn = conn.transaction()?;
            let mut owners: BTreeMap<i64, (JobOwner, Vec<StoredEvent>)> = BTreeMap::new();
            let mut stmt = conn.prepare("SELECT seq, id, spec FROM jobs")?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })?;
            for row in rows {
                let (seq, id, spec) = row?;
                let spec: JobSpec = serde_json::from_str(&spec)
                    .with_context(|| format!("job {id}: its stored submission is unreadable"))?;
                let owner = JobOwner {
                    id,
                    seq: u64::try_from(seq).context("a stored arrival number is negative")?,
                    team: spec.entry.team.clone(),
                    user: spec.owner.clone(),
                };
                owners.insert(seq, (owner, Vec::new()));
            }
            let mut stmt = conn.prepare(
                "SELECT job_seq, at, event FROM events WHERE kind IN
                 ('launch', 'started', 'adopted', 'ended', 'launch-failed') ORDER BY id",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, f64>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })?;
            for row in rows {
                let (seq, at, text) = row?;
                let event: Event =
                    serde_json::from_str(&text).context("a stored event is unreadable")?;
                if let Some((_, events)) = owners.get_mut(&seq) {
                    events.push(StoredEvent { at, event });
                }
            }
            Ok(owners.into_values().collect())
        })
        .await
    }

    /// The model families' pools of measurements, by name, and why each unreadable one could
    /// not be read (a pool is derived from the jobs' reports: a caller can do without it).
    pub async fn families(&self) -> Result<(BTreeMap<String, Measurements>, Vec<String>)> {
        self.read(|conn| {
            let mut stmt = conn.prepare("SELECT name, pool FROM families")?;
            let rows =
                stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
            let (mut families, mut unreadable) = (BTreeMap::new(), Vec::new());
            for row in rows {
                let (name, pool) = row?;
                match serde_json::from_str(&pool) {
                    Ok(pool) => {
                        families.insert(name, pool);
                    }
                    Err(e) => unreadable.push(format!(
                        "model family '{name}': stored pool is unreadable: {e}"
                    )),
                }
            }
            Ok((families, unreadable))
        })
        .await
    }

    /// Every profile.
    pub async fn profiles(&self) -> Result<Vec<Profile>> {
        self.read(|conn| {
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

    /// Every recorded input with its batch and time, and every start (batch number where it
    /// began, configuration), in order: what `dlscale replay` feeds through the autoscaler.
    pub async fn history(&self) -> Result<History> {
        self.read(|conn| {
            // One read transaction: a batch the server commits meanwhile is in all of it or
            // none.
            let conn = conn.transaction()?;
            let mut history = History::default();
            let mut stmt = conn.prepare("SELECT batch, at, input FROM inputs ORDER BY id")?;
            for row in stmt.query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, f64>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })? {
                let (batch, at, text) = row?;
                let input: RecordedInput = serde_json::from_str(&text)
                    .with_context(|| format!("an input of batch {batch} is unreadable"))?;
                history.inputs.push((batch as u64, at, input));
            }
            let mut stmt = conn.prepare("SELECT batch, action FROM intents ORDER BY id")?;
            for row in stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))? {
                let (batch, text) = row?;
                let action: Action = serde_json::from_str(&text)
                    .with_context(|| format!("an action of batch {batch} is unreadable"))?;
                history.actions.push((batch as u64, action));
            }
            let mut stmt = conn.prepare("SELECT batch, at, config FROM starts ORDER BY id")?;
            for row in stmt.query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, f64>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })? {
                let (batch, at_s, text) = row?;
                history.starts.push(Start {
                    batch: batch as u64,
                    at_s,
                    config: serde_json::from_str(&text)
                        .context("a stored configuration is unreadable")?,
                });
            }
            Ok(history)
        })
        .await
    }

    /// Whether the database can be written (a probe transaction).
    pub async fn writable(&self) -> bool {
        self.write(|conn| {
            conn.execute_batch("BEGIN IMMEDIATE; ROLLBACK;")?;
            Ok(())
        })
        .await
        .is_ok()
    }
}

/// What a data directory recorded: inputs by batch, intents by batch, starts.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// (batch, time, input), in order.
    pub inputs: Vec<(u64, f64, RecordedInput)>,
    /// (batch, action), in order.
    pub actions: Vec<(u64, Action)>,
    /// Each start of the server, in order.
    pub starts: Vec<Start>,
}

/// One start of the server, as recorded.
#[derive(Debug, Clone)]
pub struct Start {
    /// The first batch it wrote.
    pub batch: u64,
    /// When (seconds since the epoch): the time the autoscaler was restored at.
    pub at_s: f64,
    /// What [`crate::ServerConfig::describe`] said, with the `topology` it started on.
    pub config: serde_json::Value,
}

/// The marker error of a unique-constraint violation on a live job id.
#[derive(Debug, thiserror::Error)]
#[error("duplicate live job '{0}'")]
struct Duplicate(String);

/// The events `sql` selects (`at, event` of one job, `?1` its arrival number, `?2` a limit,
/// newest first), oldest first.
fn query_events(conn: &Connection, sql: &str, seq: u64, limit: u32) -> Result<Vec<StoredEvent>> {
    let mut stmt = conn.prepare(sql)?;
    let mut events = Vec::new();
    for row in stmt.query_map(params![seq as i64, limit], |r| {
        Ok((r.get::<_, f64>(0)?, r.get::<_, String>(1)?))
    })? {
        let (at, text) = row?;
        let event: Event = serde_json::from_str(&text).context("a stored event is unreadable")?;
        events.push(StoredEvent { at, event });
    }
    events.reverse();
    Ok(events)
}

fn query_jobs<P: rusqlite::Params>(
    conn: &Connection,
    filter: &str,
    p: P,
) -> Result<Vec<StoredJob>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT id, spec, worker_token, record FROM jobs {filter}"
    ))?;
    let rows = stmt.query_map(p, |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
        ))
    })?;
    let mut jobs = Vec::new();
    for row in rows {
        let (id, spec, worker_token, record) = row?;
        jobs.push(StoredJob {
            spec: serde_json::from_str(&spec)
                .with_context(|| format!("job '{id}': stored spec is unreadable"))?,
            worker_token,
            record: serde_json::from_str(&record)
                .with_context(|| format!("job '{id}': stored record is unreadable"))?,
        });
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_old_database_is_refused_with_a_message() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch("CREATE TABLE jobs (id TEXT PRIMARY KEY, runtime TEXT)")
                .unwrap();
        }
        let err = Store::open(&path).unwrap_err().to_string();
        assert!(err.contains("older dlscale"), "{err}");
        let fresh = dir.path().join("fresh");
        Store::open(&fresh).unwrap();
        Store::open(&fresh).unwrap();
    }

    /// One batch in which a job ends and its id is submitted again (two requests the driver
    /// took together): both are written, and each event is its own submission's.
    #[tokio::test]
    async fn a_batch_that_ends_a_job_and_takes_its_id_again_keeps_both() {
        use dlscale_autoscaler::{Autoscaler, AutoscalerConfig};
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db")).unwrap();
        let spec = crate::spec::JobSpec::from_value(serde_json::json!({"id": "x",
            "min_batch": 32, "max_batch": 64, "max_local_batch": 64,
            "model": {"compute_base_s": 0.01, "compute_per_sample_s": 0.001},
            "command": ["true"], "workdir": "/tmp", "launcher": "plain"}))
        .unwrap();
        let submit = || Input::Submit {
            job: Box::new(spec.submission(None).unwrap()),
        };
        let mut a = Autoscaler::new(
            AutoscalerConfig::default(),
            dlscale_core::placement::Topology::uniform(1, 2),
        );
        // Each step as the driver writes it: the records new to the store are its new jobs.
        let (mut number, mut known) = (0, 0);
        let mut batch = |step: &dlscale_autoscaler::Step, at_s| {
            number += 1;
            let new_jobs = step
                .records
                .iter()
                .filter(|r| r.seq > known)
                .map(|r| NewJob {
                    seq: r.seq,
                    spec: spec.clone(),
                    worker_token: format!("t{}", r.seq),
                })
                .collect();
            known = step.records.iter().map(|r| r.seq).fold(known, u64::max);
            Batch {
                number,
                at_s,
                new_jobs,
                records: step.records.clone(),
                events: step.events.clone(),
                ..Batch::default()
            }
        };
        let launched = a.handle(0.0, vec![submit()]);
        store.commit(batch(&launched, 0.0)).await.unwrap();
        let started = Input::LaunchStarted {
            id: "x".into(),
            attempt: 1,
        };
        store
            .commit(batch(&a.handle(0.5, vec![started]), 0.5))
            .await
            .unwrap();
        let exited = Input::Exited {
            id: "x".into(),
            attempt: 1,
            outcome: dlscale_autoscaler::Outcome::Exited(0),
        };
        let both = a.handle(1.0, vec![exited, submit()]);
        let seqs: Vec<u64> = both.records.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, [1, 2], "{both:?}");
        store.commit(batch(&both, 1.0)).await.unwrap();
        let kinds = |seq| {
            let store = &store;
            async move {
                let events = store.events(seq, 100).await.unwrap();
                events
                    .iter()
                    .map(|e| e.event.kind().to_string())
                    .collect::<Vec<_>>()
            }
        };
        let (old, new) = (kinds(1).await, kinds(2).await);
        assert_eq!(old.last().map(String::as_str), Some("ended"), "{old:?}");
        assert_eq!(
            new.first().map(String::as_str),
            Some("submitted"),
            "{new:?}"
        );
        assert!(!new.contains(&"ended".to_string()), "{new:?}");
        // Later, the old submission's launch is seen alive (its processes outlived its end):
        // its events are filed by launch number, under the submission that made the launch.
        let seen = Input::Observed(dlscale_autoscaler::Observation {
            taken_at_s: 2.0,
            asked: Vec::new(),
            launches: vec![dlscale_autoscaler::ObservedLaunch {
                id: "x".into(),
                attempt: 1,
                state: dlscale_autoscaler::LaunchState::Running,
            }],
        });
        let stale = a.handle(2.0, vec![seen]);
        assert!(
            stale
                .events
                .iter()
                .any(|e| matches!(e, dlscale_autoscaler::Event::Stale { attempt: 1, .. })),
            "{stale:?}"
        );
        store.commit(batch(&stale, 2.0)).await.unwrap();
        let (old, new) = (kinds(1).await, kinds(2).await);
        assert_eq!(old.last().map(String::as_str), Some("stale"), "{old:?}");
        assert!(!new.contains(&"stale".to_string()), "{new:?}");
    }

    #[tokio::test]
    async fn family_pools_are_kept_as_last_committed_and_a_bad_one_is_named_and_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db")).unwrap();
        let pool = |step_time_s| {
            let mut m = Measurements::default();
            m.absorb(&dlscale_autoscaler::learn::Point {
                gpus: 2,
                nodes: 1,
                local_batch: 32,
                micro_steps: 1,
                step_time_s,
                reports: 3,
                fitted_step_time_s: step_time_s,
                compute_time_s: Some(step_time_s / 2.0),
                compute_reports: 3,
                gpu_type: None,
            });
            m
        };
        let batch = |number, families| Batch {
            number,
            at_s: 10.0,
            families,
            ..Batch::default()
        };
        store
            .commit(batch(
                1,
                vec![("a".into(), pool(0.5)), ("b".into(), pool(0.7))],
            ))
            .await
            .unwrap();
        store
            .commit(batch(2, vec![("a".into(), pool(0.6))]))
            .await
            .unwrap();
        let want: BTreeMap<String, Measurements> =
            [("a".into(), pool(0.6)), ("b".into(), pool(0.7))].into();
        assert_eq!(store.families().await.unwrap(), (want.clone(), Vec::new()));
        // Reopened: the same.
        drop(store);
        let store = Store::open(&dir.path().join("db")).unwrap();
        assert_eq!(store.families().await.unwrap(), (want, Vec::new()));
        store
            .write(|conn| {
                conn.execute("UPDATE families SET pool = '{' WHERE name = 'b'", [])?;
                Ok(())
            })
            .await
            .unwrap();
        // An unreadable pool is left out and named; the others are read.
        let (families, unreadable) = store.families().await.unwrap();
        assert_eq!(families, [("a".to_string(), pool(0.6))].into());
        assert_eq!(unreadable.len(), 1);
        assert!(unreadable[0].contains("model family 'b'"), "{unreadable:?}");
    }
}
