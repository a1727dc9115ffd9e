//! The task core driven without Kafka through its test driver (`core::driver`):
//! records, markers, commits, aborts and rebalances in; outputs, markers, changelog
//! writes and offsets out.

mod idleness;
mod keying;
mod markers;
mod merge_faults;
mod recovery;
mod skew;

use std::collections::BTreeMap;

use vigil_datagen::planted;
use vigil_kafka::core::driver::{all_slots, finish, sorted, Broker, Member, PARTITIONS};
use vigil_kafka::core::{Incoming, Slot};
use vigil_model::{Millis, Text};
use vigil_operators::stages::JoinEnrichStage;
use vigil_operators::JoinInput;
use vigil_stream::partition::partition_for;

/// The planted orders and payments in event-time order, each on the partition of its
/// order id, with its offset there: (slot, offset, record, event time).
fn join_input() -> Vec<(Slot, i64, JoinInput, Millis)> {
    let mut records: Vec<(usize, Text, JoinInput, Millis)> = planted::orders()
        .into_iter()
        .map(|o| (0, o.order_id.clone(), o.order_ts, JoinInput::Order(o)))
        .chain(planted::payments().into_iter().map(|p| (1, p.order_id.clone(), p.payment_ts, JoinInput::Payment(p))))
        .map(|(input, key, ts, r)| (input, key, r, ts))
        .collect();
    records.sort_by_key(|r| r.3);
    let mut next: BTreeMap<Slot, i64> = BTreeMap::new();
    records
        .into_iter()
        .map(|(input, key, record, ts)| {
            let slot = (input, partition_for(key.as_bytes(), PARTITIONS) as i32);
            let offset = next.entry(slot).or_insert(0);
            *offset += 1;
            (slot, *offset - 1, record, ts)
        })
        .collect()
}

fn record<I>(record: I, event_ts: Millis) -> Incoming<I> {
    Incoming::Record { record, event_ts, stamp: None }
}

/// The join over the planted input with one member, committing every `every`
/// records, ended (every partition finished).
fn join_uninterrupted() -> Vec<String> {
    let mut broker = Broker::default();
    let mut m = Member::new(JoinEnrichStage);
    m.assign(&broker, &all_slots(JOIN_INPUTS));
    m.hear_idle_writers();
    for (slot, offset, r, ts) in join_input() {
        m.feed(slot, offset, record(r, ts));
    }
    finish(&mut [&mut m], &mut broker);
    sorted(&m.delivered)
}

/// The join's inputs: orders, payments, and their two repartition topics.
const JOIN_INPUTS: usize = 4;

/// Order `o{i}` at `ts`, as join-enrich reads it.
fn order_at(ts: i64, i: i64) -> Incoming<JoinInput> {
    let o = vigil_model::Order {
        order_id: format!("o{i}").into(),
        customer_id: "c".into(),
        order_amount: 1.0,
        order_ts: ts,
        country: "US".into(),
    };
    record(JoinInput::Order(o), ts)
}

/// Payment `p{i}` of order `o{i}` at `ts`.
fn payment_at(ts: i64, i: i64) -> Incoming<JoinInput> {
    let p = vigil_model::Payment {
        payment_id: format!("p{i}").into(),
        order_id: format!("o{i}").into(),
        paid_amount: 1.0,
        payment_ts: ts,
        method: "card".into(),
    };
    record(JoinInput::Payment(p), ts)
}
