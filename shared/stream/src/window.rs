//! Event-time windows: tumbling and sliding assignment, and keyed window state that
//! fires when the watermark passes a window's end, re-fires a window as a new
//! revision when a late-but-allowed event changes it, and forgets a window once the
//! allowed lateness is over.
//!
//! State is kept per key as panes (slide-sized slices of aggregate); a window's
//! result is the merge of its panes, so a sliding event costs one pane update, not
//! one update per overlapping window.

use std::hash::Hash;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::changelog::{StateError, StateWrite};
use crate::panes::Panes;
use crate::state::KeyedState;
use crate::timers::TimerQueue;
use crate::Millis;

/// `[start, end)` in event time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Window {
    pub start: Millis,
    pub end: Millis,
}

/// Windows of `size` starting every `slide` (aligned to the epoch, as Flink's);
/// tumbling when `slide == size`. `size` must be a whole multiple of `slide`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindows {
    size: Millis,
    slide: Millis,
}

impl SlidingWindows {
    pub fn tumbling(size: Millis) -> Self {
        Self::sliding(size, size)
    }

    pub fn sliding(size: Millis, slide: Millis) -> Self {
        assert!(slide > 0 && size > 0 && size % slide == 0, "window size {size} must be a multiple of slide {slide}");
        SlidingWindows { size, slide }
    }

    pub fn size(&self) -> Millis {
        self.size
    }

    /// Start of the slide-sized pane holding `ts`.
    pub fn pane_of(&self, ts: Millis) -> Millis {
        ts - ts.rem_euclid(self.slide)
    }

    /// Every window that holds `ts`, earliest first.
    pub fn windows_of(&self, ts: Millis) -> impl Iterator<Item = Window> {
        let last_start = self.pane_of(ts);
        let (size, slide) = (self.size, self.slide);
        let first_start = last_start - size + slide;
        (0..size / slide).map(move |i| {
            let start = first_start + i * slide;
            Window { start, end: start + size }
        })
    }
}

/// A window aggregate that can be combined from panes.
pub trait Aggregate: Default + Clone {
    fn merge(&mut self, other: &Self);
}

/// One fired window result. `revision` is 1 for the first result of a window and
/// grows each time a late-but-allowed event changes it.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowResult<K, A> {
    pub key: K,
    pub window: Window,
    pub value: A,
    pub revision: u32,
}

/// The event belongs only to windows whose allowed lateness is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLate;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KeyWindows<A> {
    panes: Panes<A>,
    /// Every window of this key ending at or before this has fired (or was empty).
    fired_upto: Millis,
    /// Revision last emitted, by window start, while the window can still change
    /// (kept as panes are: a few, mostly added at the end and forgotten from the front).
    revisions: Panes<u32>,
    /// The key's one pending timer.
    timer: Option<Millis>,
}

impl<A> Default for KeyWindows<A> {
    fn default() -> Self {
        KeyWindows { panes: Panes::default(), fired_upto: Millis::MIN, revisions: Panes::default(), timer: None }
    }
}

/// Windows of one assigner over many keys. A key's panes, revisions and timer are
/// its state entry; the timer queue is derived from them.
pub struct KeyedWindows<K: Ord + Hash + Eq, A> {
    rules: Rules<A>,
    keys: KeyedState<K, KeyWindows<A>>,
    timers: TimerQueue<K>,
}

/// How every key's windows fire.
struct Rules<A> {
    windows: SlidingWindows,
    allowed_lateness: Millis,
    /// Which results are worth emitting; the rest are never built.
    wanted: Box<dyn Fn(&A) -> bool + Send>,
    /// A key whose panes together fail `wanted` passes its windows over (see
    /// [`KeyedWindows::emitting_only_monotone`]).
    gated: bool,
}

/// What firing a key's due windows left to do: a timer to register, or the key to
/// drop once nothing of it can change any more.
struct Settled {
    timer: Option<Millis>,
    empty: bool,
}

impl<K: Hash + Eq + Ord + Clone, A: Aggregate> KeyedWindows<K, A> {
    pub fn new(windows: SlidingWindows, allowed_lateness: Millis) -> Self {
        KeyedWindows {
            rules: Rules { windows, allowed_lateness, wanted: Box::new(|_| true), gated: false },
            keys: KeyedState::default(),
            timers: TimerQueue::default(),
        }
    }

    /// Emits only the results that pass `wanted` (a rule's threshold, say): a sliding
    /// window fires every slide, and most results of a rule are below it.
    pub fn emitting_only(mut self, wanted: impl Fn(&A) -> bool + Send + 'static) -> Self {
        self.rules.wanted = Box::new(wanted);
        self
    }

    /// As [`KeyedWindows::emitting_only`], for a `wanted` that fails for every part of
    /// a merge it fails for (a count above a threshold, say). A key whose panes
    /// together fail it has no window worth a result, so it keeps no timer per slide,
    /// only one for its first pane's end, and its due windows are passed over without
    /// merging until an event makes its panes pass. The results are the same. Not
    /// with allowed lateness: there a window's revisions count the results that were
    /// not emitted, so every window is still merged.
    pub fn emitting_only_monotone(self, wanted: impl Fn(&A) -> bool + Send + 'static) -> Self {
        let mut windows = self.emitting_only(wanted);
        windows.rules.gated = windows.rules.allowed_lateness == 0;
        windows
    }

    /// Adds an event at `ts`, judged against `watermark`. When the event changes
    /// windows that already fired, their new results go to `out` at once; a window
    /// that was due but had not fired yet fires now.
    pub fn add(
        &mut self,
        key: &K,
        ts: Millis,
        watermark: Millis,
        update: impl FnOnce(&mut A),
        out: &mut Vec<WindowResult<K, A>>,
    ) -> Result<(), TooLate> {
        let rules = &self.rules;
        let w = rules.windows;
        let pane = w.pane_of(ts);
        if closed_for_good(pane + w.size, watermark, rules.allowed_lateness) {
            return Err(TooLate);
        }
        let state = self.keys.get_or_insert_with(key, KeyWindows::default);
        let was_quiet = rules.gated && is_quiet(&*rules.wanted, &state.panes);
        if was_quiet {
            // No timer passed its due windows over: that is done before the event
            // can change them, as their firing would have been.
            pass_due(state, w, watermark);
        }
        update(state.panes.get_or_default(pane));
        // Woken: its panes pass now, and its timer must follow its windows again.
        let woke = was_quiet && !is_quiet(&*rules.wanted, &state.panes);
        let first_end = pane + w.slide;
        if !woke && first_end > state.fired_upto && first_end > watermark && state.timer.is_some_and(|t| t < first_end)
        {
            // The common, in-order case: none of this pane's windows has fired or is
            // due, and the key's timer comes before the first of them.
            return Ok(());
        }
        for window in w.windows_of(ts) {
            let fired = window.end <= state.fired_upto;
            if fired && !closed_for_good(window.end, watermark, rules.allowed_lateness) {
                let revision = state.revisions.get_or_default(window.start);
                *revision += 1;
                let revision = *revision;
                let value = merge_panes(&state.panes, window);
                if (rules.wanted)(&value) {
                    out.push(WindowResult { key: key.clone(), window, value, revision });
                }
            }
        }
        let settled = rules.settle(key, state, watermark, out);
        self.apply(key, settled);
        Ok(())
    }

    /// The watermark advanced: fire every window that is now complete, forget those
    /// past their allowed lateness.
    pub fn advance(&mut self, watermark: Millis, out: &mut Vec<WindowResult<K, A>>) {
        while let Some((time, key)) = self.timers.pop_due(watermark) {
            // A timer the key has moved since is not its own any more.
            let Some(state) = self.keys.get_mut(&key).filter(|state| state.timer == Some(time)) else { continue };
            state.timer = None;
            let settled = self.rules.settle(&key, state, watermark, out);
            self.apply(&key, settled);
        }
    }

    /// Keys with live window state.
    pub fn key_count(&self) -> usize {
        self.keys.len()
    }

    /// What the key's windows still hold (those the watermark has not closed for
    /// good): from its first pane to the end of its last, merged (for a state query).
    pub fn held<Q>(&self, key: &Q) -> Option<(Window, A)>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let panes = &self.keys.get(key)?.panes;
        let span = Window { start: panes.first_start()?, end: panes.last_start()? + self.rules.windows.slide };
        Some((span, merge_panes(panes, span)))
    }

    fn apply(&mut self, key: &K, settled: Settled) {
        if let Some(timer) = settled.timer {
            self.timers.register(timer, key.clone());
        }
        if settled.empty {
            self.keys.remove(key);
        }
    }
}

impl<A: Aggregate> Rules<A> {
    /// Fires the key's due windows, forgets what no on-time event can change any
    /// more, and moves its timer to its next due time.
    fn settle<K: Clone>(
        &self,
        key: &K,
        state: &mut KeyWindows<A>,
        watermark: Millis,
        out: &mut Vec<WindowResult<K, A>>,
    ) -> Settled {
        let (w, lateness) = (self.windows, self.allowed_lateness);
        let quiet = self.gated && is_quiet(&*self.wanted, &state.panes);
        if quiet {
            pass_due(state, w, watermark);
        }
        // (After `pass_due`, nothing is due.)
        while let Some(end) = next_fire_end(&state.panes, state.fired_upto, w) {
            if end > watermark {
                break;
            }
            let window = Window { start: end - w.size, end };
            state.fired_upto = end;
            if state.panes.first_from(window.start).is_some_and(|p| p < window.end) {
                if lateness > 0 {
                    *state.revisions.get_or_default(window.start) = 1;
                }
                let value = merge_panes(&state.panes, window);
                if (self.wanted)(&value) {
                    out.push(WindowResult { key: key.clone(), window, value, revision: 1 });
                }
            }
        }
        // Forget what no on-time event can change any more.
        state.panes.forget_while(|pane| closed_for_good(pane + w.size, watermark, lateness));
        state.revisions.forget_while(|start| closed_for_good(start + w.size, watermark, lateness));
        let next = [
            next_fire_end(&state.panes, state.fired_upto, w).filter(|_| !quiet),
            state.panes.first_start().map(|p| p.saturating_add(w.size).saturating_add(lateness)),
            state.revisions.first_start().map(|s| s.saturating_add(w.size).saturating_add(lateness)),
        ]
        .into_iter()
        .flatten()
        .min()
        .map(|due| due - 1);
        let old = std::mem::replace(&mut state.timer, next);
        Settled {
            timer: next.filter(|&next| old != Some(next)),
            empty: state.panes.is_empty() && state.revisions.is_empty(),
        }
    }
}

impl<K, A> KeyedWindows<K, A>
where
    K: Hash + Eq + Ord + Clone + Serialize + DeserializeOwned,
    A: Aggregate + Serialize + DeserializeOwned,
{
    pub fn track_changes(&mut self) {
        self.keys.track_changes();
    }

    /// The keys whose windows changed, as entries of `namespace`.
    pub fn drain_changes(&mut self, namespace: u8, out: &mut Vec<StateWrite>) {
        self.keys.drain_changes(namespace, out);
    }

    pub fn restore_entry(&mut self, rest: &[u8], value: Option<&[u8]>) -> Result<(), StateError> {
        self.keys.restore_entry(rest, value)
    }

    /// Every restored key's timer back in the queue.
    pub fn finish_restore(&mut self) {
        self.timers = TimerQueue::default();
        for (key, state) in self.keys.iter() {
            if let Some(t) = state.timer {
                self.timers.register(t, key.clone());
            }
        }
    }
}

/// A window can no longer change once the watermark has passed its end by the
/// allowed lateness.
fn closed_for_good(end: Millis, watermark: Millis, allowed_lateness: Millis) -> bool {
    end.saturating_add(allowed_lateness) <= watermark
}

/// End of the earliest window that has data and has not fired.
fn next_fire_end<A>(panes: &Panes<A>, fired_upto: Millis, w: SlidingWindows) -> Option<Millis> {
    let pane = panes.first_from(fired_upto.saturating_sub(w.size).saturating_add(1))?;
    Some(fired_upto.saturating_add(w.slide).max(pane + w.slide))
}

/// Marks every due window of the key fired, without a result: as the firing loop
/// does for windows whose results are not wanted.
fn pass_due<A>(state: &mut KeyWindows<A>, w: SlidingWindows, watermark: Millis) {
    while let Some(end) = next_fire_end(&state.panes, state.fired_upto, w).filter(|&end| end <= watermark) {
        state.fired_upto = end;
    }
}

/// Whether the key's panes together fail `wanted`: then, for a monotone `wanted`, so
/// does every window of them.
fn is_quiet<A: Aggregate>(wanted: &dyn Fn(&A) -> bool, panes: &Panes<A>) -> bool {
    !wanted(&merge_panes(panes, Window { start: Millis::MIN, end: Millis::MAX }))
}

fn merge_panes<A: Aggregate>(panes: &Panes<A>, window: Window) -> A {
    let mut acc = A::default();
    for pane in panes.range(window.start, window.end) {
        acc.merge(pane);
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Default, PartialEq)]
    struct Count(u64);

    impl Aggregate for Count {
        fn merge(&mut self, other: &Self) {
            self.0 += other.0;
        }
    }

    fn results(out: &[WindowResult<&'static str, Count>]) -> Vec<(Millis, Millis, u64, u32)> {
        out.iter().map(|r| (r.window.start, r.window.end, r.value.0, r.revision)).collect()
    }

    #[test]
    fn assigns_sliding_windows_aligned_to_the_slide() {
        let w = SlidingWindows::sliding(5000, 1000);
        let starts: Vec<Millis> = w.windows_of(13_100).map(|w| w.start).collect();
        assert_eq!(starts, vec![9000, 10_000, 11_000, 12_000, 13_000]);
        // The boundary belongs to the window that starts there, not the one that ends there.
        assert_eq!(w.windows_of(18_000).last().unwrap(), Window { start: 18_000, end: 23_000 });
        assert_eq!(w.windows_of(17_999).next().unwrap(), Window { start: 13_000, end: 18_000 });
        let t = SlidingWindows::tumbling(10_000);
        assert_eq!(t.windows_of(-1).collect::<Vec<_>>(), vec![Window { start: -10_000, end: 0 }]);
    }

    #[test]
    fn a_window_fires_once_the_watermark_reaches_its_end() {
        let mut kw = KeyedWindows::new(SlidingWindows::tumbling(10_000), 0);
        let mut out = Vec::new();
        kw.add(&"k", 10_000, 0, |c: &mut Count| c.0 += 1, &mut out).unwrap();
        kw.add(&"k", 19_999, 0, |c: &mut Count| c.0 += 1, &mut out).unwrap();
        kw.advance(19_999, &mut out);
        assert!(out.is_empty());
        kw.advance(20_000, &mut out);
        assert_eq!(results(&out), vec![(10_000, 20_000, 2, 1)]);
        assert_eq!(kw.key_count(), 0, "state is forgotten once the window cannot change");
    }

    #[test]
    fn sliding_windows_fire_in_order_and_skip_empty_stretches() {
        let mut kw = KeyedWindows::new(SlidingWindows::sliding(5000, 1000), 0);
        let mut out = Vec::new();
        kw.add(&"k", 1_500, 0, |c: &mut Count| c.0 += 1, &mut out).unwrap();
        kw.add(&"k", 100_200, 0, |c: &mut Count| c.0 += 1, &mut out).unwrap();
        kw.advance(Millis::MAX, &mut out);
        let starts: Vec<Millis> = out.iter().map(|r| r.window.start).collect();
        assert_eq!(starts, vec![-3000, -2000, -1000, 0, 1000, 96_000, 97_000, 98_000, 99_000, 100_000]);
        assert!(out.iter().all(|r| r.value.0 == 1));
    }

    #[test]
    fn a_late_but_allowed_event_revises_the_fired_window() {
        let mut kw = KeyedWindows::new(SlidingWindows::tumbling(5000), 2000);
        let mut out = Vec::new();
        kw.add(&"k", 1000, 0, |c: &mut Count| c.0 += 1, &mut out).unwrap();
        kw.advance(5000, &mut out);
        assert_eq!(results(&out), vec![(0, 5000, 1, 1)]);
        out.clear();
        // Watermark 6999: the window ended at 5000 and allows 2000 more.
        kw.add(&"k", 4999, 6999, |c: &mut Count| c.0 += 1, &mut out).unwrap();
        assert_eq!(results(&out), vec![(0, 5000, 2, 2)]);
        out.clear();
        kw.advance(7000, &mut out);
        assert_eq!(kw.add(&"k", 4999, 7000, |c: &mut Count| c.0 += 1, &mut out), Err(TooLate));
        assert!(out.is_empty());
    }

    #[test]
    fn a_due_window_with_no_result_yet_fires_when_its_first_event_arrives_late() {
        let mut kw = KeyedWindows::new(SlidingWindows::tumbling(5000), 2000);
        let mut out = Vec::new();
        kw.add(&"k", 4500, 6000, |c: &mut Count| c.0 += 1, &mut out).unwrap();
        assert_eq!(results(&out), vec![(0, 5000, 1, 1)]);
    }

    /// A small deterministic generator (xorshift), for the property below.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    #[test]
    fn a_monotone_filter_passes_quiet_keys_over_with_the_same_results() {
        for seed in 1..=300u64 {
            let windows = SlidingWindows::sliding(5000, 1000);
            let mut plain = KeyedWindows::new(windows, 0).emitting_only(|c: &Count| c.0 > 2);
            let mut gated = KeyedWindows::new(windows, 0).emitting_only_monotone(|c: &Count| c.0 > 2);
            let (mut rng, mut watermark) = (Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)), 0);
            let (mut from_plain, mut from_gated) = (Vec::new(), Vec::new());
            for step in 0..400 {
                if rng.below(10) < 7 {
                    // Mostly on time, some late (some too late), bursts and lulls.
                    let key = ["a", "b", "c"][rng.below(3) as usize];
                    let ts = watermark + rng.below(14_000) as Millis - 6000;
                    let a = plain.add(&key, ts, watermark, |c| c.0 += 1, &mut from_plain);
                    let b = gated.add(&key, ts, watermark, |c| c.0 += 1, &mut from_gated);
                    assert_eq!(a, b, "seed {seed}, step {step}: add at {ts}, watermark {watermark}");
                } else {
                    watermark += rng.below(4000) as Millis;
                    plain.advance(watermark, &mut from_plain);
                    gated.advance(watermark, &mut from_gated);
                }
                assert_eq!(results(&from_plain), results(&from_gated), "seed {seed}, step {step}");
            }
            plain.advance(Millis::MAX, &mut from_plain);
            gated.advance(Millis::MAX, &mut from_gated);
            assert_eq!(results(&from_plain), results(&from_gated), "seed {seed}, at the end");
            assert!(from_plain.iter().all(|r| r.value.0 > 2));
            assert_eq!((plain.key_count(), gated.key_count()), (0, 0));
        }
    }
}
