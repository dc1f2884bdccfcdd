//! The dashboard in a real browser: a real `dlscale serve` (local executor, four slots) runs
//! real jobs (`examples/plain_job.py`), and headless Chromium, driven over the Chrome DevTools
//! Protocol, opens the page. A wrong token is refused and shows nothing; with the right one the
//! page shows the jobs, each in a colour of its own, and the GPU each holds; when more jobs
//! arrive, the first one's rescale appears in its timeline and in the decision list, with the
//! reasons of the last decision. The login is a session cookie the page's script cannot read:
//! a reload and a new tab (a bookmark) show the data at once, logging out ends it, and the token
//! is never in a URL. No GPU type is shown on the machine's untyped slots; the same answers with
//! typed nodes show each node's type and a column of each job's. A second server, one slot,
//! shows a long job name whole, a queued job's "waiting until", and ended jobs and decisions a
//! page at a time. A third, with two teams, shows each job's team and user and a bar per team:
//! what it holds, borrows and lends.
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
        self.connect(|t| t["type"] == "page")
    }

    /// A new tab of the same browser (the same cookies) at `url`, as a bookmark opens it.
    fn tab(&self, page: &mut Page, url: &str) -> Page {
        let created = page.call("Target.createTarget", json!({ "url": url }));
        let id = created["targetId"].clone();
        self.connect(|t| t["id"] == id)
    }

    /// A connection to the first target `pick` chooses.
    fn connect(&self, pick: impl Fn(&Value) -> bool) -> Page {
        let targets: Value = serde_json::from_slice(&self.get("/json/list")).unwrap();
        let url = targets
            .as_array()
            .and_then(|t| t.iter().find(|t| pick(t)))
            .and_then(|t| t["webSocketDebuggerUrl"].as_str())
            .unwrap_or_else(|| panic!("no such target: {targets}"))
            .to_string();
        let (ws, _) = tungstenite::connect(url.as_str()).unwrap();
        if let MaybeTlsStream::Plain(s) = ws.get_ref() {
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        }
        Page {
            ws,
            next: 0,
            events: Vec::new(),
        }
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
    /// The events received so far (those of the domains enabled, e.g. `Network`).
    events: Vec<Value>,
}

impl Page {
    /// Sends a command and waits for its answer (events in between are kept in `events`).
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
            if answer.get("method").is_some() {
                self.events.push(answer);
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

    /// The browser's cookies for `url`.
    fn cookies(&mut self, url: &str) -> Vec<Value> {
        let r = self.call("Network.getCookies", json!({ "urls": [url] }));
        r["cookies"].as_array().cloned().unwrap_or_default()
    }

    /// Clicks the element `selector` matches.
    fn click(&mut self, selector: &str) {
        let selector = serde_json::to_string(selector).unwrap();
        self.eval(&format!("document.querySelector({selector}).click(); true"));
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

/// Chromium, or why the test skips (a panic where `DLSCALE_REQUIRE_CHROMIUM=1`).
fn chromium_or_skip() -> Option<PathBuf> {
    match chromium() {
        Ok(exe) => Some(exe),
        Err(why) if std::env::var("DLSCALE_REQUIRE_CHROMIUM").as_deref() == Ok("1") => {
            panic!("DLSCALE_REQUIRE_CHROMIUM=1 but {why}")
        }
        Err(why) => {
            eprintln!("skipping the dashboard browser test: {why}; install Debian's chromium");
            None
        }
    }
}

/// The session cookies the browser holds for `base`.
fn session_cookies(page: &mut Page, base: &str) -> Vec<Value> {
    page.cookies(base)
        .into_iter()
        .filter(|c| {
            c["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("dlscale_session"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_shows_jobs_gpus_a_rescale_and_its_reasons_and_refuses_a_wrong_token() {
    let Some(exe) = chromium_or_skip() else {
        return;
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
    page.call("Network.enable", json!({}));
    page.call("Page.navigate", json!({"url": format!("{base}/")}));
    page.wait(
        20.0,
        "the login form",
        "!document.querySelector('#login-panel').hidden",
    );
    assert_eq!(
        page.eval("document.querySelector('#login-error').textContent"),
        json!(""),
        "no session yet is no error"
    );

    // A wrong token is refused: the server's message, no data, no session.
    page.log_in("not-the-token");
    let error = page.wait(
        20.0,
        "the refusal",
        "document.querySelector('#login-error').textContent",
    );
    assert_eq!(
        error,
        json!("invalid token: a session needs the server's admin token")
    );
    assert_eq!(
        page.eval("document.querySelector('#board').hidden"),
        json!(true)
    );
    assert_eq!(
        page.eval("document.querySelectorAll('#jobs tbody tr').length"),
        json!(0)
    );
    assert_eq!(session_cookies(&mut page, &base), Vec::<Value>::new());

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
    // The session is a cookie for this port's /v1 routes that the page's script cannot read;
    // the page keeps nothing of the token.
    let cookies = session_cookies(&mut page, &format!("{base}/v1/jobs"));
    assert_eq!(cookies.len(), 1, "{cookies:?}");
    let cookie = &cookies[0];
    assert_eq!(
        cookie["name"],
        json!(format!("dlscale_session_{}", server.port))
    );
    assert_eq!(
        (&cookie["httpOnly"], &cookie["sameSite"], &cookie["path"]),
        (&json!(true), &json!("Strict"), &json!("/v1")),
        "{cookie}"
    );
    assert_eq!(
        page.eval("[document.cookie, sessionStorage.length, localStorage.length]"),
        json!(["", 0, 0])
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
        &format!("(() => {{ const c = {row}; return c[8] !== '–' ? c : null; }})()"),
    );
    assert_eq!(cells[7], json!(predicted), "{cells}");
    assert_eq!(cells[9], json!(efficiency), "{cells}");

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

    // Each job one colour, in its slots, its swatch and its timeline, and no two alike.
    let painted = page.eval(
        "(() => { const by = {}; \
           const add = (id, c) => (by[id] = by[id] || []).includes(c) || by[id].push(c); \
           for (const g of document.querySelectorAll('#nodes .gpu[data-job]')) \
             add(g.dataset.job, getComputedStyle(g).backgroundColor); \
           for (const r of document.querySelectorAll('#jobs tbody tr[data-job]')) \
             add(r.dataset.job, getComputedStyle(r.querySelector('.swatch')).backgroundColor); \
           for (const t of document.querySelectorAll('.timeline[data-job]')) \
             add(t.dataset.job, getComputedStyle(t.querySelector('.seg')).fill); \
           return by; })()",
    );
    let painted = painted.as_object().unwrap();
    assert_eq!(painted.len(), 3, "{painted:?}");
    let colours: std::collections::BTreeSet<&str> = painted
        .values()
        .map(|c| {
            let c = c.as_array().unwrap();
            assert_eq!(c.len(), 1, "one colour per job: {painted:?}");
            c[0].as_str().unwrap()
        })
        .collect();
    assert_eq!(colours.len(), 3, "{painted:?}");
    // However many jobs live at once, none shares a colour; the first twelve are twelve hues
    // at least 30° apart; a job keeps its colour when another one ends.
    let palette = page.eval(
        "(() => { const c = new Colours(); const ids = [...Array(40).keys()].map(k => 'job-' + k); \
           c.assign(ids); const all = ids.map(id => c.of(id)); \
           const hues = all.slice(0, 12).map(s => Number(/hsl\\((\\d+)/.exec(s)[1])); \
           let gap = 360; for (const h of hues) for (const k of hues) \
             if (h !== k) gap = Math.min(gap, Math.abs(h - k), 360 - Math.abs(h - k)); \
           const before = c.of('job-7'); c.assign(ids.filter(id => id !== 'job-3')); \
           c.assign(ids.filter(id => id !== 'job-3').concat(['new'])); \
           return [new Set(all).size, new Set(hues).size, gap, c.of('job-7') === before, c.of('new') === all[3]]; })()",
    );
    assert_eq!(palette, json!([40, 12, 30, true, true]));

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
    // The local machine names no GPU type: none is shown. Nodes that name one (the server's own
    // answers, with a type on every node and on the jobs' launches, drawn by the page's own
    // functions): each node's type beside its name, and a column of each job's.
    let untyped = "[document.querySelector('#type-head').hidden, \
                   document.querySelectorAll('#nodes .node-type, #jobs td.job-type').length, \
                   document.querySelector('#jobs tbody tr[data-job=\"a\"]').children.length]";
    assert_eq!(page.eval(untyped), json!([true, 0, 14]));
    let typed = page.eval(
        "(async () => { const cluster = await api('/v1/cluster'); const live = await api('/v1/jobs'); \
           cluster.nodes = cluster.nodes.map(n => ({ ...n, gpu_type: 'a100' })); \
           const jobs = live.map(j => ({ ...j, gpu_type: j.nodes.length > 0 ? 'a100' : undefined })); \
           renderNodes(cluster); renderJobs(jobs, new Map(), Date.now() / 1000, typed(cluster)); \
           return [[...document.querySelectorAll('#nodes .node-type')].map(e => e.textContent), \
                   document.querySelector('#type-head').hidden, \
                   [...document.querySelectorAll('#jobs tbody td.job-type')].map(e => e.textContent), \
                   document.querySelector('#jobs tbody tr[data-job=\"a\"]').children.length]; })()",
    );
    assert_eq!(
        typed,
        json!([["a100"], false, ["a100", "a100", "a100"], 15])
    );

    // A new tab, as a bookmark or a headless screenshot opens the page: the data at once.
    let mut bookmark = browser.tab(&mut page, &format!("{base}/"));
    bookmark.call("Page.enable", json!({}));
    let board = "!document.querySelector('#board').hidden && \
                 document.querySelectorAll('#jobs tbody tr').length === 3";
    bookmark.wait(20.0, "the board in a new tab, without a login", board);
    if let Some(file) = std::env::var_os("DLSCALE_DASHBOARD_SCREENSHOT") {
        screenshot(&mut bookmark, Path::new(&file));
    }

    // A reload keeps the session; logging out ends it, in every tab.
    page.call("Page.reload", json!({}));
    page.wait(20.0, "the board after a reload", board);
    page.click("#logout");
    page.wait(
        10.0,
        "the login form after logging out",
        "!document.querySelector('#login-panel').hidden",
    );
    assert_eq!(
        session_cookies(&mut page, &format!("{base}/v1/jobs")),
        Vec::<Value>::new()
    );
    let told = bookmark.wait(
        10.0,
        "the other tab logged out",
        "!document.querySelector('#login-panel').hidden && \
         document.querySelector('#login-error').textContent",
    );
    assert_eq!(told, json!("the session has ended: log in again"));
    page.call("Page.reload", json!({}));
    page.wait(
        20.0,
        "the login form after a reload",
        "!document.querySelector('#login-panel').hidden",
    );

    // The token went to the server once per login, in a POST body; never in a URL or a header.
    let requests: Vec<&Value> = page
        .events
        .iter()
        .filter(|e| e["method"] == "Network.requestWillBeSent")
        .map(|e| &e["params"]["request"])
        .collect();
    let logins: Vec<&&Value> = requests
        .iter()
        .filter(|r| r["postData"].as_str().is_some_and(|b| b.contains(TOKEN)))
        .collect();
    assert_eq!(logins.len(), 1, "one login with the token: {logins:?}");
    assert_eq!(
        (&logins[0]["method"], &logins[0]["url"]),
        (&json!("POST"), &json!(format!("{base}/v1/session")))
    );
    assert!(
        requests.len() > 10,
        "the page's requests were seen: {}",
        requests.len()
    );
    for r in &requests {
        let url = r["url"].as_str().unwrap_or_default();
        assert!(!url.contains(TOKEN), "the token in a URL: {url}");
        assert!(
            !r["headers"].to_string().contains(TOKEN),
            "the token in a header: {r}"
        );
    }
    let history = page.call("Page.getNavigationHistory", json!({}));
    assert!(!history.to_string().contains(TOKEN), "{history}");
}

/// A job that holds its slot for ten minutes (it reports nothing).
fn sleeper(id: &str) -> Value {
    json!({"id": id, "min_batch": 8, "max_batch": 8, "max_local_batch": 8,
           "command": ["sleep", "600"], "workdir": "/tmp", "launcher": "plain"})
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_shows_long_names_whole_when_a_queued_job_waits_until_and_pages_the_past() {
    let Some(exe) = chromium_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // One slot; its job keeps it for its cooldown, so later ones wait until that ends.
    let server = Server::start(
        dir.path(),
        "slots = 1\ncooldown_s = 600\ninterval_s = 0.5\ngrace_s = 3\n",
    )
    .await;
    let base = format!("http://127.0.0.1:{}", server.port);
    let long = "an-unusually-long-job-name-that-a-slot-must-show-whole";
    server.submit(sleeper(long)).await;
    server
        .wait_job(long, 30.0, "running", |j| j.state.name() == "running")
        .await;
    server.submit(sleeper("waiter")).await;
    let waiter = server
        .wait_job("waiter", 20.0, "a waiting-until time", |j| {
            j.waiting_until.is_some()
        })
        .await;
    let until = waiter.waiting_until.unwrap();
    // More ended jobs and decisions than one page shows.
    let ended: Vec<String> = (0..11).map(|k| format!("gone-{k:02}")).collect();
    for id in &ended {
        server.submit(sleeper(id)).await;
        server.cancel(id).await;
    }
    let (_, kept) = server
        .json(Method::GET, "/v1/decisions?limit=50", None)
        .await;
    let kept = kept["decisions"].as_array().map_or(0, Vec::len);
    assert!(kept > 10, "more decisions than a page: {kept}");

    let browser = Browser::start(&exe);
    let mut page = browser.page();
    page.call("Page.enable", json!({}));
    page.call("Page.navigate", json!({"url": format!("{base}/")}));
    page.wait(
        20.0,
        "the login form",
        "!document.querySelector('#login-panel').hidden",
    );
    page.log_in(TOKEN);
    let job = serde_json::to_string(long).unwrap();
    page.wait(
        20.0,
        "the long-named job in its slot",
        &format!("document.querySelector('#nodes .gpu[data-job={job}]')"),
    );

    // Its name whole: nothing of it cut off or spilling out of its slot.
    let shown = page.eval(&format!(
        "(() => {{ const g = document.querySelector('#nodes .gpu[data-job={job}]'); \
           const n = g.querySelector('.gpu-job'); \
           return [n.textContent, n.scrollWidth <= n.clientWidth, g.scrollWidth <= g.clientWidth, \
                   g.scrollHeight <= g.clientHeight]; }})()"
    ));
    assert_eq!(shown, json!([long, true, true, true]));

    // The queued job says until when it waits.
    let why = page.wait(
        10.0,
        "the waiting job's time",
        "document.querySelector('#jobs tbody tr[data-job=\"waiter\"] td.why')?.textContent",
    );
    let clock = page.eval(&format!("new Date({until} * 1000).toLocaleTimeString()"));
    let clock = clock.as_str().unwrap();
    assert!(
        why.as_str()
            .unwrap()
            .contains(&format!("waiting until {clock}")),
        "{why} vs {clock}"
    );

    // Ended jobs: ten, newest first; the eleventh on the older page; back again.
    let ended_rows = "JSON.stringify([...document.querySelectorAll('#jobs tbody tr.ended')].map(r => r.dataset.job))";
    let newest: Vec<String> = ended.iter().rev().take(10).cloned().collect();
    let first = page.wait(
        10.0,
        "a page of ended jobs",
        &format!("(() => {{ const r = JSON.parse({ended_rows}); return r.length === 10 ? r : null; }})()"),
    );
    assert_eq!(first, json!(newest));
    assert_eq!(
        page.eval("[document.querySelector('#ended-pager').hidden, document.querySelector('#ended-newer').disabled]"),
        json!([false, true])
    );
    page.click("#ended-older");
    page.wait(
        10.0,
        "the older page of ended jobs",
        &format!("{ended_rows} === JSON.stringify(['gone-00'])"),
    );
    assert_eq!(
        page.eval("document.querySelector('#ended-older').disabled"),
        json!(true)
    );
    assert_eq!(
        page.texts("#jobs tbody tr:not(.ended) td:first-child"),
        [long, "waiter"],
        "the live jobs stay"
    );
    page.click("#ended-newer");
    page.wait(
        10.0,
        "the newest ended jobs again",
        &format!(
            "{ended_rows} === {}",
            serde_json::to_string(&first.to_string()).unwrap()
        ),
    );

    // Decisions: ten, the reasons with the newest; older ones on the next page.
    let ats = "JSON.stringify([...document.querySelectorAll('#decisions .decision')].map(d => Number(d.dataset.at)))";
    let newest = page.wait(
        10.0,
        "a page of decisions",
        &format!("(() => {{ const a = JSON.parse({ats}); return a.length === 10 ? a : null; }})()"),
    );
    assert_eq!(
        page.eval("document.querySelectorAll('#decisions .reasons').length"),
        json!(1)
    );
    page.click("#decisions-older");
    let older = page.wait(
        10.0,
        "the older page of decisions",
        &format!(
            "(() => {{ const a = JSON.parse({ats}); return a.length > 0 && a[0] < {} ? a : null; }})()",
            newest[9]
        ),
    );
    assert_eq!(older.as_array().unwrap().len(), (kept - 10).min(10));
    assert_eq!(
        page.eval("document.querySelectorAll('#decisions .reasons').length"),
        json!(0),
        "the reasons go with the newest decision"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_shows_each_teams_bar_and_each_jobs_team_and_user() {
    let Some(exe) = chromium_or_skip() else {
        return;
    };
    let (bob, bob_hash) = dlscale_server::users::new_token("bob").unwrap();
    let config = format!(
        "slots = 4\ninterval_s = 0.5\ngrace_s = 3\n\
         [teams.a]\nguaranteed_gpus = 2\n[teams.b]\nguaranteed_gpus = 2\n\
         [users.bob]\nteam = \"b\"\ntoken_hash = \"{bob_hash}\"\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &config).await;
    let base = format!("http://127.0.0.1:{}", server.port);
    // Bob's job holds all four GPUs: two of b's, two borrowed from idle a.
    let mut job = sleeper("b1");
    job["max_batch"] = json!(32);
    job["min_gpus"] = json!(4);
    job["max_gpus"] = json!(4);
    let bob = ApiClient::new(&base, Some(bob)).unwrap();
    let body = serde_json::to_vec(&job).unwrap();
    let (status, _) = bob
        .send(Method::POST, "/v1/jobs", Some(body))
        .await
        .unwrap();
    assert_eq!(status.as_u16(), 201);
    server
        .wait_job("b1", 30.0, "running", |j| j.state.name() == "running")
        .await;

    let browser = Browser::start(&exe);
    let mut page = browser.page();
    page.call("Page.enable", json!({}));
    page.call("Page.navigate", json!({"url": format!("{base}/")}));
    page.wait(
        20.0,
        "the login form",
        "!document.querySelector('#login-panel').hidden",
    );
    page.log_in(TOKEN);
    let stands = page.wait(
        20.0,
        "the teams' bars",
        "(() => { const t = [...document.querySelectorAll('#teams .team')]; \
           return t.length === 3 && !document.querySelector('#teams-section').hidden \
             ? t.map(e => [e.dataset.team, +e.dataset.gpus, +e.dataset.borrowed, +e.dataset.lent]) : null; })()",
    );
    assert_eq!(
        stands,
        json!([["a", 0, 0, 2], ["b", 4, 2, 0], ["default", 0, 0, 0]])
    );
    // Drawn to scale (widths through the CSSOM: the page's policy refuses inline styles): a's
    // lent part is half the bar, b's held part and its borrowed part a half each.
    let width = |team: &str, kind: &str| {
        format!(
            "(() => {{ const b = document.querySelector('#teams .team[data-team=\"{team}\"] .team-bar'); \
               const s = b.querySelector('.seg.{kind}'); \
               return s ? Math.round(100 * s.getBoundingClientRect().width / b.getBoundingClientRect().width) : null; }})()"
        )
    };
    for (team, kind) in [("a", "lent"), ("b", "own"), ("b", "borrowed")] {
        assert_eq!(page.eval(&width(team, kind)), json!(50), "{team} {kind}");
    }
    let facts = page.texts("#teams .team[data-team=\"b\"] .team-facts");
    assert!(
        facts[0].starts_with("4 GPUs held of 2 guaranteed · 2 borrowed"),
        "{facts:?}"
    );
    // The job's row names its team and who submitted it.
    let row = page.eval(
        "[...document.querySelectorAll('#jobs tbody tr[data-job=\"b1\"] td')].slice(1, 3).map(t => t.textContent)",
    );
    assert_eq!(row, json!(["b", "bob"]));
    if let Some(file) = std::env::var_os("DLSCALE_DASHBOARD_TEAMS_SCREENSHOT") {
        screenshot(&mut page, Path::new(&file));
    }
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
