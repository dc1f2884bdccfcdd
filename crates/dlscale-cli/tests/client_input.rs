//! Input of the client commands that is wrong before any server is asked: `dlscale token`'s
//! team, a `DLSCALE_TOKEN` that cannot be sent, and a file that never ends. Exit code 2, the
//! error naming the option, variable or file at fault.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output};

fn dlscale(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dlscale"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// A team name the server would refuse in `[users.NAME]` is refused here, before a table is
/// printed that the server then refuses at start.
#[test]
fn token_refuses_a_team_the_server_would() {
    for team in ["../x", "Vision Team!", ""] {
        let out = dlscale(&["token", "--user", "alice", "--team", team], &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{team:?}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "error: --team {team:?}: a team name has letters, digits, '-', '_' and '.' only"
            )),
            "{stderr}"
        );
        assert!(out.stdout.is_empty(), "nothing printed for {team:?}");
    }
    let out = dlscale(&["token", "--user", "alice", "--team", "vision-2.a_b"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("[users.alice]\nteam = \"vision-2.a_b\"\n"),
        "{stdout}"
    );
}

/// A token with a newline (a file read with its line end, pasted twice) cannot be sent as a
/// header: the error names DLSCALE_TOKEN, not the HTTP library's parser, and not the token.
#[test]
fn a_token_that_cannot_be_a_header_names_dlscale_token() {
    // Nothing listens there: the token is refused before any connection.
    let api = ("DLSCALE_API", "http://127.0.0.1:9");
    for token in ["bad\nheader", "tab\u{7f}", "pässword"] {
        let out = dlscale(&["jobs"], &[api, ("DLSCALE_TOKEN", token)]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{token:?}: {stderr}");
        assert!(
            stderr.contains("error: DLSCALE_TOKEN holds a character not allowed in an HTTP header"),
            "{stderr}"
        );
        assert!(!stderr.contains(token), "the token is not echoed: {stderr}");
    }
    // A good one gets as far as the (absent) server.
    let out = dlscale(&["jobs"], &[api, ("DLSCALE_TOKEN", "good-token_1")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot reach the dlscale server"),
        "{stderr}"
    );
}

/// A FIFO at `path` that a thread keeps writing zeros into once a reader opens it: a file that
/// never ends. The thread ends when the reader closes it.
fn endless_fifo(path: &Path) {
    let made = Command::new("mkfifo")
        .args(["-m", "600"])
        .arg(path)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo {}", path.display());
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        if let Ok(mut fifo) = std::fs::OpenOptions::new().write(true).open(&path) {
            let zeros = vec![0u8; 1 << 16];
            while fifo.write_all(&zeros).is_ok() {}
        }
    });
}

/// Every file a command reads whole — a job, cluster, fleet or configuration file, the server's
/// token file — is read up to a bound: one that never ends (`/dev/zero`, a FIFO written
/// forever) is refused naming the file and the limit, instead of taking all memory.
#[test]
fn a_file_that_never_ends_is_refused_naming_it_and_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("jobs.toml");
    endless_fifo(&fifo);
    let fifo = fifo.display().to_string();
    let out = dir.path().join("out").display().to_string();
    let api = ("DLSCALE_API", "http://127.0.0.1:9");
    let limit = "it holds more than 67108864 bytes (64 MiB), the most dlscale reads from one \
                 input file";
    let cases: [(&[&str], &str); 9] = [
        (&["submit", "/dev/zero"], "job file /dev/zero"),
        (&["submit", &fifo], &format!("job file {fifo}")),
        (&["profile", "/dev/zero"], "job file /dev/zero"),
        (
            &[
                "optimize",
                "--jobs",
                "/dev/zero",
                "--nodes",
                "1",
                "--gpus-per-node",
                "1",
            ],
            "job file /dev/zero",
        ),
        (
            &["optimize", "--jobs", "jobs.json", "--cluster", "/dev/zero"],
            "cluster file /dev/zero",
        ),
        (
            &["optimize", "--jobs", "jobs.json", "--fleet", "/dev/zero"],
            "fleet file /dev/zero",
        ),
        (&["serve", "--config", "/dev/zero"], "config /dev/zero"),
        (
            &[
                "simulate",
                "--workload",
                "/dev/zero",
                "--policy",
                "static",
                "--out",
                &out,
            ],
            "workload /dev/zero",
        ),
        (
            &[
                "simulate",
                "--workload",
                "pollux:1",
                "--policy",
                "static",
                "--teams",
                "/dev/zero",
                "--out",
                &out,
            ],
            "teams file /dev/zero",
        ),
    ];
    for (args, file) in cases {
        let out = dlscale(args, &[api, ("DLSCALE_TOKEN", "t")]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("error: cannot read {file}: {limit}")),
            "{args:?}: {stderr}"
        );
    }
    // The server's token file, in its data directory (private, as it must be).
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    endless_fifo(&data.join("token"));
    let data = data.display().to_string();
    let serve = [
        "serve",
        "--data-dir",
        &data,
        "--slots",
        "1",
        "--listen",
        "127.0.0.1:0",
    ];
    let out = Command::new(env!("CARGO_BIN_EXE_dlscale"))
        .args(serve)
        .env_remove("DLSCALE_TOKEN")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot read token file {data}/token: {limit}")),
        "{stderr}"
    );
}

/// Flags out of range are refused with exit 2, naming the flag, before anything runs: a
/// `--watch` interval too long to sleep (it panicked after the first redraw), a profile of one
/// point (exit 1 before) or a startup timeout that is not a number (it waited for ever).
#[test]
fn out_of_range_flags_of_jobs_and_profile_name_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job.toml");
    std::fs::write(
        &job,
        "id = \"p\"\nmin_batch = 32\nmax_batch = 64\nmax_local_batch = 64\n\
         command = [\"true\"]\nworkdir = \"/tmp\"\nlauncher = \"plain\"\n",
    )
    .unwrap();
    let job = job.to_str().unwrap();
    let api = ("DLSCALE_API", "http://127.0.0.1:9");
    let cases: [(&[&str], &str); 4] = [
        (
            &["jobs", "--watch", "1e20"],
            "--watch: the interval must be",
        ),
        (
            &["profile", job, "--point", "1x32"],
            "--point: profiling needs at least 2 points",
        ),
        (
            &["profile", job, "--startup-timeout", "NaN"],
            "--startup-timeout must be a number of seconds",
        ),
        (
            &["profile", job, "--seconds=-1"],
            "--seconds must be a number of seconds",
        ),
    ];
    for (args, expected) in cases {
        let out = dlscale(args, &[api]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

/// A server that cannot be reached: the error says why (refused), and `jobs --watch --format
/// json` keeps standard output JSON, its errors on standard error.
#[test]
fn an_unreachable_server_is_named_with_why_and_watched_json_stays_json() {
    let mut watch = Command::new(env!("CARGO_BIN_EXE_dlscale"))
        .args(["jobs", "--watch", "0.2", "--format", "json"])
        .env("DLSCALE_API", "http://127.0.0.1:9")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    watch.kill().unwrap();
    let out = watch.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stderr.contains("cannot reach the dlscale server at http://127.0.0.1:9")
            && stderr.contains("Connection refused"),
        "{stderr}"
    );
    // A password in the URL is refused, and not repeated.
    let out = dlscale(&["jobs"], &[("DLSCALE_API", "http://me:pa55@127.0.0.1:9")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("DLSCALE_API must not hold a user or password") && !stderr.contains("pa55"),
        "{stderr}"
    );
}
