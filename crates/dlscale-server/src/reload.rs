//! A reloaded configuration (SIGHUP, `systemctl reload`): the users and their tokens, the
//! teams with their quotas and fair share, and what the executor takes of its settings (the
//! teams' Slurm accounts) take effect at once, without a restart; any other setting that changed
//! is named, and waits for the next start. The new teams reach the autoscaler as an input
//! ([`dlscale_autoscaler::Input::Teams`]), so the input log records them and a replay decides as
//! the service did.

use std::collections::BTreeMap;

use anyhow::{anyhow, Result};
use dlscale_autoscaler::Input;
use dlscale_core::allocator::Teams;

use crate::config::ServerConfig;
use crate::service::{Service, Unavailable};
use crate::teams::ensure_guarantees_fit;

/// What a reload changed, in words, one line each.
pub type Changes = Vec<String>;

/// Applies `new` (the configuration file read again, resolved) to the running `service`:
/// teams through the driver, then what the executor takes of its settings (the teams' Slurm
/// accounts), then users. Refused, changing nothing, when the guarantees exceed
/// the GPUs the service has now or the driver does not take the teams. Teams the driver took
/// but could not yet write (the database cannot be written) take effect when it can; the users
/// are applied at once all the same, as the teams they belong to are on their way.
pub async fn reload(service: &Service, new: ServerConfig) -> Result<Changes> {
    let view = service.view();
    if let Some(teams) = &new.teams {
        let offered_by = "the cluster has now; nothing was reloaded";
        ensure_guarantees_fit(teams, view.topology.total(), offered_by)?;
    }
    let mut changes = Changes::new();
    let old = &service.config;
    let (old_teams, new_teams) = (view.teams.as_ref(), new.teams.as_ref());
    if old_teams != new_teams || view.fair_share != new.fair_share {
        let named = |t: Option<&Teams>| t.map_or_else(Vec::new, Teams::named);
        let input = Input::Teams {
            teams: named(new_teams),
            fair_share: new.fair_share,
        };
        let taken = match service
            .request(vec![input], Vec::new(), BTreeMap::new())
            .await
        {
            Ok(refusals) => match refusals.first() {
                Some(Some(why)) => return Err(anyhow!("{why}; nothing was reloaded")),
                _ => describe_teams(new_teams, &new),
            },
            // Taken, to be written: the users below follow the teams they will belong to.
            Err(Unavailable::Pending(why)) => format!(
                "{} (not yet written: {why}; they take effect when the database can be written)",
                describe_teams(new_teams, &new)
            ),
            Err(e) => return Err(anyhow!("{e}; nothing was reloaded")),
        };
        changes.push(taken);
    }
    changes.extend(service.executor.reload(&*new.executor));
    if !service.users().all().eq(new.users.all()) {
        let names: Vec<&str> = new.users.all().map(|u| u.name.as_str()).collect();
        changes.push(match names.is_empty() {
            true => "users: none (only the admin token)".into(),
            false => format!("users: {}", names.join(", ")),
        });
        service.set_users(new.users.clone());
    }
    // Every other setting is read at the start only.
    let waiting = fixed_changes(old, &new);
    if !waiting.is_empty() {
        changes.push(format!(
            "{} changed: taken at the next start (only [users], [teams], their Slurm accounts \
             and fair_share_half_life_s are taken at once)",
            waiting.join(", ")
        ));
    }
    Ok(changes)
}

/// The settings read at the start only that differ between `old` and `new`, named: the
/// autoscaler's as its stored configuration names them (`grace_s`,
/// `settings.restart.min_gain`), then the service's own.
fn fixed_changes(old: &ServerConfig, new: &ServerConfig) -> Vec<String> {
    fn leaves(prefix: &str, v: &serde_json::Value, out: &mut BTreeMap<String, String>) {
        match v {
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    leaves(&key, v, out);
                }
            }
            other => {
                out.insert(prefix.to_string(), other.to_string());
            }
        }
    }
    let flat = |c: &ServerConfig| {
        let mut out = BTreeMap::new();
        if let Ok(v) = serde_json::to_value(c.autoscaler()) {
            leaves("", &v, &mut out);
        }
        // Applied at once, not here.
        out.retain(|k, _| !k.starts_with("teams") && !k.starts_with("fair_share"));
        out
    };
    let (was, now) = (flat(old), flat(new));
    let mut changed: Vec<String> = was
        .keys()
        .chain(now.keys())
        .filter(|k| was.get(*k) != now.get(*k))
        .cloned()
        .collect();
    changed.sort();
    changed.dedup();
    let own = [
        ("listen", old.listen != new.listen),
        ("data_dir", old.data_dir != new.data_dir),
        ("token", old.token != new.token),
        ("torchrun", old.torchrun != new.torchrun),
        ("api_url", old.api_url != new.api_url),
        (
            "metrics_without_token",
            old.metrics_without_token != new.metrics_without_token,
        ),
        ("executor", old.executor.name() != new.executor.name()),
        (
            "the executor's settings",
            old.executor.name() == new.executor.name()
                && old.executor.fixed() != new.executor.fixed(),
        ),
    ];
    changed.extend(own.iter().filter(|(_, c)| *c).map(|(k, _)| k.to_string()));
    if changed.is_empty() {
        // A setting neither list names (one added since) still counts as changed.
        let mut unchanged = new.clone();
        unchanged.users = old.users.clone();
        unchanged.teams = old.teams.clone();
        unchanged.fair_share = old.fair_share;
        unchanged.executor = std::sync::Arc::clone(&old.executor);
        if format!("{unchanged:?}") != format!("{old:?}") {
            changed.push("another setting".to_string());
        }
    }
    changed
}

/// The teams now, in words.
fn describe_teams(teams: Option<&Teams>, config: &ServerConfig) -> String {
    let Some(teams) = teams else {
        return "teams: none".into();
    };
    let each: Vec<String> = teams
        .named()
        .into_iter()
        .map(|(name, q)| format!("{name} guaranteed {}", q.guaranteed_gpus))
        .collect();
    let fair = match config.fair_share {
        Some(f) => format!("fair share half-life {} s", f.half_life_s),
        None => "no fair share".into(),
    };
    format!("teams: {}; {fair}", each.join(", "))
}
