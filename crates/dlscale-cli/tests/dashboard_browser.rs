//! The dashboard in a real browser: a real `dlscale serve` (local executor, four slots) runs
//! real jobs (`examples/plain_job.py`), and headless Chromium, driven over the Chrome DevTools
//! Protocol, opens the page. A wrong token is refused and shows nothing; with the right one the
//! page shows the jobs and the GPU each holds; when more jobs arrive, the first one's rescale
//! appears in its timeline and in the decision list, with the reasons of the last decision; a
//! reload keeps the session, logging out ends it.
//!
//! Skips, saying why, without Chromium (`chromium`, `chromium-browser` or `google-chrome` on
//! PATH, or `DLSCALE_CHROMIUM`), unless `DLSCALE_REQUIRE_CHROMIUM=1` (as `scripts/test-all.sh`
//! sets). With `DLSCALE_DASHBOARD_SCREENSHOT=FILE` it also writes a PNG of the page there
//! (`scripts/dashboard-screenshot.sh`).

mod service_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dlscale_server::client::{ApiClient, Method};
use serde_json::{json, Value};
use service_support::{repo_root, Server, TOKEN};
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

const CONFIG: &str = "slots = 4\ncooldown_s = 1\ninterval_s = 0.5\ngrace_s = 3\n";

/// `examples/plain_job.py` as a plain-launcher job of `steps` steps of 0.1 s that reports its
/// progress; its model has gradient noise scale 2000, so its statistical efficiency is known.
fn plain_job(id: &str, steps: u32, max_gpus: u32, sync_s: f64) -> Value {
    json!({"id": id, "min_batch": 32, "max_batch": 256, "max_local_batch": 64, "max_gpus": max_gpus,
           "model": {"compute_base_s": 0.01, "compute_per_sample_s": 0.001, "sync_intra_base_s": sync_s,
                     "noise_scale": 2000.0},
           "command": ["python3", repo_root().join("examples/plain_job.py").display().to_string(),
                       "--steps", steps.to_string(), "--step-s", "0.1", "--report-every", "5"],
           "workdir": "/tmp", "launcher": "plain"})
}

/// The Chromium to drive, or why there is none.
fn chromium() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("DLSCALE_CHROMIUM") {
        return Ok(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    Err(
        "no chromium, chromium-browser or google-chrome on PATH (and DLSCALE_CHROMIUM unset)"
            .into(),
    )
}

/// A headless Chromium with a profile of its own, listening for DevTools on a free port.
struct Browser {
    child: Child,
    port: u16,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn start(exe: &Path) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let log = std::fs::File::create(profile.path().join("chromium.log")).unwrap();
        let mut cmd = Command::new(exe);
        cmd.args([
            "--headless=new",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-dev-shm-usage",
            "--remote-debugging-port=0",
            "--window-size=1280,1000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
        // Chromium's sandbox refuses to run as root (containers, CI).
        if unsafe { libc::geteuid() } == 0 {
            cmd.arg("--no-sandbox");
        }
        let child = cmd.spawn().expect("cannot start chromium");
        // With port 0 it writes the port it chose into the profile.
        let active = profile.path().join("DevToolsActivePort");
        let deadline = Instant::now() + Duration::from_secs(60);
        let port = loop {
            if let Some(port) = std::fs::read_to_string(&active)
                .ok()
                .and_then(|t| t.lines().next().and_then(|l| l.trim().parse().ok()))
            {
                break port;
            }
            assert!(
                Instant::now() < deadline,
                "chromium did not open its DevTools port; its log:\n{}",
                std::fs::read_to_string(profile.path().join("chromium.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        Browser {
            child,
            port,
            _profile: profile,
        }
    }

    /// A connection to its first page.
    fn page(&self) -> Page {
        let targets: Value = serde_json::from_slice(&self.get("/json/list")).unwrap();
        let url = targets
            .as_array()
            .and_then(|t| t.iter().find(|t| t["type"] == "page"))
            .and_then(|t| t["webSocketDebuggerUrl"].as_str())
            .unwrap_or_else(|| panic!("no page target: {targets}"))
            .to_string();
        let (ws, _) = tungstenite::connect(url.as_str()).unwrap();
        if let MaybeTlsStream::Plain(s) = ws.get_ref() {
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        }
        Page { ws, next: 0 }
    }
}

impl Browser {
    /// The body of a GET of its DevTools HTTP endpoint (which keeps the connection open: the
    /// body is read by its length).
    fn get(&self, path: &str) -> Vec<u8> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
            self.port
        )
        .unwrap();
        let mut data = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or_else(|| panic!("no content length: {head}"));
                if data.len() >= end + 4 + length {
                    return data[end + 4..end + 4 + length].to_vec();
                }
            }
            let n = stream.read(&mut chunk).unwrap();
            assert!(n > 0, "DevTools closed the connection early");
            data.extend_from_slice(&chunk[..n]);
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One page over the DevTools protocol: commands, and JavaScript evaluated in the page.
struct Page {
    ws: WebSocket<MaybeTlsStream<TcpStream>>,
    next: u64,
}

impl Page {
    /// Sends a command and waits for its answer (events in between are skipped).
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let request = json!({"id": id, "method": method, "params": params});
        self.ws.send(Message::text(request.to_string())).unwrap();
        loop {
            let message = self.ws.read().unwrap();
            let Message::Text(text) = message else {
                continue;
            };
            let answer: Value = serde_json::from_str(text.as_str()).unwrap();
            if answer["id"] == json!(id) {
                assert!(answer.get("error").is_none(), "{method}: {answer}");
                return answer["result"].clone();
            }
        }
    }

    /// The value of a JavaScript expression in the page (promises awaited), or what it threw.
    fn try_eval(&mut self, expression: &str) -> Result<Value, Value> {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        match r.get("exceptionDetails") {
            Some(e) => Err(e.clone()),
            None => Ok(r["result"]["value"].clone()),
        }
    }

    /// The value of a JavaScript expression in the page (promises awaited).
    fn eval(&mut self, expression: &str) -> Value {
        self.try_eval(expression)
            .unwrap_or_else(|e| panic!("{expression}: {e}"))
    }

    /// Waits until `expression` is truthy in the page (a page still loading may throw
    /// meanwhile); its value.
    fn wait(&mut self, timeout_s: f64, what: &str, expression: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs_f64(timeout_s);
        loop {
            let v = self.try_eval(expression).unwrap_or(Value::Null);
            let truthy =
                !matches!(&v, Value::Null | Value::Bool(false)) && v != json!(0) && v != json!("");
            if truthy {
                return v;
            }
            if Instant::now() > deadline {
                let text = self.eval("document.body.innerText");
                panic!(
                    "timed out waiting for {what} ({expression} is {v}); the page shows:\n{text}"
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Logs in through the page's form with `token`.
    fn log_in(&mut self, token: &str) {
        let token = serde_json::to_string(token).unwrap();
        self.eval(&format!(
            "document.querySelector('#token').value = {token}; \
             document.querySelector('#login').requestSubmit(); true"
        ));
    }

    /// The text of the elements `selector` matches.
    fn texts(&mut self, selector: &str) -> Vec<String> {
        let selector = serde_json::to_string(selector).unwrap();
        let v = self.eval(&format!(
            "[...document.querySelectorAll({selector})].map(e => e.textContent)"
        ));
        serde_json::from_value(v).unwrap()
    }
}

/// GPUs of job `id`'s timeline segments, oldest first.
const TIMELINE: &str =
    "JSON.stringify([...document.querySelectorAll('.timeline[data-job=\"a\"] .seg')]\
     .map(s => Number(s.getAttribute('data-gpus'))))";

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_shows_jobs_gpus_a_rescale_and_its_reasons_and_refuses_a_wrong_token() {
    let exe = match chromium() {
        Ok(exe) => exe,
        Err(why) if std::env::var("DLSCALE_REQUIRE_CHROMIUM").as_deref() == Ok("1") => {
            panic!("DLSCALE_REQUIRE_CHROMIUM=1 but {why}")
        }
        Err(why) => {
            eprintln!("skipping the dashboard browser test: {why}; install Debian's chromium");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), CONFIG).await;
    let base = format!("http://127.0.0.1:{}", server.port);

    // The page is served open, its data is not.
    let anonymous = ApiClient::new(&base, None).unwrap();
    let (status, page) = anonymous.send(Method::GET, "/", None).await.unwrap();
    assert!(status.is_success() && String::from_utf8_lossy(&page).contains("dashboard.js"));
    for path in [
        "/v1/cluster",
        "/v1/jobs",
        "/v1/decisions",
        "/v1/jobs/a/explain",
    ] {
        let (status, _) = anonymous.send(Method::GET, path, None).await.unwrap();
        assert_eq!(status.as_u16(), 401, "{path} without a token");
    }

    // a alone takes every slot it can use.
    server.submit(plain_job("a", 900, 4, 0.002)).await;
    let a = server
        .wait_job("a", 30.0, "a running on 4 slots", |j| {
            j.state.name() == "running" && j.gpus == 4
        })
        .await;
    assert_eq!(a.slots.len(), 4);

    let browser = Browser::start(&exe);
    let mut page = browser.page();
    page.call("Page.enable", json!({}));
    page.call("Page.navigate", json!({"url": format!("{base}/")}));
    page.wait(
        20.0,
        "the login form",
        "!document.querySelector('#login-panel').hidden",
    );

    // A wrong token is refused: the server's message, no data, nothing kept.
    page.log_in("not-the-token");
    let error = page.wait(
        20.0,
        "the refusal",
        "document.querySelector('#login-error').textContent",
    );
    assert_eq!(error, json!("invalid bearer token"));
    assert_eq!(
        page.eval("document.querySelector('#board').hidden"),
        json!(true)
    );
    assert_eq!(
        page.eval("document.querySelectorAll('#jobs tbody tr').length"),
        json!(0)
    );
    assert_eq!(
        page.eval("sessionStorage.getItem('dlscale-token')"),
        Value::Null
    );

    // The right one: the job, and the slots it holds.
    page.log_in(TOKEN);
    page.wait(
        20.0,
        "a in the jobs table",
        "document.querySelector('#jobs tbody tr[data-job=\"a\"]')?.textContent.includes('running')",
    );
    page.wait(
        10.0,
        "a's four slots",
        "document.querySelectorAll('#nodes .gpu[data-job=\"a\"]').length === 4",
    );
    assert_eq!(page.texts("#nodes .node-name"), vec!["local".to_string()]);
    assert_eq!(page.eval(TIMELINE), json!("[4]"));
    // Predicted and measured samples/s and the statistical efficiency, as the API has them.
    let a = server
        .wait_job("a", 20.0, "a's first report", |j| j.samples_per_s.is_some())
        .await;
    let predicted = format!("{:.0}", a.predicted_samples_per_s.unwrap());
    let efficiency = format!("{:.0} %", a.efficiency.unwrap() * 100.0);
    let row = "[...document.querySelectorAll('#jobs tbody tr[data-job=\"a\"] td')].map(t => t.textContent)";
    let cells = page.wait(
        10.0,
        "a's measured samples/s",
        &format!("(() => {{ const c = {row}; return c[6] !== '–' ? c : null; }})()"),
    );
    assert_eq!(cells[5], json!(predicted), "{cells}");
    assert_eq!(cells[7], json!(efficiency), "{cells}");

    // b and c arrive after a's cooldown: a gives GPUs up.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.submit(plain_job("b", 600, 4, 0.02)).await;
    server.submit(plain_job("c", 600, 2, 0.005)).await;
    for id in ["b", "c"] {
        server
            .wait_job(id, 30.0, "running", |j| j.state.name() == "running")
            .await;
    }
    let shrunk = page.wait(
        30.0,
        "a's rescale in its timeline",
        &format!(
            "(() => {{ const g = JSON.parse({TIMELINE}); \
             return g.length >= 2 && g[0] === 4 && g[g.length - 1] < 4 ? g : null; }})()"
        ),
    );
    let last = shrunk.as_array().unwrap().last().unwrap().as_u64().unwrap();
    let a = server.job("a").await;
    assert_eq!(a.gpus as u64, last, "the timeline ends where a runs: {a:?}");
    let slots_of =
        |id: &str| format!("document.querySelectorAll('#nodes .gpu[data-job=\"{id}\"]').length");
    page.wait(
        10.0,
        "a's slots now",
        &format!("{} === {last}", slots_of("a")),
    );
    for id in ["b", "c"] {
        page.wait(
            10.0,
            "the slots of the new jobs",
            &format!("{} >= 1", slots_of(id)),
        );
    }

    // The decision list shows the rescale, as the API has it, and why each job has its GPUs.
    let (_, decisions) = server.json(Method::GET, "/v1/decisions", None).await;
    let rescale = decisions["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|d| d["changes"].as_array().unwrap())
        .filter_map(Value::as_str)
        .find(|c| c.starts_with("a: 4 → "))
        .unwrap_or_else(|| panic!("the API shows no rescale of a: {decisions}"))
        .to_string();
    let listed = serde_json::to_string(&rescale).unwrap();
    page.wait(
        10.0,
        "the rescale in the decision list",
        &format!("[...document.querySelectorAll('#decisions .changes li')].some(l => l.textContent === {listed})"),
    );
    page.wait(
        10.0,
        "the arrivals in the decision list",
        "document.querySelector('#decisions').textContent.includes('after b arrived')",
    );
    let reasons = page.wait(
        10.0,
        "the reasons of the last decision",
        "(() => { const r = [...document.querySelectorAll('#decisions .reasons li')].map(l => l.textContent); \
           return r.length === 3 ? r : null; })()",
    );
    let (_, explained) = server.json(Method::GET, "/v1/jobs/a/explain", None).await;
    let summary = explained["summary"].as_str().unwrap();
    assert!(summary.contains("GPU"), "{explained}");
    assert!(
        reasons
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r.as_str().is_some_and(|r| r.starts_with("a: "))),
        "{reasons}"
    );
    let rows = page.texts("#jobs tbody tr td:first-child");
    assert_eq!(rows, ["a", "b", "c"]);

    if let Some(file) = std::env::var_os("DLSCALE_DASHBOARD_SCREENSHOT") {
        screenshot(&mut page, Path::new(&file));
    }

    // A reload keeps the session; logging out ends it.
    page.call("Page.reload", json!({}));
    page.wait(
        20.0,
        "the board after a reload",
        "!document.querySelector('#board').hidden && document.querySelectorAll('#jobs tbody tr').length === 3",
    );
    page.eval("document.querySelector('#logout').click(); true");
    page.wait(
        10.0,
        "the login form after logging out",
        "!document.querySelector('#login-panel').hidden",
    );
    assert_eq!(
        page.eval("sessionStorage.getItem('dlscale-token')"),
        Value::Null
    );
}

/// Writes a PNG of the whole page to `file`.
fn screenshot(page: &mut Page, file: &Path) {
    let height = page.eval("document.documentElement.scrollHeight");
    let height = height.as_u64().unwrap_or(1000).clamp(600, 4000);
    page.call(
        "Emulation.setDeviceMetricsOverride",
        json!({"width": 1280, "height": height, "deviceScaleFactor": 1, "mobile": false}),
    );
    page.call("Emulation.setScrollbarsHidden", json!({"hidden": true}));
    // One more poll at the new width, so the timelines are drawn to it.
    std::thread::sleep(Duration::from_millis(2500));
    let shot = page.call("Page.captureScreenshot", json!({"format": "png"}));
    let png = data_encoding::BASE64
        .decode(shot["data"].as_str().unwrap().as_bytes())
        .unwrap();
    std::fs::write(file, png).unwrap();
    page.call("Emulation.clearDeviceMetricsOverride", json!({}));
    eprintln!("wrote {}", file.display());
}
