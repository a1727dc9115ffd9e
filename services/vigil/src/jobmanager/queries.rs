//! `GET /jobs/{id}/state/customers/{customer_id}`: a customer's amount statistics and
//! velocity window, answered by the taskmanager whose payment-anomalies member holds
//! the customer's partition (Kafka Streams' interactive queries). The jobmanager asks
//! every live taskmanager's `/state/…`; the owner answers from its live state.

use std::time::Duration;

use serde_json::Value;

/// What the taskmanagers said.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The owner's answer, and which taskmanager gave it.
    Found { taskmanager: String, state: Value },
    /// The owner holds nothing for the key.
    Unknown,
    /// Nobody holds the key's partition now: it is moving between members.
    Moving,
}

/// Asks each of `taskmanagers` (id, base URL) for `key` under `stage`/`what`.
pub fn ask(taskmanagers: &[(String, String)], stage: &str, what: &str, key: &str) -> Answer {
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(5)).build().expect("an HTTP client");
    let mut unknown = false;
    for (id, base) in taskmanagers {
        let Ok(mut url) = reqwest::Url::parse(base) else { continue };
        url.path_segments_mut().expect("an http URL").extend(["state", stage, what, key]);
        let Ok(response) = client.get(url).send() else { continue };
        match response.status().as_u16() {
            200 => {
                if let Ok(state) = response.json::<Value>() {
                    return Answer::Found { taskmanager: id.clone(), state };
                }
            }
            404 => unknown = true,
            _ => {}
        }
    }
    if unknown {
        Answer::Unknown
    } else {
        Answer::Moving
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_taskmanager_means_the_partition_is_moving() {
        assert_eq!(ask(&[], "payment-anomalies", "customers", "c"), Answer::Moving);
        let unreachable = [("tm-1".to_string(), "http://127.0.0.1:9".to_string())];
        assert_eq!(ask(&unreachable, "payment-anomalies", "customers", "c"), Answer::Moving);
    }
}
