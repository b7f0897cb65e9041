//! A hook's `settings`: a token bucket in front of its runs (Go's `x/time/rate`, as shell-operator uses
//! it): `executionBurst` runs at once (at least one), then one per `executionMinInterval`; no interval is
//! no limit.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::controller::rules::shell::config::Settings;

pub struct Limiter {
    every: Duration,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl Limiter {
    pub fn new(settings: Settings) -> Self {
        let burst = settings.burst.max(1) as f64;
        Limiter { every: settings.min_interval, burst, state: Mutex::new((burst, Instant::now())) }
    }

    /// Waits for a token, and takes it.
    pub async fn wait(&self) {
        if self.every.is_zero() {
            return;
        }
        let wait = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            let (tokens, last) = *state;
            let tokens =
                (tokens + now.duration_since(last).as_secs_f64() / self.every.as_secs_f64()).min(self.burst) - 1.0;
            *state = (tokens, now);
            if tokens >= 0.0 { Duration::ZERO } else { self.every.mul_f64(-tokens) }
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_then_one_per_interval() {
        let limiter = Limiter::new(Settings { min_interval: Duration::from_secs(5), burst: 2 });
        let start = Instant::now();
        let mut at = Vec::new();
        for _ in 0..4 {
            limiter.wait().await;
            at.push(start.elapsed().as_secs());
        }
        assert_eq!(at, [0, 0, 5, 10]);
    }
}
