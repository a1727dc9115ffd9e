//! State queries, as Kafka Streams' interactive queries: a process's members each
//! have an inbox; `/state/{stage}/{what}/{key}` on the process's `/metrics` port asks
//! every member of the stage in it, and the one whose task holds the key's partition
//! answers from its live state, between two batches of its loop. The jobmanager asks
//! every taskmanager (docs/notifications.md, "Asking the pipeline why").

use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a member says to a query.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Found(serde_json::Value),
    /// Its task of the key's partition holds nothing for the key.
    Unknown,
    /// It has no task of the key's partition (another member has, or it is moving).
    NotHere,
    /// The stage answers no such query.
    NotQueryable,
}

/// A query waiting for its member.
pub struct Asked {
    pub what: String,
    pub key: String,
    reply: Sender<Reply>,
}

impl Asked {
    pub fn answer(self, reply: Reply) {
        // The asker may have given up waiting.
        let _ = self.reply.send(reply);
    }
}

/// A member's queries, until it takes them.
#[derive(Clone, Default)]
pub struct Inbox(Arc<Mutex<Vec<Asked>>>);

/// Queries a member that does not take them (a standby) keeps at most.
const MAX_WAITING: usize = 64;

impl Inbox {
    pub fn take(&self) -> Vec<Asked> {
        std::mem::take(&mut *self.0.lock().expect("inbox"))
    }

    fn put(&self, asked: Asked) {
        let mut waiting = self.0.lock().expect("inbox");
        if waiting.len() >= MAX_WAITING {
            waiting.remove(0);
        }
        waiting.push(asked);
    }
}

/// Every member's inbox in a process, by stage.
#[derive(Default)]
pub struct StateQueries {
    inboxes: Mutex<Vec<(String, Inbox)>>,
}

impl StateQueries {
    pub fn new() -> Arc<StateQueries> {
        Arc::default()
    }

    /// A new member's inbox.
    pub fn inbox(&self, stage: &str) -> Inbox {
        let inbox = Inbox::default();
        self.inboxes.lock().expect("inboxes").push((stage.to_string(), inbox.clone()));
        inbox
    }

    /// Asks every member of `stage` in the process, and waits up to `within` for the
    /// best reply: found, else unknown, else not here. `None`: no member of the stage
    /// runs here.
    pub fn ask(&self, stage: &str, what: &str, key: &str, within: Duration) -> Option<Reply> {
        let (tx, rx) = channel();
        let mut asked = 0;
        for (_, inbox) in self.inboxes.lock().expect("inboxes").iter().filter(|(s, _)| s == stage) {
            inbox.put(Asked { what: what.to_string(), key: key.to_string(), reply: tx.clone() });
            asked += 1;
        }
        if asked == 0 {
            return None;
        }
        let deadline = Instant::now() + within;
        let mut best = Reply::NotHere;
        for _ in 0..asked {
            let Ok(reply) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) else { break };
            match reply {
                Reply::Found(_) => return Some(reply),
                Reply::Unknown | Reply::NotQueryable => best = reply,
                Reply::NotHere => {}
            }
        }
        Some(best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_member_with_the_key_answers_and_the_others_step_aside() {
        let queries = StateQueries::new();
        let (a, b) = (queries.inbox("payment-anomalies"), queries.inbox("payment-anomalies"));
        let _other = queries.inbox("join-enrich");
        let members = std::thread::spawn(move || loop {
            let (mut x, mut y) = (a.take(), b.take());
            if x.is_empty() && y.is_empty() {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            let done = x.iter().any(|q| q.key == "last");
            x.drain(..).for_each(|q| q.answer(Reply::NotHere));
            y.drain(..).for_each(|q| {
                let reply =
                    if q.key == "cust-1" { Reply::Found(serde_json::json!({"count": 5})) } else { Reply::Unknown };
                q.answer(reply)
            });
            if done {
                break;
            }
        });
        let within = Duration::from_secs(5);
        assert_eq!(
            queries.ask("payment-anomalies", "customers", "cust-1", within),
            Some(Reply::Found(serde_json::json!({"count": 5})))
        );
        assert_eq!(queries.ask("payment-anomalies", "customers", "last", within), Some(Reply::Unknown));
        assert_eq!(queries.ask("device-router", "customers", "x", within), None, "no member of it here");
        members.join().unwrap();
    }

    #[test]
    fn a_member_that_does_not_answer_is_not_here() {
        let queries = StateQueries::new();
        let standby = queries.inbox("payment-anomalies");
        assert_eq!(queries.ask("payment-anomalies", "customers", "c", Duration::from_millis(20)), Some(Reply::NotHere));
        for _ in 0..2 * MAX_WAITING {
            queries.ask("payment-anomalies", "customers", "c", Duration::ZERO);
        }
        assert_eq!(standby.take().len(), MAX_WAITING, "a standby's inbox stays bounded");
    }
}
