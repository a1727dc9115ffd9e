//! Waiting out a broker that cannot be reached for a moment. With several bootstrap
//! brokers, a client's first request may go to one that is down and fail at once
//! (librdkafka does not try the next one for it); the same request a moment later
//! goes to a broker that answers. A cluster still starting fails the same way.

use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::types::RDKafkaErrorCode;
use tracing::warn;

/// How long a metadata or offset query waits for some broker to answer.
pub const QUERY_PATIENCE: Duration = Duration::from_secs(30);

/// Between two tries.
const PAUSE: Duration = Duration::from_millis(250);

/// An error that says no broker could be reached (yet), not that the request was wrong.
pub fn unreachable(e: &KafkaError) -> bool {
    use RDKafkaErrorCode::{AllBrokersDown, BrokerTransportFailure, OperationTimedOut};
    matches!(e, KafkaError::MetadataFetch(AllBrokersDown | BrokerTransportFailure | OperationTimedOut))
}

/// Calls `query` (given the time left as its timeout) until it answers with anything
/// but "unreachable", or until `within` has passed; then its last answer.
pub fn patiently<T>(what: &str, within: Duration, mut query: impl FnMut(Duration) -> KafkaResult<T>) -> KafkaResult<T> {
    let give_up = Instant::now() + within;
    let mut tries = 0;
    loop {
        let left = give_up.saturating_duration_since(Instant::now()).max(PAUSE);
        match query(left) {
            Err(e) if unreachable(&e) && Instant::now() + PAUSE < give_up => {
                tries += 1;
                if tries == 1 {
                    warn!(error = %e, "{what}: no broker answered; trying again for up to {within:?}");
                }
                std::thread::sleep(PAUSE);
            }
            answer => return answer,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_broker_that_cannot_be_reached_is_waited_for() {
        assert!(unreachable(&KafkaError::MetadataFetch(RDKafkaErrorCode::AllBrokersDown)));
        assert!(unreachable(&KafkaError::MetadataFetch(RDKafkaErrorCode::BrokerTransportFailure)));
        assert!(!unreachable(&KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition)));
        assert!(!unreachable(&KafkaError::MessageProduction(RDKafkaErrorCode::AllBrokersDown)));
    }

    #[test]
    fn a_query_that_first_reaches_a_broker_that_is_down_is_asked_again() {
        let mut answers =
            vec![Ok(3), Err(KafkaError::MetadataFetch(RDKafkaErrorCode::BrokerTransportFailure))].into_iter().rev();
        let mut asked = 0;
        let answer = patiently("a test", Duration::from_secs(60), |_| {
            asked += 1;
            answers.next().unwrap()
        });
        assert_eq!((answer, asked), (Ok(3), 2));
    }

    #[test]
    fn a_wrong_request_fails_at_once() {
        let mut asked = 0;
        let answer: KafkaResult<()> = patiently("a test", Duration::from_secs(60), |_| {
            asked += 1;
            Err(KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition))
        });
        assert_eq!(asked, 1);
        assert!(answer.is_err());
    }

    #[test]
    fn an_unreachable_cluster_is_given_up_on() {
        let answer: KafkaResult<()> = patiently("a test", Duration::ZERO, |timeout| {
            assert_eq!(timeout, PAUSE, "a query is given some time even at the end");
            Err(KafkaError::MetadataFetch(RDKafkaErrorCode::AllBrokersDown))
        });
        assert_eq!(answer, Err(KafkaError::MetadataFetch(RDKafkaErrorCode::AllBrokersDown)));
    }
}
