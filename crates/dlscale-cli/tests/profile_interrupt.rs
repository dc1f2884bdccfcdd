//! `dlscale profile` interrupted: its launch runs in a process group of its own, which Ctrl-C at
//! the terminal does not reach, so the command stops it itself and leaves nothing behind.

use std::process::Command;
use std::time::{Duration, Instant};

/// The pids of processes whose command line holds `needle`.
fn processes_with(needle: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
        .collect()
}

#[test]
fn an_interrupted_profile_stops_its_launch_and_removes_its_scratch() {
    let dir = tempfile::tempdir().unwrap();
    // A program that prints no progress line: the profile waits for its first.
    let marker = format!("sleep {}.25", std::process::id());
    let job = dir.path().join("job.toml");
    std::fs::write(
        &job,
        format!(
            "id = \"p\"\nmin_batch = 32\nmax_batch = 64\nmax_local_batch = 64\n\
             command = [\"sh\", \"-c\", \"{marker}\"]\nworkdir = \"/tmp\"\nlauncher = \"plain\"\n"
        ),
    )
    .unwrap();
    let mut profile = Command::new(env!("CARGO_BIN_EXE_dlscale"))
        .args([
            "profile",
            job.to_str().unwrap(),
            "--point",
            "1x32",
            "--point",
            "1x64",
        ])
        .env_remove("DLSCALE_API")
        .spawn()
        .unwrap();
    let started = Instant::now();
    while processes_with(&marker).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the launch never started"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let scratch = std::env::temp_dir().join(format!("dlscale-profile-{}", profile.id()));
    assert!(scratch.exists(), "{}", scratch.display());
    let sent = Command::new("kill")
        .args(["-INT", &profile.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let status = profile.wait().unwrap();
    assert!(!status.success(), "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "it stopped at its interrupt, not its startup timeout"
    );
    assert_eq!(
        processes_with(&marker),
        Vec::<u32>::new(),
        "the launch outlived it"
    );
    assert!(!scratch.exists(), "{} left behind", scratch.display());
}
