//! The service's clock, injected: the wall clock in production ([`SystemClock`]); in tests a
//! [`ManualClock`] that moves only when told, so that cooldowns, decision intervals and
//! timeouts are crossed at once instead of slept through.
//!
//! The driver stamps every batch of inputs with [`Clock::now_s`] and sleeps until the
//! autoscaler's next wake-up with [`Clock::sleep_until_s`]; the API reads the same clock
//! (cooldown ends, session expiry), and so do the executors' observations.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// Seconds since the Unix epoch, as the service sees them.
#[async_trait::async_trait]
pub trait Clock: Send + Sync + Debug {
    /// The time now, seconds since the Unix epoch.
    fn now_s(&self) -> f64;

    /// Returns once [`Clock::now_s`] has reached `at_s`.
    async fn sleep_until_s(&self, at_s: f64);
}

/// The wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

#[async_trait::async_trait]
impl Clock for SystemClock {
    fn now_s(&self) -> f64 {
        wall_clock_s()
    }

    async fn sleep_until_s(&self, at_s: f64) {
        // Slept in steps of at most a minute: a wall clock set forward meanwhile is noticed.
        loop {
            let left_s = at_s - wall_clock_s();
            if left_s <= 0.0 {
                return;
            }
            tokio::time::sleep(Duration::from_secs_f64(left_s.min(60.0))).await;
        }
    }
}

/// Seconds since the Unix epoch by the system's wall clock (0 before 1970).
pub fn wall_clock_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// A clock that stands still until [`ManualClock::advance`] moves it; whoever sleeps on it
/// wakes when it passes their time.
#[derive(Debug)]
pub struct ManualClock {
    now_s: watch::Sender<f64>,
}

impl ManualClock {
    /// A clock standing at `at_s`.
    pub fn new(at_s: f64) -> Arc<ManualClock> {
        Arc::new(ManualClock {
            now_s: watch::Sender::new(at_s),
        })
    }

    /// Moves the clock `by_s` seconds forward (a negative step is ignored: time never goes
    /// back).
    pub fn advance(&self, by_s: f64) {
        self.now_s.send_modify(|t| *t += by_s.max(0.0));
    }
}

#[async_trait::async_trait]
impl Clock for ManualClock {
    fn now_s(&self) -> f64 {
        *self.now_s.borrow()
    }

    async fn sleep_until_s(&self, at_s: f64) {
        let mut now = self.now_s.subscribe();
        // The sender lives as long as `self`: the wait ends only when the time is reached.
        let _ = now.wait_for(|&t| t >= at_s).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_manual_clock_wakes_its_sleepers_when_it_passes_their_time() {
        let clock = ManualClock::new(100.0);
        let sleeper = {
            let clock = Arc::clone(&clock);
            tokio::spawn(async move { clock.sleep_until_s(110.0).await })
        };
        clock.advance(5.0);
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished(), "woke at 105 for 110");
        clock.advance(-50.0);
        assert_eq!(clock.now_s(), 105.0, "time never goes back");
        clock.advance(5.0);
        tokio::time::timeout(Duration::from_secs(5), sleeper)
            .await
            .expect("still asleep at 110")
            .unwrap();
    }

    #[tokio::test]
    async fn the_system_clock_sleeps_until_the_wall_clock_time() {
        let at_s = wall_clock_s() + 0.05;
        SystemClock.sleep_until_s(at_s).await;
        assert!(SystemClock.now_s() >= at_s);
    }
}
