//! Keyed state growing to millions of keys (not a test: it asserts nothing about
//! speed). `cargo bench -p vigil-stream --bench state_growth` inserts
//! `VIGIL_BENCH_KEYS` (default 4 000 000) new customer ids, one at a time as a stream
//! would, into Vigil's keyed state and, in the same run, into one hash map of the same
//! hasher (what keyed state was before its table was split). It prints the total time
//! and the longest single insert: the pause a stream sees when a full table grows.

use std::hint::black_box;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use vigil_stream::state::{KeyedState, StrKey};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ROUNDS: usize = 3;

/// Total time and longest single insert of `keys` inserts.
fn grow(keys: &[String], mut insert: impl FnMut(&str)) -> (Duration, Duration) {
    let (started, mut longest) = (Instant::now(), Duration::ZERO);
    for key in keys {
        let t = Instant::now();
        insert(key);
        longest = longest.max(t.elapsed());
    }
    (started.elapsed(), longest)
}

fn main() {
    let n: usize = std::env::var("VIGIL_BENCH_KEYS").ok().and_then(|s| s.parse().ok()).unwrap_or(4_000_000);
    let keys: Vec<String> = (0..n).map(|i| format!("cust-{i:07}")).collect();
    println!("{n} new keys, each with a 32-byte value, {ROUNDS} rounds alternating");
    for round in 1..=ROUNDS {
        let mut state: KeyedState<StrKey, [u64; 4]> = KeyedState::default();
        let (total, longest) = grow(&keys, |k| black_box(state.get_or_insert_with(k, || [1; 4]))[0] += 1);
        println!("round {round}: keyed state (split table):  {total:>10.2?} in all, longest insert {longest:>9.2?}");
        drop(state);
        let mut map: FxHashMap<StrKey, [u64; 4]> = FxHashMap::default();
        let (total, longest) = grow(&keys, |k| black_box(map.entry(StrKey::new(k)).or_insert([1; 4]))[0] += 1);
        println!("round {round}: one hash map (before):       {total:>10.2?} in all, longest insert {longest:>9.2?}");
    }
}
