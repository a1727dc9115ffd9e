//! `vigil tail TOPIC…`: output topics in the seed's tagged NDJSON form, reading
//! only committed records.

use std::io::{self, BufWriter, Write};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use vigil_kafka::codec::Codec;
use vigil_kafka::marker_headers;
use vigil_kafka::tail::tagged_line;
use vigil_kafka::topics;
use vigil_model::topology::{Topic, Topology};

/// Prints every record of `names` from the beginning, following until
/// `idle_exit_secs` pass without a new one (forever if `None`).
pub fn run(
    consumer: &BaseConsumer,
    registry_url: &str,
    topology: &Topology,
    names: &[String],
    idle_exit_secs: Option<u64>,
) -> Result<()> {
    let wanted: Vec<&'static Topic> = names
        .iter()
        .map(|n| {
            topology.topic(n).with_context(|| {
                let known: Vec<&str> = topology.topics().iter().map(|t| t.name).collect();
                format!("`{n}` is not a topic of the pipeline; its topics are {}", known.join(", "))
            })
        })
        .collect::<Result<_>>()?;
    let mut tpl = rdkafka::TopicPartitionList::new();
    for t in &wanted {
        let n = topics::partition_count(consumer, t.name)?;
        if n == 0 {
            bail!("topic `{}` does not exist; run `vigil provision` first", t.name);
        }
        for p in 0..n as i32 {
            tpl.add_partition_offset(t.name, p, rdkafka::Offset::Beginning)?;
        }
    }
    consumer.assign(&tpl)?;
    let codec = Codec::new(registry_url)?;
    match print(consumer, &codec, &wanted, idle_exit_secs) {
        // The reader went away (`vigil tail … | head`): nothing left to do.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        result => Ok(result?),
    }
}

fn print(
    consumer: &BaseConsumer,
    codec: &Codec,
    topics: &[&'static Topic],
    idle_exit_secs: Option<u64>,
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
                let topic = topics.iter().find(|t| t.name == m.topic()).expect("an assigned topic");
                match codec.decode_value(m.payload().unwrap_or_default()) {
                    Ok(value) => writeln!(out, "{}", tagged_line(topic, &value))?,
                    Err(e) => {
                        eprintln!("vigil tail: {} partition {} offset {}: {e}", m.topic(), m.partition(), m.offset())
                    }
                }
            }
            Some(Err(e)) => eprintln!("vigil tail: {e}"),
            None => {}
        }
        if idle_exit_secs.is_some_and(|s| last.elapsed() >= Duration::from_secs(s)) {
            return out.flush();
        }
    }
}
