//! Two pipelines on one cluster, each in its own namespace (`[topics] namespace`):
//! their topics, consumer groups, transactional ids and registry subjects apart, so
//! neither reads, commits or fences the other's. Needs the broker and registry
//! `scripts/test.sh` starts.

mod support;

use std::time::Duration;

use support::{assert_same, reference, send_line, Running, Stack, ONE_AT_A_TIME};
use vigil_datagen::Dataset;
use vigil_ingest::MergedInput;

const RUN_PREFIX: &str = "ns-";

/// Produces a dataset to a stack's input topics, and ends them.
fn send(stack: &Stack, dataset: (u64, u64)) {
    let producer = stack.producer();
    for line in MergedInput::planted(dataset.0, dataset.1).map(Result::unwrap) {
        send_line(&producer, &line);
    }
    producer.finish().unwrap();
    producer.flush().unwrap();
}

#[test]
#[ignore = "needs Kafka and a schema registry: run scripts/test.sh"]
fn two_namespaces_on_one_cluster_each_see_their_own_input_only() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let plain = Stack::fresh(RUN_PREFIX);
    let run = plain.run.clone();
    let (blue, green) = (plain.namespaced(&format!("blue{run}")), plain.namespaced(&format!("green{run}")));
    // Different inputs: the planted scenarios with other normal traffic beside them.
    let (blue_data, green_data) = ((1, 7), (2, 11));
    let services: Vec<Running> = blue.spawn_all().into_iter().chain(green.spawn_all()).collect();
    send(&blue, blue_data);
    send(&green, green_data);
    let blue_expected = reference(Dataset::planted(blue_data.0, blue_data.1));
    let green_expected = reference(Dataset::planted(green_data.0, green_data.1));
    assert_ne!(blue_expected, green_expected, "the two inputs give different results");
    let (blue_got, blue_dead) = blue.wait_for(&blue_expected, Duration::from_secs(120));
    let (green_got, green_dead) = green.wait_for(&green_expected, Duration::from_secs(120));
    drop(services);
    assert_same(&blue_got, &blue_expected, "namespace blue: Kafka output differs from the embedded runtime");
    assert_same(&green_got, &green_expected, "namespace green: Kafka output differs from the embedded runtime");
    assert_eq!((blue_dead.len(), green_dead.len()), (4, 4), "each namespace's four planted bad lines");
    // Outside both namespaces, nothing was written.
    let (outside, outside_dead) = plain.outputs();
    assert!(outside.is_empty() && outside_dead.is_empty(), "records outside the namespaces: {outside:?}");
    // The tools follow the namespace: a reset plans blue's own groups.
    let planned = blue.admin(&["reset", "--all", "--dry-run"]).output().unwrap();
    let said = String::from_utf8_lossy(&planned.stdout);
    assert!(said.contains(&format!("group blue{run}.vigil-join-enrich ")), "{said}");
    assert!(!said.contains("group vigil-join-enrich "), "{said}");
}
