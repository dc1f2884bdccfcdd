//! Shared helpers of the service tests: a real `dlscale serve` process on a free loopback port,
//! the torch venv, and checks of a training job's step trace and losses.

#![allow(dead_code)] // each test file uses a different subset

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlscale_autoscaler::Status as JobStatus;
use dlscale_server::api::dto::JobView;
pub mod ray;
pub mod slurm;

use dlscale_server::client::{ApiClient, Method};
use serde_json::Value;

/// The token every test server uses.
pub const TOKEN: &str = "test-token";

/// A running `dlscale serve`.
pub struct Server {
    child: Option<Child>,
    /// Port it listens on.
    pub port: u16,
    /// Its data directory.
    pub data_dir: PathBuf,
    config: PathBuf,
    starts: u32,
    env: Vec<(String, String)>,
    /// Authorised client.
    pub client: ApiClient,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port")
}

impl Server {
    /// Starts a server with `config` (TOML) in `data_dir`.
    pub async fn start(data_dir: &Path, config: &str) -> Server {
        Self::start_with_env(data_dir, config, Vec::new()).await
    }

    /// As [`Server::start`], with more environment for the server process.
    pub async fn start_with_env(
        data_dir: &Path,
        config: &str,
        env: Vec<(String, String)>,
    ) -> Server {
        let port = free_port();
        let config_path = data_dir.join("dlscale.toml");
        std::fs::create_dir_all(data_dir).unwrap();
        std::fs::write(&config_path, config).unwrap();
        let client =
            ApiClient::new(&format!("http://127.0.0.1:{port}"), Some(TOKEN.into())).unwrap();
        let mut server = Server {
            child: None,
            port,
            data_dir: data_dir.to_path_buf(),
            config: config_path,
            starts: 0,
            env,
            client,
        };
        server.spawn().await;
        server
    }

    async fn spawn(&mut self) {
        self.starts += 1;
        let log = std::fs::File::create(self.data_dir.join(format!("server-{}.log", self.starts)))
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_dlscale"))
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{}", self.port),
                "--config",
            ])
            .arg(&self.config)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .env("DLSCALE_TOKEN", TOKEN)
            .env("DLSCALE_LOG", "debug")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("cannot start dlscale serve");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        let crash_armed = self.env.iter().any(|(k, _)| k == "DLSCALE_CRASH_AT");
        loop {
            if let Ok((status, _)) = self.client.send(Method::GET, "/healthz", None).await {
                if status.is_success() {
                    return;
                }
            }
            // An armed crash point may end it before it answers: the caller watches for that.
            if crash_armed && self.exited() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "server did not come up; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The server's log so far (all starts).
    pub fn log(&self) -> String {
        (1..=self.starts)
            .map(|i| {
                std::fs::read_to_string(self.data_dir.join(format!("server-{i}.log")))
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("\n--- restart ---\n")
    }

    /// `kill -9` the server (its jobs keep running).
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sets (or with `None` removes) a variable of the server's environment for its next starts.
    pub fn set_env(&mut self, key: &str, value: Option<String>) {
        self.env.retain(|(k, _)| k != key);
        if let Some(v) = value {
            self.env.push((key.to_string(), v));
        }
    }

    /// Whether the server process has exited (a crash point fired, or it was killed).
    pub fn exited(&mut self) -> bool {
        match self.child.as_mut() {
            None => true,
            Some(c) => c.try_wait().ok().flatten().is_some(),
        }
    }

    /// Writes `config` as the server's configuration file and sends it SIGHUP: the running
    /// server reads it again.
    #[allow(dead_code)] // not every test binary that shares these helpers reloads
    pub fn reload(&self, config: &str) {
        std::fs::write(&self.config, config).unwrap();
        let pid = self.child.as_ref().expect("the server runs").id();
        let sent = Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -HUP {pid}");
    }

    /// Starts the server again on the same port and data.
    pub async fn restart(&mut self) {
        self.spawn().await;
    }

    /// JSON request with the token; returns status and JSON body (Null if not JSON).
    pub async fn json(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let (status, bytes) = self
            .client
            .send(method, path, body.map(|b| serde_json::to_vec(&b).unwrap()))
            .await
            .unwrap();
        (
            status.as_u16(),
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// Submits a job, asserting 201.
    pub async fn submit(&self, job: Value) -> JobView {
        let (status, body) = self.json(Method::POST, "/v1/jobs", Some(job)).await;
        assert_eq!(status, 201, "{body}");
        serde_json::from_value(body).unwrap()
    }

    /// Cancels a job holding GPUs, asserting 202, and waits (30 s at most) until it is cancelled.
    pub async fn cancel(&self, id: &str) -> JobView {
        let (status, body) = self
            .json(Method::DELETE, &format!("/v1/jobs/{id}"), None)
            .await;
        assert_eq!(status, 202, "{id}: {body}");
        self.wait_job(id, 30.0, "its cancellation", |j| {
            j.state == dlscale_autoscaler::Status::Cancelled
        })
        .await
    }

    /// One job.
    pub async fn job(&self, id: &str) -> JobView {
        self.client
            .call(Method::GET, &format!("/v1/jobs/{id}"), None)
            .await
            .unwrap()
    }

    /// Waits until `pred` holds for job `id`, or panics after `timeout_s`.
    pub async fn wait_job(
        &self,
        id: &str,
        timeout_s: f64,
        what: &str,
        pred: impl Fn(&JobView) -> bool,
    ) -> JobView {
        let deadline = Instant::now() + Duration::from_secs_f64(timeout_s);
        loop {
            let j = self.job(id).await;
            if pred(&j) {
                return j;
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(&j.log).unwrap_or_default();
                panic!("job {id}: timed out waiting for {what}; now {j:#?}\njob log:\n{log}\nserver log:\n{}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Kills every job process group the server launched (cleanup): each `run-*/pid` under
    /// `jobs/<id>/<uid>/`.
    pub fn kill_jobs(&self) {
        let dirs = |dir: PathBuf| {
            std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
        };
        for run in dirs(self.data_dir.join("jobs"))
            .flat_map(dirs)
            .flat_map(dirs)
        {
            if let Some(pid) = std::fs::read_to_string(run.join("pid"))
                .ok()
                .and_then(|p| p.trim().parse::<i32>().ok())
            {
                if pid > 1 {
                    let _ = Command::new("kill")
                        .args(["-KILL", "--", &format!("-{pid}")])
                        .stderr(Stdio::null())
                        .status();
                }
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
        self.kill_jobs();
    }
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The torch venv (`$DLSCALE_VENV` or `~/.cache/dlscale/venv`) if it has torch, scikit-learn
/// and dlscale; otherwise why not.
pub fn venv() -> Result<PathBuf, String> {
    let venv = std::env::var_os("DLSCALE_VENV")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/dlscale/venv")))
        .ok_or("neither DLSCALE_VENV nor HOME is set")?;
    let torchrun = venv.join("bin/torchrun");
    if !torchrun.is_file() {
        return Err(format!("{} not found", torchrun.display()));
    }
    let ok = Command::new(venv.join("bin/python"))
        .args(["-c", "import importlib.metadata as m; m.version('torch'); m.version('scikit-learn'); import dlscale"])
        .status()
        .map_err(|e| e.to_string())?;
    if !ok.success() {
        return Err(format!(
            "{} lacks torch, scikit-learn or dlscale",
            venv.display()
        ));
    }
    Ok(venv)
}

/// The torch venv for test `test`, or `None` (after printing why the test is skipped) when it is
/// unusable; with `DLSCALE_REQUIRE_TORCH=1` an unusable venv fails the test instead.
pub fn torch_venv_or_skip(test: &str) -> Option<PathBuf> {
    match venv() {
        Ok(v) => Some(v),
        Err(why) if std::env::var("DLSCALE_REQUIRE_TORCH").as_deref() == Ok("1") => {
            panic!("DLSCALE_REQUIRE_TORCH=1 but the torch venv is unusable: {why} (run scripts/setup-python.sh)")
        }
        Err(why) => {
            eprintln!("SKIP {test}: {why}; run scripts/setup-python.sh (set DLSCALE_REQUIRE_TORCH=1 to fail instead)");
            None
        }
    }
}

/// A fake elastic worker: resumes from `$DLSCALE_CHECKPOINT_DIR/step`, one step per 0.1 s,
/// checkpoints and exits 75 on SIGTERM, exits 0 at `$TOTAL` steps.
pub const WORKER: &str = r#"ck="$DLSCALE_CHECKPOINT_DIR/step"; s=$(cat "$ck" 2>/dev/null || echo 0)
echo "dlscale: resumed step=$s world_size=$DLSCALE_WORLD_SIZE batch_size=$DLSCALE_BATCH_SIZE"
trap 'echo "$s" > "$ck.tmp" && mv "$ck.tmp" "$ck"; echo "dlscale: stopped step=$s"; exit 75' TERM
while [ "$s" -lt "$TOTAL" ]; do s=$((s+1)); echo "dlscale: step=$s loss=1 samples_per_s=100 world_size=$DLSCALE_WORLD_SIZE batch_size=$DLSCALE_BATCH_SIZE"; sleep 0.1; done
echo "$s" > "$ck"; echo "dlscale: done step=$s""#;

/// Every launch of a [`WORKER`] after its first resumed from the step the launch before it
/// checkpointed as it ended (stopped, or done: a stop that lands as the job finishes is still a
/// stop, and the next launch resumes at the end and is done at once): no step lost or repeated
/// across its launches (`log`: the job's log).
pub fn assert_resumed_where_stopped(log: &str) {
    let mut ended: Option<&str> = None;
    let mut launches = 0;
    for line in log.lines() {
        if let Some(rest) = line.strip_prefix("dlscale: resumed step=") {
            let step = rest.split(' ').next().unwrap_or_default();
            if launches > 0 {
                assert_eq!(
                    Some(step),
                    ended,
                    "launch {} resumed elsewhere:\n{log}",
                    launches + 1
                );
            }
            launches += 1;
            ended = None;
        } else if let Some(step) = line
            .strip_prefix("dlscale: stopped step=")
            .or_else(|| line.strip_prefix("dlscale: done step="))
        {
            ended = Some(step);
        }
    }
    assert!(launches > 0, "{log}");
}

/// The GPU-seconds job `id`'s launches held by its allocations (`GET /v1/jobs/{id}/allocations`:
/// each launch's GPUs from its launch to its end), and how many launches.
pub async fn allocated_gpu_s(server: &Server, id: &str) -> (f64, usize) {
    let allocations: Vec<Value> = server
        .client
        .call(Method::GET, &format!("/v1/jobs/{id}/allocations"), None)
        .await
        .unwrap();
    let held = allocations
        .iter()
        .map(|l| {
            let span = l["ended_at"].as_f64().unwrap() - l["at"].as_f64().unwrap();
            l["gpus"].as_f64().unwrap() * span
        })
        .sum();
    (held, allocations.len())
}

/// Runs the real `dlscale` CLI against `server` from the repository root (relative paths, as
/// the README gives them), asserting success; returns its stdout.
pub fn cli(server: &Server, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_dlscale"))
        .current_dir(repo_root())
        .args(args)
        .env("DLSCALE_API", format!("http://127.0.0.1:{}", server.port))
        .env("DLSCALE_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "dlscale {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The digital twin: `dlscale replay` feeds the inputs the server recorded through the
/// autoscaler again and must reproduce every action it took, restarts included.
pub fn assert_replays(server: &Server) {
    let out = Command::new(env!("CARGO_BIN_EXE_dlscale"))
        .arg("replay")
        .arg(&server.data_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("each identical to what the server did"),
        "dlscale replay: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("launch 1:"),
        "the replay shows no launch: {stdout}"
    );
}

/// Waits for `id` to end and checks that it trained for real: it succeeded at step `total`, rank
/// 0's trace holds every step once over a continuous sample stream, and its loss fell below half.
pub async fn assert_trained(server: &Server, id: &str, total: u64, trace: &Path, timeout_s: f64) {
    let done = server
        .wait_job(id, timeout_s, "success", |j| j.state.is_terminal())
        .await;
    let log = server
        .client
        .text(&format!("/v1/jobs/{id}/logs?tail_bytes=10000000"))
        .await
        .unwrap_or_default();
    // Exit code 0, or none: its workers reported training done and its processes then ended
    // while no server watched them (a kill -9 in that window): finished, with no code to read.
    assert!(
        done.state == JobStatus::Succeeded && matches!(done.exit_code, Some(0) | None),
        "{done:?}\n{}\n--- {id}'s own log, the end ---\n{}",
        server.log(),
        &log[log.char_indices().rev().nth(6000).map_or(0, |(i, _)| i)..]
    );
    assert_eq!(done.step, Some(total));
    check_trace(id, trace, total);
    let l = losses(&log);
    assert!(
        l.len() >= 5 && l[l.len() - 1] < 0.5 * l[0],
        "{id}: loss did not fall: {l:?}"
    );
}

/// Checks rank 0's per-step trace: steps 1..=total exactly once, in order, and each step's
/// first sample follows the previous step's batch (no sample skipped or repeated).
fn check_trace(id: &str, trace: &Path, total: u64) {
    let text = std::fs::read_to_string(trace.with_extension("trace.rank0"))
        .unwrap_or_else(|e| panic!("{id}: no trace: {e}"));
    let rows: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let steps: Vec<u64> = rows.iter().map(|r| r["step"].as_u64().unwrap()).collect();
    assert_eq!(
        steps,
        (1..=total).collect::<Vec<_>>(),
        "{id}: steps lost or repeated"
    );
    for w in rows.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        let next = a["offset"].as_u64().unwrap()
            + a["world_size"].as_u64().unwrap() * a["count"].as_u64().unwrap();
        assert_eq!(
            b["offset"].as_u64().unwrap(),
            next,
            "{id}: sample stream broken between {a} and {b}"
        );
    }
}

/// The losses of the job's progress lines.
pub fn losses(log: &str) -> Vec<f64> {
    log.lines()
        .filter(|l| l.starts_with("dlscale: step="))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|t| t.strip_prefix("loss="))
                .and_then(|v| v.parse().ok())
        })
        .collect()
}

/// The JSON lines of a step trace (`examples/plain_job.py --trace`), in order.
pub fn read_trace(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}: {l}", path.display())))
        .collect()
}

/// Live processes (pid, command line) of the launches of server `instance` (of job `job` only,
/// when given), by the `DLSCALE_LAUNCH` marker they carry.
pub fn launch_processes(instance: &str, job: Option<&str>) -> Vec<(i32, String)> {
    let ours = |marker: &[u8]| {
        std::str::from_utf8(marker)
            .ok()
            .and_then(dlscale_server::executor::parse_launch_marker)
            .is_some_and(|(i, id, _)| i == instance && job.is_none_or(|j| j == id))
    };
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let marked = environ.split(|&b| b == 0).any(|v| {
            v.strip_prefix(b"DLSCALE_LAUNCH=".as_slice())
                .is_some_and(ours)
        });
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rfind(')')
                    .map(|i| s[i + 1..].trim_start().starts_with('Z'))
            })
            .unwrap_or(true);
        if marked && !zombie {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            found.push((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    found
}

/// Waits until `cond` holds, or panics after `timeout_s`.
pub async fn wait_until<F, Fut>(timeout_s: f64, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs_f64(timeout_s);
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A background thread that samples something every `every` until the watch is finished (or
/// dropped), folding each sample into its state: what a test watches while the system runs.
pub struct Watch<T> {
    stop: Arc<AtomicBool>,
    state: Arc<Mutex<T>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl<T: Clone + Default + Send + 'static> Watch<T> {
    /// Starts sampling: `sample` folds what it sees into the state.
    pub fn start(every: Duration, mut sample: impl FnMut(&mut T) + Send + 'static) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let state = Arc::new(Mutex::new(T::default()));
        let (s, m) = (Arc::clone(&stop), Arc::clone(&state));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                sample(&mut m.lock().unwrap_or_else(|e| e.into_inner()));
                std::thread::sleep(every);
            }
        });
        Watch {
            stop,
            state,
            thread: Some(thread),
        }
    }

    /// Stops sampling; the state.
    pub fn finish(mut self) -> T {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.state.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl<T> Drop for Watch<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Checks the worker library's sample log (`DLSCALE_SAMPLE_LOG=prefix`: one file per rank, a
/// line per step with the dataset indices that rank trained on), over every launch of a job:
/// each step counted once by each of its ranks, and the steps' samples, ranks in order, a
/// stream in which every epoch of `dataset_len` samples holds each sample exactly once.
/// Returns the steps.
pub fn assert_each_sample_once(prefix: &Path, dataset_len: usize) -> u64 {
    let dir = prefix.parent().unwrap();
    let name = prefix.file_name().unwrap().to_string_lossy().into_owned();
    let mut rows: Vec<Value> = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        if file.starts_with(&format!("{name}.rank")) {
            rows.extend(read_trace(&path));
        }
    }
    let key = |r: &Value| (r["step"].as_u64().unwrap(), r["rank"].as_u64().unwrap());
    rows.sort_by_key(key);
    let mut stream: Vec<u64> = Vec::new();
    let mut step = 0;
    let mut rank = 0;
    for row in &rows {
        let (s, r) = key(row);
        let world = row["world_size"].as_u64().unwrap();
        if r == 0 {
            assert_eq!(s, step + 1, "step {} lost or repeated: {row}", step + 1);
            step = s;
        } else {
            assert_eq!(
                (s, r),
                (step, rank + 1),
                "a rank's share lost or repeated: {row}"
            );
        }
        assert!(r < world, "{row}");
        rank = r;
        let indices = row["indices"].as_array().unwrap();
        assert_eq!(
            indices.len() as u64,
            row["count"].as_u64().unwrap(),
            "{row}"
        );
        stream.extend(indices.iter().map(|i| i.as_u64().unwrap()));
    }
    for (epoch, block) in stream.chunks(dataset_len).enumerate() {
        let mut sorted = block.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(
            sorted.len(),
            block.len(),
            "epoch {epoch}: a sample trained twice"
        );
        if block.len() == dataset_len {
            assert_eq!(
                sorted.last().copied(),
                Some(dataset_len as u64 - 1),
                "epoch {epoch}"
            );
        }
    }
    step
}
