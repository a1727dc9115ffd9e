//! Delivering one alert to one channel: paced by its rate limit, retried with
//! back-off while its breaker lets calls through, given up on (a dead letter) on a
//! permanent failure or once retrying has lasted `give_up_after`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::alert::Alert;
use super::channels::{Channel, Failure};
use super::policy::{Backoff, Breaker, RateLimit};

/// How one delivery ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Delivered, after this many retries.
    Delivered { retries: u32 },
    /// Failed for good: the reason, for the dead letter.
    Failed { retries: u32, reason: String },
    /// The process is stopping: not delivered, and not to be committed.
    Interrupted,
}

pub struct Deliverer {
    pub channel: Box<dyn Channel>,
    limit: Option<RateLimit>,
    breaker: Breaker,
    backoff: Backoff,
    give_up_after: Duration,
}

impl Deliverer {
    pub fn new(
        channel: Box<dyn Channel>,
        limit: Option<RateLimit>,
        breaker: Breaker,
        backoff: Backoff,
        give_up_after: Duration,
    ) -> Deliverer {
        Deliverer { channel, limit, breaker, backoff, give_up_after }
    }

    pub fn breaker_open(&self) -> bool {
        self.breaker.allow(Instant::now()).is_err()
    }

    /// Delivers `alert`; `alive` is called while it waits, to show the loop is not stuck.
    pub fn deliver(&mut self, alert: &Alert, stopping: &AtomicBool, alive: &dyn Fn()) -> Outcome {
        let started = Instant::now();
        let mut retries = 0;
        loop {
            let now = Instant::now();
            let wait = match (self.breaker.allow(now), self.limit.as_mut().map(|l| l.take(now))) {
                (Err(wait), _) | (Ok(()), Some(Err(wait))) => Some(wait),
                _ => None,
            };
            if let Some(wait) = wait {
                if !pause(wait, stopping, alive) {
                    return Outcome::Interrupted;
                }
                continue;
            }
            let reason = match self.channel.deliver(alert) {
                Ok(()) => {
                    self.breaker.succeeded();
                    return Outcome::Delivered { retries };
                }
                Err(Failure::Permanent(reason)) => return Outcome::Failed { retries, reason },
                Err(Failure::Retry(reason)) => reason,
            };
            self.breaker.failed(Instant::now());
            if started.elapsed() >= self.give_up_after {
                let reason =
                    format!("still failing after {} s and {retries} retries: {reason}", started.elapsed().as_secs());
                return Outcome::Failed { retries, reason };
            }
            tracing::warn!(channel = self.channel.name(), key = %alert.idempotency_key(), retries, "{reason}; trying again");
            if !pause(self.backoff.delay(retries, fastrand::f64()), stopping, alive) {
                return Outcome::Interrupted;
            }
            retries += 1;
        }
    }
}

/// Sleeps `wait` in short steps; false if the process began stopping meanwhile.
fn pause(wait: Duration, stopping: &AtomicBool, alive: &dyn Fn()) -> bool {
    let until = Instant::now() + wait;
    while Instant::now() < until {
        alive();
        if stopping.load(Ordering::SeqCst) {
            return false;
        }
        std::thread::sleep((until - Instant::now()).min(Duration::from_millis(50)));
    }
    !stopping.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_model::topology::HEALTH_ALERTS;

    /// Answers from a script, then succeeds.
    struct Scripted(Vec<Failure>, u32);

    impl Channel for Scripted {
        fn name(&self) -> &str {
            "scripted"
        }
        fn deliver(&mut self, _: &Alert) -> Result<(), Failure> {
            self.1 += 1;
            if self.0.is_empty() {
                Ok(())
            } else {
                Err(self.0.remove(0))
            }
        }
    }

    fn alert() -> Alert {
        Alert::from_json(&HEALTH_ALERTS, r#"{"reason": "late_event_spike", "window_start": "2024-01-01T00:00:00Z"}"#)
            .unwrap()
    }

    fn deliverer(script: Vec<Failure>, give_up_after: Duration) -> Deliverer {
        let backoff = Backoff { first: Duration::from_millis(1), max: Duration::from_millis(2) };
        let breaker = Breaker::new(100, Duration::from_millis(1));
        Deliverer::new(Box::new(Scripted(script, 0)), None, breaker, backoff, give_up_after)
    }

    #[test]
    fn retries_until_delivered_and_gives_up_on_a_permanent_failure() {
        let stop = AtomicBool::new(false);
        let retry = || Failure::Retry("503".into());
        let mut d = deliverer(vec![retry(), retry()], Duration::from_secs(60));
        assert_eq!(d.deliver(&alert(), &stop, &|| ()), Outcome::Delivered { retries: 2 });
        let mut d = deliverer(vec![retry(), Failure::Permanent("400".into())], Duration::from_secs(60));
        assert_eq!(d.deliver(&alert(), &stop, &|| ()), Outcome::Failed { retries: 1, reason: "400".into() });
        let mut d = deliverer(vec![retry(); 1000], Duration::ZERO);
        assert!(matches!(d.deliver(&alert(), &stop, &|| ()), Outcome::Failed { retries: 0, .. }), "retries exhausted");
    }

    #[test]
    fn a_stopping_process_leaves_the_alert_undelivered() {
        let stop = AtomicBool::new(true);
        let mut d = deliverer(vec![Failure::Retry("down".into())], Duration::from_secs(60));
        assert_eq!(d.deliver(&alert(), &stop, &|| ()), Outcome::Interrupted);
    }
}
