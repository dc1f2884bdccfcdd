//! The service job files in `examples/service/` are what the README says they are: one per
//! launcher, each accepted by a real server through the real `dlscale submit`.

mod service_support;

use std::collections::BTreeSet;

use dlscale_server::client::Method;
use service_support::{cli, repo_root, Server};

#[tokio::test(flavor = "multi_thread")]
async fn every_example_service_job_file_is_accepted_and_there_is_one_per_launcher() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "slots = 4\ninterval_s = 0.5\n").await;
    let mut files: Vec<_> = std::fs::read_dir(repo_root().join("examples/service"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    let mut launchers = BTreeSet::new();
    let mut ids = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let doc: toml::Value = toml::from_str(&text).unwrap();
        launchers.insert(doc["launcher"].as_str().unwrap().to_string());
        let id = doc["id"].as_str().unwrap().to_string();
        let relative = file
            .strip_prefix(repo_root())
            .unwrap()
            .display()
            .to_string();
        cli(&server, &["submit", &relative]);
        assert_eq!(server.job(&id).await.id, id);
        ids.push(id);
    }
    assert_eq!(
        launchers,
        ["plain", "srun", "torchrun"].map(String::from).into(),
        "{files:?}"
    );
    for id in &ids {
        // A short example (srun's) may have finished already.
        let (status, body) = server
            .json(Method::DELETE, &format!("/v1/jobs/{id}"), None)
            .await;
        assert!(status == 202 || status == 409, "{id}: {status} {body}");
    }
    for id in &ids {
        server
            .wait_job(id, 60.0, "its end", |j| j.state.is_terminal())
            .await;
    }
}
