//! Input of the client commands that is wrong before any server is asked: `dlscale token`'s
//! team, and a `DLSCALE_TOKEN` that cannot be sent. Exit code 2, the error naming the option or
//! variable at fault.

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
