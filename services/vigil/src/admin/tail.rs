//! `vigil tail TOPIC…`: topics in the seed's tagged NDJSON form, reading only
//! committed records, from the beginning, the end or a point in time; with
//! `--details`, each line starts with its partition, offset, timestamp and key (as
//! kcat's `-f '%p %o %T %k'`).

use std::io::{self, BufWriter, Write};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};
use vigil_kafka::codec::{is_json_object, Codec};
use vigil_kafka::marker_headers;
use vigil_kafka::names::Names;
use vigil_kafka::tail::tagged_line;
use vigil_kafka::topics;
use vigil_model::topology::{Topic, Topology, NOTIFY_DEAD_LETTERS};

/// Where `vigil tail` starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum From {
    Beginning,
    End,
    /// The first record at or after this time, epoch ms.
    Time(i64),
}

impl std::str::FromStr for From {
    type Err = String;

    fn from_str(s: &str) -> Result<From, String> {
        match s {
            "beginning" => Ok(From::Beginning),
            "end" => Ok(From::End),
            ms if ms.chars().all(|c| c.is_ascii_digit()) => ms.parse().map(From::Time).map_err(|e| format!("{e}")),
            other => Err(format!(
                "`{other}` is not where to start: say beginning, end, or a time as epoch milliseconds \
                 (e.g. $(date -d '10 minutes ago' +%s000))"
            )),
        }
    }
}

/// What to print of each record.
pub struct Options {
    pub from: From,
    pub details: bool,
    /// Stop after this many seconds without a new record (`None`: follow forever).
    pub idle_exit_secs: Option<u64>,
}

/// Prints every record of `names` from where `options` says, following until
/// `idle_exit_secs` pass without a new one.
pub fn run(
    consumer: &BaseConsumer,
    registry_url: &str,
    topology: &Topology,
    cluster: &Names,
    names: &[String],
    options: &Options,
) -> Result<()> {
    let wanted: Vec<(&'static Topic, String)> = names
        .iter()
        .map(|n| {
            let notifier = (n == NOTIFY_DEAD_LETTERS.name).then_some(&NOTIFY_DEAD_LETTERS);
            let topic = topology.topic(n).or(notifier).with_context(|| {
                let known: Vec<&str> = topology.topics().iter().map(|t| t.name).collect();
                format!("`{n}` is not a topic of the pipeline; its topics are {}", known.join(", "))
            })?;
            Ok((topic, cluster.of(topic.name)))
        })
        .collect::<Result<_>>()?;
    let mut tpl = TopicPartitionList::new();
    for (_, name) in &wanted {
        let n = topics::partition_count(consumer, name)?;
        if n == 0 {
            bail!("topic `{name}` does not exist; run `vigil provision` first");
        }
        for p in 0..n as i32 {
            let offset = match options.from {
                From::Beginning => Offset::Beginning,
                From::End => Offset::End,
                From::Time(ms) => Offset::Offset(ms),
            };
            tpl.add_partition_offset(name, p, offset)?;
        }
    }
    if let From::Time(_) = options.from {
        tpl = consumer
            .offsets_for_times(tpl, Duration::from_secs(30))
            .context("cannot find the offsets for that time")?;
    }
    consumer.assign(&tpl)?;
    let codec = Codec::new(registry_url)?;
    match print(consumer, &codec, &wanted, options) {
        // The reader went away (`vigil tail … | head`): nothing left to do.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        result => Ok(result?),
    }
}

fn print(
    consumer: &BaseConsumer,
    codec: &Codec,
    topics: &[(&'static Topic, String)],
    options: &Options,
) -> io::Result<()> {
    // Buffered, and flushed whenever no record is waiting: a write per line costs a
    // system call per record, and a follower still sees every line as soon as
    // nothing more is waiting behind it.
    let mut out = BufWriter::new(io::stdout().lock());
    let mut last = Instant::now();
    loop {
        let next = match consumer.poll(Duration::ZERO) {
            Some(next) => Some(next),
            None => {
                out.flush()?;
                consumer.poll(Duration::from_millis(200))
            }
        };
        match next {
            Some(Ok(m)) => {
                last = Instant::now();
                if marker_headers::read(&m).is_some() {
                    continue;
                }
                let (topic, _) = topics.iter().find(|(_, name)| name == m.topic()).expect("an assigned topic");
                if options.details {
                    write!(out, "{}", details(&m))?;
                }
                let payload = m.payload().unwrap_or_default();
                if is_json_object(payload) {
                    // Written as plain JSON by its producer: shown as it is.
                    writeln!(out, "{}", String::from_utf8_lossy(payload).trim())?;
                    continue;
                }
                match codec.decode_value(payload) {
                    Ok(value) => writeln!(out, "{}", tagged_line(topic, &value))?,
                    Err(e) => {
                        writeln!(out)?;
                        eprintln!("vigil tail: {} partition {} offset {}: {e}", m.topic(), m.partition(), m.offset())
                    }
                }
            }
            Some(Err(e)) => eprintln!("vigil tail: {e}"),
            None => {}
        }
        if options.idle_exit_secs.is_some_and(|s| last.elapsed() >= Duration::from_secs(s)) {
            return out.flush();
        }
    }
}

/// A record's partition, offset, timestamp (epoch ms) and key, tab-separated.
fn details(m: &BorrowedMessage<'_>) -> String {
    let timestamp = m.timestamp().to_millis().map_or_else(|| "-".to_string(), |ms| ms.to_string());
    let key = m.key().map_or_else(|| "-".to_string(), |k| String::from_utf8_lossy(k).into_owned());
    format!("{}\t{}\t{}\t{}\t", m.partition(), m.offset(), timestamp, key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_starts_at_the_beginning_the_end_or_a_time_and_says_what_else_it_takes() {
        assert_eq!("beginning".parse(), Ok(From::Beginning));
        assert_eq!("end".parse(), Ok(From::End));
        assert_eq!("1700000000000".parse(), Ok(From::Time(1_700_000_000_000)));
        let err = "yesterday".parse::<From>().unwrap_err();
        assert!(err.contains("beginning, end, or a time as epoch milliseconds"), "{err}");
    }
}
