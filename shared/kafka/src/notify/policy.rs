//! How hard a channel is pushed: retries with exponential back-off and jitter, a
//! rate limit, and a circuit breaker that stops calling a receiver that keeps
//! failing. Pure: time is passed in, so tests drive it.

use std::time::{Duration, Instant};

/// Waits between attempts: `first`, doubling up to `max`, each drawn between half
/// and all of it so that many notifiers retrying one receiver spread out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
}

impl Backoff {
    /// The wait after failed attempt `attempt` (0 for the first); `draw` is uniform
    /// in [0, 1).
    pub fn delay(&self, attempt: u32, draw: f64) -> Duration {
        let full = self.first.saturating_mul(2u32.saturating_pow(attempt.min(30))).min(self.max);
        full.mul_f64(0.5 + draw.clamp(0.0, 1.0) / 2.0)
    }
}

/// A token bucket: `per_second` deliveries on average, `burst` at once.
#[derive(Debug, Clone)]
pub struct RateLimit {
    per_second: f64,
    burst: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl RateLimit {
    pub fn new(per_second: f64, burst: u32) -> RateLimit {
        let burst = f64::from(burst.max(1));
        RateLimit { per_second, burst, tokens: burst, last: None }
    }

    /// Takes a token at `now`, or says how long until one is there.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        if let Some(last) = self.last {
            let earned = now.saturating_duration_since(last).as_secs_f64() * self.per_second;
            self.tokens = (self.tokens + earned).min(self.burst);
        }
        self.last = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.per_second))
        }
    }
}

/// Closed while calls succeed; open, refusing calls, for `open_for` after
/// `threshold` failures in a row; then one trial call (half-open) closes it again
/// or opens it anew.
#[derive(Debug, Clone)]
pub struct Breaker {
    threshold: u32,
    open_for: Duration,
    failures: u32,
    open_until: Option<Instant>,
}

/// Where a breaker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
}

impl Breaker {
    pub fn new(threshold: u32, open_for: Duration) -> Breaker {
        Breaker { threshold: threshold.max(1), open_for, failures: 0, open_until: None }
    }

    pub fn state(&self, now: Instant) -> BreakerState {
        match self.open_until {
            None => BreakerState::Closed,
            Some(until) if now < until => BreakerState::Open,
            Some(_) => BreakerState::HalfOpen,
        }
    }

    /// Whether a call may go at `now`; if not, how long until it may.
    pub fn allow(&self, now: Instant) -> Result<(), Duration> {
        match self.open_until {
            Some(until) if now < until => Err(until - now),
            _ => Ok(()),
        }
    }

    pub fn succeeded(&mut self) {
        self.failures = 0;
        self.open_until = None;
    }

    pub fn failed(&mut self, now: Instant) {
        self.failures += 1;
        if self.failures >= self.threshold || self.open_until.is_some() {
            self.open_until = Some(now + self.open_for);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn back_off_doubles_to_its_ceiling_with_jitter_of_at_most_half() {
        let b = Backoff { first: Duration::from_millis(100), max: Duration::from_secs(2) };
        assert_eq!(b.delay(0, 0.999_999).as_millis(), 99);
        assert_eq!(b.delay(0, 0.0), Duration::from_millis(50));
        assert_eq!(b.delay(3, 0.0), Duration::from_millis(400));
        assert_eq!(b.delay(10, 0.0), Duration::from_secs(1), "half of the ceiling at least");
        assert_eq!(b.delay(u32::MAX, 0.999_999).as_millis(), 1_999);
    }

    #[test]
    fn the_rate_limit_lets_a_burst_through_then_paces() {
        let start = Instant::now();
        let mut limit = RateLimit::new(10.0, 2);
        assert!(limit.take(start).is_ok() && limit.take(start).is_ok());
        let wait = limit.take(start).unwrap_err();
        assert_eq!(wait.as_millis(), 100);
        assert!(limit.take(start + Duration::from_millis(100)).is_ok());
        assert!(limit.take(start + Duration::from_millis(150)).is_err());
        assert!(limit.take(start + Duration::from_secs(60)).is_ok(), "tokens refill");
        assert!(limit.take(start + Duration::from_secs(60)).is_ok());
        assert!(limit.take(start + Duration::from_secs(60)).is_err(), "but not past the burst");
    }

    #[test]
    fn the_breaker_opens_after_failures_in_a_row_and_a_trial_decides() {
        let t = Instant::now();
        let open_for = Duration::from_secs(10);
        let mut breaker = Breaker::new(3, open_for);
        breaker.failed(t);
        breaker.failed(t);
        breaker.succeeded();
        breaker.failed(t);
        breaker.failed(t);
        assert_eq!(breaker.state(t), BreakerState::Closed, "a success starts the count over");
        breaker.failed(t);
        assert_eq!(breaker.state(t), BreakerState::Open);
        assert_eq!(breaker.allow(t + Duration::from_secs(4)), Err(Duration::from_secs(6)));
        let trial = t + open_for;
        assert_eq!(breaker.state(trial), BreakerState::HalfOpen);
        assert!(breaker.allow(trial).is_ok());
        breaker.failed(trial);
        assert_eq!(breaker.state(trial), BreakerState::Open, "a failed trial opens it again at once");
        breaker.succeeded();
        assert_eq!(breaker.state(trial), BreakerState::Closed);
    }
}
