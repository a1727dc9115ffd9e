//! Skew: a partition that runs too far ahead of its task's other partitions is paused
//! until they catch up.

use vigil_kafka::core::driver::{all_slots, Broker, Member, PARTITIONS};
use vigil_kafka::core::Flow;
use vigil_model::Config;
use vigil_operators::stages::JoinEnrichStage;
use vigil_stream::partition::partition_for;

use crate::{order_at, payment_at, JOIN_INPUTS};

#[test]
fn a_partition_far_ahead_of_its_task_is_paused_until_the_others_catch_up() {
    let mut m = Member::new(JoinEnrichStage);
    m.assign(&Broker::default(), &all_slots(JOIN_INPUTS));
    let (orders, payments) = ((0, 1), (1, 1));
    let t0 = 1_700_000_000_000;
    // A step of event time: the allowed skew is 60 of them.
    let step = Config::default().runtime.max_partition_skew_ms as i64 / 60;
    // Keyed: each order id on partition 1 (unkeyed input goes through the merge,
    // which never pauses its writers' sources).
    let ids: Vec<i64> =
        (0..).filter(|i| partition_for(format!("o{i}").as_bytes(), PARTITIONS) == 1).take(121).collect();
    let order = |i: i64| order_at(t0 + i * step, ids[i as usize]);
    let payment = |i: i64| payment_at(t0 + i * step, ids[i as usize]);
    // Nothing comes through the repartition topics (every writer says it is idle);
    // orders stay at t0 while payments run 120 steps ahead.
    m.hear_idle_writers();
    m.feed(orders, 0, order(0));
    for i in 0..120 {
        m.feed(payments, i, payment(i));
    }
    let flow = m.core.flow();
    assert_eq!(flow.pause, vec![payments], "payments run about twice the skew ahead of the task");
    assert!(m.core.flow().pause.is_empty(), "paused once, not again");
    // Orders catch up to 70 steps behind payments: still paused (hysteresis).
    m.feed(orders, 1, order(50));
    assert_eq!(m.core.flow(), Flow::default());
    m.feed(orders, 2, order(100));
    assert_eq!(m.core.flow().resume, vec![payments], "back within half the skew: resumed");
}
