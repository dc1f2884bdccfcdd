//! Fault injection for the fault soak: with `DLSCALE_CRASH_AT=<point>[:<n>]` the server kills
//! itself with SIGKILL — as `kill -9` would — the `n`-th time (default the first) it reaches the
//! named point. Without the variable every point is a no-op. The points:
//!
//! | point | where |
//! |---|---|
//! | `before-commit` | a batch was decided, nothing of it written |
//! | `after-commit` | its intents are durable, none carried out |
//! | `mid-dispatch` | between two actions of a batch |
//! | `after-spawn` | a local launch's processes exist, its start not yet recorded |
//! | `after-sbatch` | Slurm accepted a launch, its start not yet recorded |
//! | `after-ray-submit` | Ray accepted a launch, its start not yet recorded |
//! | `after-signal` | a stop signal was sent, its delivery not yet recorded |

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// The configured point and how many more hits until the crash.
fn armed() -> &'static Option<(String, AtomicU32)> {
    static ARMED: OnceLock<Option<(String, AtomicU32)>> = OnceLock::new();
    ARMED.get_or_init(|| {
        let spec = std::env::var("DLSCALE_CRASH_AT").ok()?;
        let (point, nth) = match spec.split_once(':') {
            Some((p, n)) => (p.to_string(), n.parse().ok()?),
            None => (spec, 1),
        };
        Some((point, AtomicU32::new(nth)))
    })
}

/// Crashes the process here when the soak armed this point and its count ran out.
pub fn point(name: &str) {
    if let Some((point, left)) = armed() {
        if point == name && left.fetch_sub(1, Ordering::SeqCst) == 1 {
            tracing::warn!("fault injection: crashing at {name}");
            // SAFETY: kill has no memory-safety preconditions; this process ends here.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
    }
}
