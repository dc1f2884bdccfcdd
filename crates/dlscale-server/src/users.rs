//! Users and their tokens: who a request comes from.
//!
//! A user's token is `dls_<user>_<secret>` (the name first, so that a request is checked
//! against one stored hash, not all of them); the configuration keeps only its Argon2id hash
//! (PHC string), made by `dlscale token --user NAME`. A verified token is remembered for the
//! server's life, so the hash's deliberate cost is paid once per token, not per request.
//!
//! What each may do ([`Principal`]): the admin everything; a user reads every job's public
//! state and submits, cancels and changes the jobs of their own team only (403 otherwise, saying
//! why); a job's workers their own job (see `api`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use anyhow::{anyhow, bail, Result};
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

use crate::executor::random_hex;

/// The prefix of every user token.
const TOKEN_PREFIX: &str = "dls_";

/// A user: a name, a team and the hash of their token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Their name (`users.NAME`).
    pub name: String,
    /// Their team: what they submit belongs to it, and its jobs are the ones they may change.
    pub team: Option<String>,
    token_hash: String,
}

/// Who a request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// The admin token (or the dashboard's session).
    Admin,
    /// A user's token.
    User(User),
}

impl Principal {
    /// The name the event history gives them: `admin` or the user's name.
    pub fn name(&self) -> &str {
        match self {
            Principal::Admin => "admin",
            Principal::User(u) => &u.name,
        }
    }

    /// Why they may not change a job of `team` (`None`: the default team), if they may not:
    /// a user changes only their own team's jobs.
    pub fn refuses_team(&self, id: &str, team: Option<&str>) -> Option<String> {
        let Principal::User(user) = self else {
            return None;
        };
        (user.team.as_deref() != team).then(|| {
            format!(
                "job {id} belongs to team {}; user {} ({}) may change only their own team's jobs",
                team.unwrap_or(dlscale_core::allocator::DEFAULT_TEAM),
                user.name,
                user.team.as_deref().map_or_else(
                    || format!("team {}", dlscale_core::allocator::DEFAULT_TEAM),
                    |t| format!("team {t}")
                ),
            )
        })
    }
}

/// The configured users, and the tokens verified so far.
#[derive(Debug, Default)]
pub struct Users {
    by_name: BTreeMap<String, User>,
    /// Tokens verified against their user's hash, by token: each hash is checked once.
    verified: Mutex<HashMap<String, String>>,
}

impl Clone for Users {
    fn clone(&self) -> Self {
        Users {
            by_name: self.by_name.clone(),
            verified: Mutex::default(),
        }
    }
}

impl Users {
    /// The users of `[users.NAME]` tables: `(name, team, token_hash)`. Every hash must be an
    /// Argon2 PHC string and no two users may share one; the error names the field
    /// (`users.NAME.token_hash`).
    pub fn new(users: Vec<(String, Option<String>, String)>) -> Result<Users> {
        let mut by_name = BTreeMap::new();
        for (name, team, token_hash) in users {
            if !is_user_name(&name) {
                bail!("users: user name {name:?}: letters, digits, '-' and '.' only (no '_')");
            }
            let parsed = PasswordHash::new(&token_hash).map_err(|e| {
                anyhow!(
                    "users.{name}.token_hash: not a password hash ({e}); make one with \
                     `dlscale token --user {name}`"
                )
            })?;
            if !parsed.algorithm.as_str().starts_with("argon2") {
                bail!(
                    "users.{name}.token_hash: an {} hash; dlscale takes Argon2 hashes (`dlscale \
                     token --user {name}`)",
                    parsed.algorithm
                );
            }
            if let Some(other) = by_name
                .values()
                .find(|u: &&User| u.token_hash == token_hash)
            {
                bail!(
                    "users.{name}.token_hash: the same hash as user {}'s: every user needs a \
                     token of their own",
                    other.name
                );
            }
            by_name.insert(
                name.clone(),
                User {
                    name,
                    team,
                    token_hash,
                },
            );
        }
        Ok(Users {
            by_name,
            verified: Mutex::default(),
        })
    }

    /// Whether no users are configured.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Every user, by name.
    pub fn all(&self) -> impl Iterator<Item = &User> {
        self.by_name.values()
    }

    /// The user `token` was verified for already, if any: no hash is computed.
    pub fn verified(&self, token: &str) -> Option<&User> {
        let name = user_of_token(token)?;
        let user = self.by_name.get(name)?;
        let verified = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        verified
            .get(token)
            .is_some_and(|n| n == name)
            .then_some(user)
    }

    /// Whether `token` names a configured user (only then is its hash worth computing).
    pub fn may_be_users(&self, token: &str) -> bool {
        user_of_token(token).is_some_and(|name| self.by_name.contains_key(name))
    }

    /// The user `token` belongs to, if it is a user token that matches its user's hash. A
    /// token not verified before costs an Argon2 verification (CPU-bound: callers on an async
    /// runtime run it on its blocking threads).
    pub fn authenticate(&self, token: &str) -> Option<&User> {
        if let Some(user) = self.verified(token) {
            return Some(user);
        }
        let name = user_of_token(token)?;
        let user = self.by_name.get(name)?;
        let hash = PasswordHash::new(&user.token_hash).ok()?;
        Argon2::default()
            .verify_password(token.as_bytes(), &hash)
            .ok()?;
        self.verified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(token.to_string(), name.to_string());
        Some(user)
    }
}

/// Whether `name` can name a user: letters, digits, `-` and `.` (no `_`, which ends the name
/// in a token).
pub fn is_user_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
}

/// The user a token names: `dls_<user>_<secret>`.
fn user_of_token(token: &str) -> Option<&str> {
    let (name, secret) = token.strip_prefix(TOKEN_PREFIX)?.split_once('_')?;
    (!secret.is_empty()).then_some(name)
}

/// A new token for `user` and its Argon2id hash (PHC string), for the configuration.
pub fn new_token(user: &str) -> Result<(String, String)> {
    if !is_user_name(user) {
        bail!("user name {user:?}: letters, digits, '-' and '.' only (no '_')");
    }
    let token = format!("{TOKEN_PREFIX}{user}_{}", random_hex(24)?);
    let hash = hash_token(&token)?;
    Ok((token, hash))
}

/// The Argon2id hash of `token` with a random salt, as a PHC string.
pub fn hash_token(token: &str) -> Result<String> {
    let salt_hex = random_hex(16)?;
    let salt_bytes: Vec<u8> = (0..salt_hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&salt_hex[i..i + 2], 16))
        .collect::<std::result::Result<_, _>>()?;
    let salt = SaltString::encode_b64(&salt_bytes).map_err(|e| anyhow!("salt: {e}"))?;
    Ok(Argon2::default()
        .hash_password(token.as_bytes(), &salt)
        .map_err(|e| anyhow!("cannot hash the token: {e}"))?
        .to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_authenticates_its_user_only_and_a_wrong_one_nobody() {
        let (alice, alice_hash) = new_token("alice").unwrap();
        let (bob, bob_hash) = new_token("bob").unwrap();
        let users = Users::new(vec![
            ("alice".into(), Some("vision".into()), alice_hash),
            ("bob".into(), None, bob_hash),
        ])
        .unwrap();
        // Verified once, by its hash; then known without one.
        assert!(users.verified(&alice).is_none() && users.may_be_users(&alice));
        assert_eq!(users.authenticate(&alice).map(|u| &*u.name), Some("alice"));
        assert_eq!(users.verified(&alice).map(|u| &*u.name), Some("alice"));
        assert_eq!(users.authenticate(&alice).map(|u| &*u.name), Some("alice"));
        assert_eq!(users.authenticate(&bob).map(|u| &*u.name), Some("bob"));
        // A token that names no user costs no hash.
        let nobody = alice.replacen("dls_alice_", "dls_carol_", 1);
        assert!(!users.may_be_users(&nobody) && !users.may_be_users("admin"));
        // Bob's secret under Alice's name, a changed secret, a foreign form: nobody.
        let swapped = bob.replacen("dls_bob_", "dls_alice_", 1);
        for wrong in [
            swapped.as_str(),
            &alice[..alice.len() - 1],
            "admin",
            "dls_",
            "",
        ] {
            assert_eq!(users.authenticate(wrong), None, "{wrong}");
        }
    }

    #[test]
    fn bad_user_tables_are_refused_naming_the_field() {
        let (_, hash) = new_token("a").unwrap();
        for (users, expected) in [
            (
                vec![("a".to_string(), None, "plain".to_string())],
                "users.a.token_hash: not a password hash",
            ),
            (
                vec![("a_b".to_string(), None, hash.clone())],
                "user name \"a_b\"",
            ),
            (
                vec![
                    ("a".to_string(), None, hash.clone()),
                    ("b".to_string(), None, hash.clone()),
                ],
                "users.b.token_hash: the same hash as user a's",
            ),
        ] {
            let err = Users::new(users).unwrap_err().to_string();
            assert!(err.contains(expected), "{err}");
        }
    }

    #[test]
    fn a_user_changes_only_their_own_teams_jobs() {
        let user = |team: Option<&str>| {
            Principal::User(User {
                name: "u".into(),
                team: team.map(str::to_string),
                token_hash: String::new(),
            })
        };
        assert_eq!(user(Some("a")).refuses_team("j", Some("a")), None);
        assert_eq!(user(None).refuses_team("j", None), None);
        assert_eq!(Principal::Admin.refuses_team("j", Some("b")), None);
        assert_eq!(
            user(Some("a")).refuses_team("j", Some("b")).as_deref(),
            Some("job j belongs to team b; user u (team a) may change only their own team's jobs")
        );
    }
}
