//! Unkeyed device events under schedules of faults drawn at random (from fixed seeds,
//! so a failure replays): failed commits, members replaced, members gone for a
//! while; the outputs must be those of keyed input without faults.

use vigil_datagen::rng::Draw;
use vigil_kafka::core::driver::{sorted, Cluster, Member, PARTITIONS};
use vigil_model::Millis;
use vigil_operators::stages::DeviceRouterStage;
use vigil_stream::partition::partition_for;

use crate::keying::{device_logs, device_logs_produced};

/// One step of a schedule.
#[derive(Debug)]
enum Step {
    Round { batch: usize, repeat_idle: bool },
    FailedCommit { member: usize, went_through: bool, batch: usize },
    Replaced { member: usize },
    Gone { member: usize, rounds: usize, batch: usize },
}

/// The kinds of fault a schedule draws from: failed commits (0), members replaced (1),
/// members gone for a while (2).
type Kinds = &'static [i64];

fn schedule(seed: u64, kinds: Kinds, members: usize, steps: u64) -> Vec<Step> {
    let draw = Draw::new(seed);
    let batches = [1, 3, 7, 20, 60];
    (0..steps)
        .map(|i| {
            let batch = batches[draw.range(i, 1, 0, batches.len() as i64 - 1) as usize];
            let member = draw.range(i, 2, 0, members as i64 - 1) as usize;
            match draw.range(i, 0, 0, 19) {
                k if !kinds.contains(&k) && k < 3 => Step::Round { batch, repeat_idle: false },
                0 => Step::FailedCommit { member, went_through: draw.unit(i, 3) < 0.5, batch },
                1 => Step::Replaced { member },
                2 => Step::Gone { member, rounds: draw.range(i, 4, 1, 30) as usize, batch },
                3 => Step::Round { batch, repeat_idle: true },
                _ => Step::Round { batch, repeat_idle: false },
            }
        })
        .collect()
}

fn run(seed: u64, kinds: Kinds, members: usize, place: impl Fn(usize, &str) -> i32) -> (Vec<String>, Vec<Step>) {
    // Produced 20 a second, as the chaos suite's generator produces them: a key
    // partition without keys goes quiet in producer time.
    let logs = device_logs_produced(place, |n| n as Millis * 50);
    let mut cluster = Cluster::new(|| DeviceRouterStage, members as i32, logs);
    let steps = schedule(seed, kinds, members, 120);
    for step in &steps {
        match *step {
            Step::Round { batch, repeat_idle } => {
                cluster.round(batch, repeat_idle);
            }
            Step::FailedCommit { member, went_through, batch } => {
                cluster.round_failing(batch, false, Some((member, went_through)));
            }
            Step::Replaced { member } => cluster.replace(member, Member::new(DeviceRouterStage)),
            Step::Gone { member, rounds, batch } => {
                cluster.stalled.insert(member);
                for _ in 0..rounds {
                    cluster.round(batch, false);
                }
                cluster.stalled.clear();
                cluster.replace(member, Member::new(DeviceRouterStage));
            }
        }
    }
    cluster.settle(5);
    (sorted(&cluster.members.into_iter().flat_map(|m| m.delivered).collect::<Vec<_>>()), steps)
}

#[test]
fn unkeyed_device_events_under_random_faults_are_judged_as_if_keyed() {
    let home = |_: usize, site: &str| partition_for(site.as_bytes(), PARTITIONS) as i32;
    let keyed = sorted(&Cluster::new(|| DeviceRouterStage, 2, device_logs(home)).run(1));
    let spread = |n: usize, _: &str| ((n * 7 + n / 3) % PARTITIONS as usize) as i32;
    let sticky = |n: usize, _: &str| ((n / 37) % PARTITIONS as usize) as i32;
    for seed in 0..50 {
        for members in [1, 2, 4] {
            let (got, steps) = run(seed, &[0, 1, 2], members, sticky);
            assert!(got == keyed, "sticky, seed {seed}, {members} members: {}", difference(&got, &keyed, &steps));
            // Each kind alone, too: another schedule, with more of it.
            for kinds in [&[0, 1, 2][..], &[0], &[1], &[2]] {
                let (got, steps) = run(seed, kinds, members, spread);
                let what = format!("spread, seed {seed}, faults {kinds:?}, {members} members");
                assert!(got == keyed, "{what}: {}", difference(&got, &keyed, &steps));
            }
        }
    }
}

/// What differs, and the schedule that made it.
fn difference(got: &[String], want: &[String], steps: &[Step]) -> String {
    let extra: Vec<&String> = got.iter().filter(|l| !want.contains(l)).take(5).collect();
    let missing: Vec<&String> = want.iter().filter(|l| !got.contains(l)).take(5).collect();
    format!("extra {extra:#?}\nmissing {missing:#?}\nsteps {steps:?}")
}
