//! The embedded runtime: the six operators wired in one process through in-memory
//! partitioned topics, keyed and partitioned as the Kafka topics are (Kafka's
//! murmur2 partitioner over `runtime.partitions` partitions): one task per partition
//! for the keyed stages, one task for the global ones. It is itself a pure state
//! machine, input records in and output records out, and deterministic.
//!
//! ```text
//! orders   ─┐ by order_id                      ┌─▶ payment-metrics (one task)
//!           ├─▶ join-enrich[p] ── enriched ────┤
//! payments ─┘                   by customer_id └─▶ payment-anomalies[q]
//! devices ──▶ device-router[p] ── on-time, by site_id ─▶ device-analytics[p]
//!                     │                        └─────▶ health-monitor (one task)
//!                     └─ late side output ───────────▶ health-monitor
//! ```
//!
//! Watermarks: every input partition has its own ([`SourceClock`]); a keyed task goes
//! by the minimum over its input partitions; an intermediate topic's watermark is the
//! minimum over the tasks that write to it (the join holds its own back for pending
//! payments), and every reader of that topic goes by it.

use std::sync::Arc;

use vigil_model::output::{DeadLetter, EnrichedPayment, HealthAlert, LateEvent, Output};
use vigil_model::{Config, DeviceEvent, InputRecord, Millis};
use vigil_operators::{
    AnomalyOutput, DeviceAnalytics, DeviceOutput, DeviceRouter, HealthInput, HealthMonitor, JoinEnrich, JoinInput,
    MetricsOutput, PaymentAnomalies, PaymentMetrics, Routed,
};
use vigil_stream::partition::partition_for;
use vigil_stream::source_clock::{Idleness, SourceClock};
use vigil_stream::watermark::NO_WATERMARK;
use vigil_stream::Operator;

use crate::ledger::Ledger;

pub struct EmbeddedRuntime {
    partitions: u32,
    orders: SourceClock,
    payments: SourceClock,
    devices: SourceClock,
    join: Vec<Task<JoinEnrich>>,
    metrics: Task<PaymentMetrics>,
    anomalies: Vec<Task<PaymentAnomalies>>,
    routers: Vec<Task<DeviceRouter>>,
    analytics: Vec<Task<DeviceAnalytics>>,
    health: Task<HealthMonitor>,
    /// Watermarks of the intermediate topics, as their readers last saw them.
    enriched_watermark: Millis,
    device_watermark: Millis,
    outputs: Vec<Output>,
    ledger: Ledger,
}

/// One operator instance, the input watermark it was last given, and a buffer for
/// what it emits (kept to save an allocation per call).
struct Task<O: Operator> {
    operator: O,
    watermark: Millis,
    out: Vec<O::Out>,
}

impl<O: Operator> Task<O> {
    fn new(operator: O) -> Self {
        Task { operator, watermark: NO_WATERMARK, out: Vec::new() }
    }

    fn record(&mut self, record: O::In) -> Vec<O::Out> {
        self.operator.on_record(record, &mut self.out);
        std::mem::take(&mut self.out)
    }

    /// Takes back a buffer `record` or `advance` returned, emptied, so the next call
    /// writes into its capacity instead of allocating.
    fn reuse(&mut self, mut out: Vec<O::Out>) {
        out.clear();
        self.out = out;
    }

    /// Advances the task's input watermark; what fired, if it moved.
    fn advance(&mut self, watermark: Millis) -> Vec<O::Out> {
        self.advance_keeping_output(watermark);
        if self.out.is_empty() {
            // Most calls: the buffer keeps its capacity for the next record.
            return Vec::new();
        }
        std::mem::take(&mut self.out)
    }

    /// Advances the task's input watermark, leaving what fired for its next record
    /// to hand over (for a task that emits nothing on a watermark: no buffer changes
    /// hands).
    fn advance_keeping_output(&mut self, watermark: Millis) {
        if watermark > self.watermark {
            self.watermark = watermark;
            self.operator.on_watermark(watermark, &mut self.out);
        }
    }
}

impl<O: Operator<Out: IntoOutput>> Task<O> {
    /// Hands `record` to the operator; what it emits joins `outputs`, and the
    /// task's buffer keeps its capacity for the next call.
    fn record_into(&mut self, record: O::In, outputs: &mut Vec<Output>) {
        self.operator.on_record(record, &mut self.out);
        emit(&mut self.out, outputs);
    }

    /// As `advance`, with what fired joining `outputs`.
    fn advance_into(&mut self, watermark: Millis, outputs: &mut Vec<Output>) {
        self.advance_keeping_output(watermark);
        emit(&mut self.out, outputs);
    }
}

/// A task's outputs as the pipeline's; most calls bring none.
fn emit<T: IntoOutput>(out: &mut Vec<T>, outputs: &mut Vec<Output>) {
    if !out.is_empty() {
        outputs.extend(out.drain(..).map(IntoOutput::into_output));
    }
}

fn tasks<O: Operator>(n: u32, make: impl Fn() -> O) -> Vec<Task<O>> {
    (0..n).map(|_| Task::new(make())).collect()
}

impl EmbeddedRuntime {
    pub fn new(config: &Config) -> Self {
        let p = config.runtime.partitions;
        let idle = Idleness::EventTime { timeout: config.runtime.idle_timeout_ms as Millis };
        EmbeddedRuntime {
            partitions: p,
            orders: SourceClock::new(p, config.payment_bound_ms(), idle),
            payments: SourceClock::new(p, config.payment_bound_ms(), idle),
            devices: SourceClock::new(p, config.devices.out_of_order_bound_ms as Millis, idle),
            join: tasks(p, || JoinEnrich::new(config)),
            metrics: Task::new(PaymentMetrics::new(config)),
            anomalies: tasks(p, || PaymentAnomalies::new(config)),
            routers: tasks(p, || DeviceRouter::new(config)),
            analytics: tasks(p, || DeviceAnalytics::new(config)),
            health: Task::new(HealthMonitor::new(config)),
            enriched_watermark: NO_WATERMARK,
            device_watermark: NO_WATERMARK,
            outputs: Vec::new(),
            ledger: Ledger::default(),
        }
    }

    fn partition(&self, key: &str) -> usize {
        partition_for(key.as_bytes(), self.partitions) as usize
    }

    /// One valid input record, in arrival order.
    pub fn process(&mut self, record: InputRecord) {
        self.ledger.read += 1;
        match record {
            InputRecord::Order(o) => {
                self.ledger.orders += 1;
                let (p, ts) = (self.partition(&o.order_id), o.order_ts);
                self.join_record(p, JoinInput::Order(o));
                self.orders.observe(p, ts);
                self.advance_payments();
            }
            InputRecord::Payment(pay) => {
                self.ledger.payments += 1;
                let (p, ts) = (self.partition(&pay.order_id), pay.payment_ts);
                self.join_record(p, JoinInput::Payment(pay));
                self.payments.observe(p, ts);
                self.advance_payments();
            }
            InputRecord::Device(d) => {
                // Judged against the watermark from before it, then counted in it.
                let (p, ts) = (self.partition(&d.site_id), d.event_ts);
                let mut routed = self.routers[p].record(d);
                self.routed(p, &mut routed);
                self.routers[p].reuse(routed);
                self.devices.observe(p, ts);
                self.advance_devices();
            }
        }
    }

    /// An input line that is not a valid record.
    pub fn dead_letter(&mut self, letter: DeadLetter) {
        self.ledger.read += 1;
        self.ledger.dead_letters += 1;
        self.outputs.push(Output::DeadLetter(letter));
    }

    /// The input has ended: every watermark goes to the end of time, all fires.
    pub fn finish(&mut self) {
        self.orders.finish();
        self.payments.finish();
        self.devices.finish();
        self.advance_payments();
        self.advance_devices();
    }

    /// Hands what was emitted since the last call to `emit`, in emission order.
    pub fn emit_outputs<E>(&mut self, emit: &mut impl FnMut(Output) -> Result<(), E>) -> Result<(), E> {
        // Most records emit nothing: not even a drain to set up and tear down.
        if self.outputs.is_empty() {
            return Ok(());
        }
        self.outputs.drain(..).try_for_each(emit)
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    fn join_record(&mut self, p: usize, input: JoinInput) {
        let mut out = self.join[p].record(input);
        if !out.is_empty() {
            self.enriched(&mut out);
        }
        self.join[p].reuse(out);
    }

    fn advance_payments(&mut self) {
        for p in 0..self.join.len() {
            let watermark = self.orders.watermark(p).min(self.payments.watermark(p));
            // Most records move no join's watermark, or fire nothing when they do.
            let mut out = self.join[p].advance(watermark);
            if !out.is_empty() {
                self.enriched(&mut out);
                self.join[p].reuse(out);
            }
        }
        let watermark = self.join.iter().map(|t| t.operator.output_watermark()).min().unwrap_or(NO_WATERMARK);
        if watermark <= self.enriched_watermark {
            return;
        }
        self.enriched_watermark = watermark;
        self.metrics.advance_into(watermark, &mut self.outputs);
        for task in &mut self.anomalies {
            task.advance_into(watermark, &mut self.outputs);
        }
    }

    /// The enriched-payments topic: keyed by customer, read by metrics and anomalies.
    fn enriched(&mut self, payments: &mut Vec<EnrichedPayment>) {
        for e in payments.drain(..) {
            let e = Arc::new(e);
            self.outputs.push(Output::Enriched(e.clone()));
            if let Some(customer) = &e.customer_id {
                let q = self.partition(customer);
                self.anomalies[q].record_into(e.clone(), &mut self.outputs);
            }
            self.metrics.record_into(e, &mut self.outputs);
        }
    }

    fn advance_devices(&mut self) {
        for (router, watermark) in self.routers.iter_mut().zip(self.devices.watermarks()) {
            // The router emits nothing on a watermark; it only judges later events by it.
            router.advance_keeping_output(watermark);
        }
        let watermark = self.routers.iter().map(|t| t.operator.output_watermark()).min().unwrap_or(NO_WATERMARK);
        if watermark <= self.device_watermark {
            return;
        }
        self.device_watermark = watermark;
        for task in &mut self.analytics {
            task.advance_into(watermark, &mut self.outputs);
        }
        self.health.advance_into(watermark, &mut self.outputs);
    }

    /// The router's two outputs: on-time events and the late side topic. The on-time
    /// topic is keyed by site as the devices topic is, so an event stays in `partition`.
    fn routed(&mut self, partition: usize, routed: &mut Vec<Routed>) {
        for r in routed.drain(..) {
            match r {
                Routed::OnTime(e) => {
                    self.ledger.devices_on_time += 1;
                    self.on_time(partition, e);
                }
                Routed::Late(l) => {
                    self.ledger.devices_late += 1;
                    self.outputs.push(Output::Late(LateEvent::Device(l.clone())));
                    self.health.record_into(HealthInput::Late(l), &mut self.outputs);
                }
            }
        }
    }

    fn on_time(&mut self, partition: usize, e: DeviceEvent) {
        self.health.record_into(HealthInput::OnTime(e.clone()), &mut self.outputs);
        self.analytics[partition].record_into(e, &mut self.outputs);
    }
}

/// What a stage emits, as one of the pipeline's output records.
trait IntoOutput {
    fn into_output(self) -> Output;
}

impl IntoOutput for MetricsOutput {
    fn into_output(self) -> Output {
        match self {
            MetricsOutput::Metrics(m) => Output::Metrics(m),
            MetricsOutput::Late(l) => Output::Late(LateEvent::Payment(l)),
        }
    }
}

impl IntoOutput for AnomalyOutput {
    fn into_output(self) -> Output {
        match self {
            AnomalyOutput::Anomaly(a) => Output::Anomaly(a),
            AnomalyOutput::Late(l) => Output::Late(LateEvent::Payment(l)),
        }
    }
}

impl IntoOutput for DeviceOutput {
    fn into_output(self) -> Output {
        match self {
            DeviceOutput::Metrics(m) => Output::DeviceMetrics(m),
            DeviceOutput::Anomaly(a) => Output::DeviceAnomaly(a),
            DeviceOutput::Late(l) => Output::Late(LateEvent::Device(l)),
        }
    }
}

impl IntoOutput for HealthAlert {
    fn into_output(self) -> Output {
        Output::Health(self)
    }
}
