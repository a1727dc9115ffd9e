//! Commits, aborts, rebalances and restore: whatever the member lived through, the
//! join delivers what one uninterrupted member does.

use std::collections::BTreeMap;

use vigil_kafka::core::driver::{all_slots, commit_all, finish, sorted, Broker, Member};
use vigil_kafka::core::Slot;
use vigil_model::Millis;
use vigil_operators::stages::JoinEnrichStage;
use vigil_operators::JoinInput;

use crate::{join_input, join_uninterrupted, record, JOIN_INPUTS};

#[test]
fn an_abort_before_the_first_commit_replays_against_fresh_clocks() {
    let expected = join_uninterrupted();
    let input = join_input();
    let half = input.len() / 2;
    let mut broker = Broker::default();
    let mut m = Member::new(JoinEnrichStage);
    m.assign(&broker, &all_slots(JOIN_INPUTS));
    m.hear_idle_writers();
    for (slot, offset, r, ts) in input[..half].iter().cloned() {
        m.feed(slot, offset, record(r, ts));
    }
    // No commit yet: the abort sends every partition back to the beginning, and the
    // source clocks must forget how far they ran, or the replay is all late.
    let seeks = m.abort(&broker);
    assert!(!seeks.is_empty() && seeks.iter().all(|(_, offset)| offset.is_none()), "{seeks:?}");
    m.hear_idle_writers();
    for (slot, offset, r, ts) in input {
        m.feed(slot, offset, record(r, ts));
    }
    finish(&mut [&mut m], &mut broker);
    assert_eq!(sorted(&m.delivered), expected);
}

/// The join's input, and one member that committed its first third and then read
/// the second, uncommitted.
struct TwoThirdsRead {
    input: Vec<(Slot, i64, JoinInput, Millis)>,
    broker: Broker,
    m: Member<JoinEnrichStage>,
    /// The offsets committed at one third.
    at_a_third: BTreeMap<Slot, i64>,
}

fn two_thirds_read() -> TwoThirdsRead {
    let input = join_input();
    let mut broker = Broker::default();
    let mut m = Member::new(JoinEnrichStage);
    m.assign(&broker, &all_slots(JOIN_INPUTS));
    m.hear_idle_writers();
    let (third, two_thirds) = (input.len() / 3, 2 * input.len() / 3);
    for (slot, offset, r, ts) in input[..third].iter().cloned() {
        m.feed(slot, offset, record(r, ts));
    }
    commit_all(&mut [&mut m], &mut broker);
    for (slot, offset, r, ts) in input[third..two_thirds].iter().cloned() {
        m.feed(slot, offset, record(r, ts));
    }
    let at_a_third = broker.offsets.clone();
    TwoThirdsRead { input, broker, m, at_a_third }
}

/// Feeds the input from where the member's core says each partition was committed.
fn feed_from_committed(m: &mut Member<JoinEnrichStage>, input: &[(Slot, i64, JoinInput, Millis)]) {
    for (slot, offset, r, ts) in input.iter().cloned() {
        if offset >= m.core.committed_offset(slot).unwrap_or(0) {
            m.feed(slot, offset, record(r, ts));
        }
    }
}

#[test]
fn an_abort_after_commits_goes_back_to_the_last_one() {
    let TwoThirdsRead { input, mut broker, mut m, at_a_third } = two_thirds_read();
    let seeks = m.abort(&broker);
    // Read again from where each partition was committed.
    for (slot, offset) in &seeks {
        assert_eq!(*offset, at_a_third.get(slot).copied(), "{slot:?}");
    }
    feed_from_committed(&mut m, &input);
    finish(&mut [&mut m], &mut broker);
    assert_eq!(sorted(&m.delivered), join_uninterrupted());
}

#[test]
fn a_commit_reported_failed_that_completed_is_not_redone() {
    let TwoThirdsRead { input, mut broker, mut m, .. } = two_thirds_read();
    m.commit_unbeknownst(&mut broker);
    let seeks = m.abort(&broker);
    // The state restored is the completed commit's: so are the offsets to read from.
    for (slot, offset) in &seeks {
        assert_eq!(*offset, broker.offsets.get(slot).copied(), "{slot:?}");
    }
    assert!(!m.corrections.is_empty());
    feed_from_committed(&mut m, &input);
    finish(&mut [&mut m], &mut broker);
    assert_eq!(sorted(&m.delivered), join_uninterrupted());
}

/// A consumer whose fetch position disagrees with the tasks' (its own read of the
/// group's offsets at an assignment, say) delivers records again that were counted
/// already: the shell skips every record before the next offset the core counts.
#[test]
fn records_delivered_again_are_told_by_the_next_offset_to_count() {
    let TwoThirdsRead { input, mut broker, mut m, .. } = two_thirds_read();
    for (slot, offset, ..) in &input[..2 * input.len() / 3] {
        assert!(m.core.next_to_count(*slot) > Some(*offset), "{slot:?} {offset}");
    }
    // Everything delivered again from the first offsets, the rest with it.
    for (slot, offset, r, ts) in input.iter().cloned() {
        if m.core.next_to_count(slot).is_none_or(|next| offset >= next) {
            m.feed(slot, offset, record(r, ts));
        }
    }
    finish(&mut [&mut m], &mut broker);
    assert_eq!(sorted(&m.delivered), join_uninterrupted());
}

#[test]
fn group_offsets_left_behind_the_state_are_read_from_the_states() {
    let TwoThirdsRead { input, mut broker, mut m, at_a_third } = two_thirds_read();
    commit_all(&mut [&mut m], &mut broker);
    // An earlier transaction's offset commit lands after the last one (no KIP-890),
    // then the member restarts: its state is at two thirds, the group's offsets at one.
    let state_at = std::mem::replace(&mut broker.offsets, at_a_third);
    let mut next = Member::new(JoinEnrichStage);
    next.delivered = std::mem::take(&mut m.delivered);
    next.assign(&broker, &all_slots(JOIN_INPUTS));
    let corrected: BTreeMap<Slot, i64> = next.corrections.iter().map(|c| (c.slot, c.changelog)).collect();
    let moved: BTreeMap<Slot, i64> =
        state_at.iter().filter(|(s, o)| broker.offsets.get(s) != Some(o)).map(|(s, o)| (*s, *o)).collect();
    assert!(!moved.is_empty());
    assert_eq!(corrected, moved);
    feed_from_committed(&mut next, &input);
    finish(&mut [&mut next], &mut broker);
    assert_eq!(sorted(&next.delivered), join_uninterrupted());
}

#[test]
fn revoked_partitions_restored_by_two_members_give_one_members_result() {
    let expected = join_uninterrupted();
    let input = join_input();
    let half = input.len() / 2;
    let mut broker = Broker::default();
    let mut first = Member::new(JoinEnrichStage);
    first.assign(&broker, &all_slots(JOIN_INPUTS));
    first.hear_idle_writers();
    for (slot, offset, r, ts) in input[..half].iter().cloned() {
        first.feed(slot, offset, record(r, ts));
    }
    commit_all(&mut [&mut first], &mut broker);
    // Uncommitted work, then a rebalance: it is dropped, the next owners redo it.
    for (slot, offset, r, ts) in input[half..half + 10].iter().cloned() {
        first.feed(slot, offset, record(r, ts));
    }
    first.pending.clear();
    first.core.revoke_all();
    let mine = |p: i32| p < 2;
    let (a, b): (Vec<Slot>, Vec<Slot>) = all_slots(JOIN_INPUTS).iter().partition(|(_, p)| mine(*p));
    let mut second = Member::new(JoinEnrichStage);
    first.assign(&broker, &a);
    second.assign(&broker, &b);
    for (slot, offset, r, ts) in input {
        if offset < broker.offsets.get(&slot).copied().unwrap_or(0) {
            continue;
        }
        let member = if mine(slot.1) { &mut first } else { &mut second };
        member.feed(slot, offset, record(r, ts));
    }
    finish(&mut [&mut first, &mut second], &mut broker);
    let mut all = first.delivered;
    all.extend(second.delivered);
    assert_eq!(sorted(&all), expected);
}
