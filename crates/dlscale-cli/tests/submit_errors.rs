//! `dlscale submit` on bad job files: the error names the file, the line and the field, whether
//! the CLI finds the mistake itself (syntax, an unknown field) or the server does (a value out of
//! range, a program that is not there).

mod service_support;

use std::path::Path;
use std::process::{Command, Output};

use service_support::{Server, TOKEN};

fn submit(api: &str, file: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dlscale"))
        .arg("submit")
        .arg(file)
        .env("DLSCALE_API", api)
        .env("DLSCALE_TOKEN", TOKEN)
        .output()
        .unwrap()
}

/// Runs `dlscale submit` on `text` as `name`, expecting exit code 2; returns stderr.
fn refused(api: &str, dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    let out = submit(api, &path);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

const GOOD: &str = "id = 'a'\nmin_batch = 32\nmax_batch = 256\nmax_local_batch = 64\n\
                    command = ['sh', '-c', 'true']\nlauncher = 'plain'\n";

/// Mistakes the CLI finds before asking any server (the API address is not even listened on).
#[test]
fn local_mistakes_name_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let api = "http://127.0.0.1:9";
    let d = dir.path();
    let misspelt = GOOD.replace("max_batch = 256", "max_bach = 256");
    let err = refused(api, d, "misspelt.toml", &misspelt);
    assert!(
        err.contains(
            "misspelt.toml:3: job 'a': field 'max_bach': unknown field; did you mean 'max_batch'?"
        ),
        "{err}"
    );
    let err = refused(api, d, "colour.toml", &format!("{GOOD}colour = 'red'\n"));
    assert!(
        err.contains(
            "colour.toml:7: job 'a': field 'colour': unknown field (known: id, model, min_batch"
        ),
        "{err}"
    );
    assert!(
        err.contains(
            "command, workdir, launcher, env, profile, max_retries, family, batch_in_place, resume_from)"
        ),
        "{err}"
    );
    let err = refused(api, d, "syntax.toml", "id = 'a'\nmin_batch = \n");
    assert!(err.contains("syntax.toml:2:"), "{err}");
    let listed = format!(
        "[[jobs]]\n{GOOD}\n[[jobs]]\n{}",
        GOOD.replace("id = 'a'", "id = 'b'\nworkdir = 3")
    );
    let err = refused(api, d, "listed.toml", &listed);
    assert!(
        err.contains("listed.toml:11: job 'b': field 'workdir' must be a string"),
        "{err}"
    );
    let err = refused(
        api,
        d,
        "misspelt.json",
        "{\"id\": \"a\",\n \"comand\": [\"true\"]}",
    );
    assert!(
        err.contains(
            "misspelt.json:2: job 'a': field 'comand': unknown field; did you mean 'command'?"
        ),
        "{err}"
    );
}

/// Mistakes the server finds: its answer names the field, the CLI adds the file and the line.
#[tokio::test(flavor = "multi_thread")]
async fn server_refusals_name_the_line_of_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("server"), "slots = 2\n").await;
    let api = format!("http://127.0.0.1:{}", server.port);
    let d = dir.path();
    let err = refused(
        &api,
        d,
        "range.toml",
        &GOOD.replace("min_batch = 32", "min_batch = 512"),
    );
    assert!(
        err.contains(
            "range.toml:2: 400 Bad Request: field 'min_batch': 512 is larger than max_batch 256"
        ),
        "{err}"
    );
    let err = refused(
        &api,
        d,
        "program.toml",
        &GOOD.replace("'sh', '-c', 'true'", "'no-such-program-x'"),
    );
    assert!(
        err.contains("program.toml:5: 400 Bad Request: field 'command': launcher plain: the program no-such-program-x is not on the server's PATH"),
        "{err}"
    );
    // The second job of a file at fault: its line, not the first job's.
    let second = GOOD
        .replace("id = 'a'", "id = 'b'")
        .replace("max_local_batch = 64", "max_local_batch = 0");
    let err = refused(
        &api,
        d,
        "two.toml",
        &format!("[[jobs]]\n{GOOD}\n[[jobs]]\n{second}"),
    );
    assert!(
        err.contains("two.toml:13: 400 Bad Request: job 1: field 'max_local_batch'"),
        "{err}"
    );
    // Nothing of a refused file was submitted.
    let (_, jobs) = server
        .json(
            dlscale_server::client::Method::GET,
            "/v1/jobs?all=true",
            None,
        )
        .await;
    assert_eq!(jobs, serde_json::json!([]));
    // A good file goes through.
    let path = d.join("good.toml");
    std::fs::write(&path, GOOD).unwrap();
    let out = submit(&api, &path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.kill_jobs();
}

/// `dlscale serve --config` on a bad file: the file, the line of a misspelt key with the key it
/// probably means, the file and the line for a value out of range (found when the file is read,
/// or, for the teams' guarantees, at the start); a torchrun that does not exist, named by the key
/// or the option that gave it.
#[test]
fn serve_config_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let serve = |name: &str, text: &str, options: &[&str]| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_dlscale"))
            .arg("serve")
            .arg("--config")
            .arg(&path)
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(options)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        (path, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (path, err) = serve("typo.toml", "slots = 2\nmin_gian = 0.1\n", &[]);
    assert!(
        err.contains(&format!(
            "{}:2: field 'min_gian': unknown field `min_gian`; did you mean `min_gain`?",
            path.display()
        )),
        "{err}"
    );
    let (path, err) = serve("range.toml", "slots = 2\nmin_gain = -1.0\n", &[]);
    assert!(
        err.contains(&format!(
            "{}:2: min_gain must be a number in [0, 10], got -1",
            path.display()
        )),
        "{err}"
    );
    // As many slots as `dlscale optimize` takes GPUs, no more: refused at once, not after
    // seconds and gigabytes spent building them.
    let (path, err) = serve(
        "huge.toml",
        "listen = \"127.0.0.1:0\"\nslots = 100000000\n",
        &[],
    );
    assert!(
        err.contains(&format!(
            "error: {}:2: slots must be at most 1048576 (GPUs in one cluster), got 100000000",
            path.display()
        )),
        "{err}"
    );
    // Guarantees beyond the slots, found only when the executor says what it offers: still the
    // file's error, at the teams' line.
    let (path, err) = serve(
        "teams.toml",
        "listen = \"127.0.0.1:0\"\nslots = 4\n\n[teams.a]\nguaranteed_gpus = 5\n",
        &[],
    );
    assert!(
        err.contains(&format!(
            "error: {}:4: teams: the guarantees add up to 5 GPUs, more than the 4 the local \
             executor offers",
            path.display()
        )),
        "{err}"
    );
    // A bad option is the option's, not the file's.
    let (_, err) = serve("option.toml", "slots = 2\n", &["--slots", "0"]);
    assert!(
        err.contains("error: --slots: slots must be at least 1"),
        "{err}"
    );
    let missing = "the program /nonexistent/bin/torchrun could not be executed: No such file or \
                   directory";
    let (path, err) = serve(
        "torchrun.toml",
        "slots = 2\ntorchrun = \"/nonexistent/bin/torchrun\"\n",
        &[],
    );
    assert!(
        err.contains(&format!("error: {}:2: torchrun: {missing}", path.display())),
        "{err}"
    );
    let (_, err) = serve(
        "torchrun-option.toml",
        "slots = 2\n",
        &["--torchrun", "/nonexistent/bin/torchrun"],
    );
    assert!(
        err.contains(&format!("error: --torchrun: torchrun: {missing}")),
        "{err}"
    );
}
