//! One typed configuration holding every tuning parameter of the seed at its
//! default, overridable without recompiling: a TOML file, then environment variables.
//!
//! Naming: the TOML key is the seed's parameter name in lower case, inside the section
//! of the seed file it lives in (`[join]` = enrichment.py, `[payments]` = job.py,
//! `[devices]` = devices.py, `[health]` = health.py), plus `[anomalies]` (options of
//! the amount rule), `[retention]`, `[runtime]` and `[topics]` (the Kafka runtime's). The
//! environment variable is `VIGIL_<SECTION>_<KEY>` in upper case, e.g.
//! `VIGIL_JOIN_JOIN_WINDOW_SECONDS=15` or `VIGIL_HEALTH_MAX_FAULTS_PER_WINDOW=6`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::time::Millis;

mod topics;
pub use topics::{TopicsConfig, COMPRESSIONS};

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub join: JoinConfig,
    pub payments: PaymentConfig,
    pub devices: DeviceConfig,
    pub health: HealthConfig,
    pub anomalies: AnomaliesConfig,
    pub retention: RetentionConfig,
    pub runtime: RuntimeConfig,
    pub topics: TopicsConfig,
    /// `[kafka]` and `[schema_registry]`: the security settings of the Kafka runtime's
    /// clients, read by its `connection` module from the same file. Not the seed's
    /// parameters, and never printed: they hold secrets.
    #[serde(skip_serializing)]
    pub kafka: serde::de::IgnoredAny,
    #[serde(skip_serializing)]
    pub schema_registry: serde::de::IgnoredAny,
    /// `[notify]`: where the Kafka runtime's notifier delivers alerts, read by its
    /// `notify::settings` module from the same file.
    #[serde(skip_serializing)]
    pub notify: serde::de::IgnoredAny,
}

/// Stage 1 (the seed's `src/enrichment.py`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JoinConfig {
    /// How long to wait for the matching event, in event time (each direction).
    pub join_window_seconds: u64,
    /// Allowed paid-vs-order difference before `amount_mismatch`.
    pub amount_match_tolerance: f64,
}

/// Stages 2 and 3 for payments (the seed's `src/job.py`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PaymentConfig {
    /// Tumbling window length for the payment metrics.
    pub metrics_window_seconds: u64,
    /// Sliding window length for the velocity rule.
    pub window_size_seconds: u64,
    /// How often the velocity window advances.
    pub window_slide_seconds: u64,
    /// Velocity threshold per customer per window (more than this is an anomaly).
    pub max_transactions_per_window: u64,
    /// Standard deviations above the running mean.
    pub amount_sigma_multiplier: f64,
    /// Cold-start amount threshold.
    pub amount_static_floor: f64,
    /// Samples required before the dynamic threshold applies.
    pub min_samples_for_dynamic: u64,
    /// Out-of-order bound of the orders and payments watermarks (the seed's name).
    pub allowed_lateness_seconds: u64,
}

/// Stages 2, 3 and 4 for devices (the seed's `src/devices.py`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeviceConfig {
    pub device_window_size_seconds: u64,
    pub device_window_slide_seconds: u64,
    /// Fault-spike threshold per site per window.
    pub max_faults_per_window: u64,
    /// Reboot-loop threshold per device per window.
    pub max_reboots_per_window: u64,
    /// Out-of-order bound of the device watermark.
    pub out_of_order_bound_ms: u64,
    /// Lateness beyond the watermark that is still processed; more goes to the late side output.
    pub device_allowed_lateness_ms: u64,
}

/// Stage 5 (the seed's `src/health.py`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HealthConfig {
    pub health_window_seconds: u64,
    pub max_late_events_per_window: u64,
    pub max_watermark_lag_ms: u64,
    /// Fault count per health window (all sites) above which a critical alert fires.
    pub max_faults_per_window: u64,
    pub max_event_gap_ms: u64,
    /// How long, in event time past its end, a health window keeps counting late
    /// events that belong to it (late events are judged against long-closed windows).
    pub late_window_retention_ms: u64,
}

/// How the amount rule answers (not the seed's: its job waits for event-time order).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AnomaliesConfig {
    /// Also judge each payment as it arrives, against its customer's statistics as
    /// of then, marked `"provisional": true`; the event-time verdict follows as a
    /// revision only where it differs (a retraction, or an anomaly the provisional
    /// verdict missed).
    pub provisional: bool,
}

/// How long keyed state that would otherwise live forever is kept once its key goes
/// quiet, in event time; 0 keeps it forever, as the seed does. Windows, joins and
/// health windows clean up after themselves and need no limit.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    /// A customer's running amount statistics, after its last payment.
    pub payment_anomalies_ttl_seconds: u64,
    /// A device's running firmware-failure count, after its last failure.
    pub device_analytics_ttl_seconds: u64,
}

/// How the embedded runtime lays out its topics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Partitions of every keyed topic, as the Kafka topics will have.
    pub partitions: u32,
    /// Embedded runtime: an input partition that gets no record while its stream
    /// advances this far in event time stops holding the watermark back.
    pub idle_timeout_ms: u64,
    /// Kafka services: an input partition with nothing to read for this long on the
    /// wall clock stops holding the watermark back (its next record wakes it).
    pub idle_wall_clock_ms: u64,
    /// Kafka services: an input partition whose watermark runs this far (event time)
    /// ahead of its task's is paused until it is back within half of it, so a task
    /// whose inputs arrive unevenly does not buffer everything in between. On a
    /// replay a task's watermark moves once per commit round trip (its repartition
    /// markers become readable then), so this also bounds replay speed.
    pub max_partition_skew_ms: u64,
}

impl Default for JoinConfig {
    fn default() -> Self {
        JoinConfig { join_window_seconds: 10, amount_match_tolerance: 0.01 }
    }
}

impl Default for PaymentConfig {
    fn default() -> Self {
        PaymentConfig {
            metrics_window_seconds: 10,
            window_size_seconds: 5,
            window_slide_seconds: 1,
            max_transactions_per_window: 4,
            amount_sigma_multiplier: 3.0,
            amount_static_floor: 5000.0,
            min_samples_for_dynamic: 5,
            allowed_lateness_seconds: 2,
        }
    }
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            device_window_size_seconds: 5,
            device_window_slide_seconds: 1,
            max_faults_per_window: 3,
            max_reboots_per_window: 3,
            out_of_order_bound_ms: 2000,
            device_allowed_lateness_ms: 2000,
        }
    }
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            health_window_seconds: 5,
            max_late_events_per_window: 0,
            max_watermark_lag_ms: 5000,
            max_faults_per_window: 4,
            max_event_gap_ms: 4000,
            late_window_retention_ms: 300_000,
        }
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            partitions: 4,
            idle_timeout_ms: 10_000,
            idle_wall_clock_ms: 10_000,
            max_partition_skew_ms: 600_000,
        }
    }
}

const SECTIONS: [&str; 8] = ["join", "payments", "devices", "health", "anomalies", "retention", "runtime", "topics"];

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read configuration file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("configuration file {path} is not valid: {message}")]
    File { path: String, message: String },
    #[error("environment variable {var}={value:?} is not a valid {expected}")]
    Env { var: String, value: String, expected: &'static str },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl Config {
    /// Defaults, then the TOML file (if any), then `VIGIL_<SECTION>_<KEY>` variables.
    pub fn load<I>(file: Option<&Path>, env: I) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        let mut table = toml::Table::try_from(Config::default()).expect("defaults serialize");
        if let Some(path) = file {
            let shown = path.display().to_string();
            let text =
                std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: shown.clone(), source })?;
            let overrides: toml::Table = text
                .parse()
                .map_err(|e: toml::de::Error| ConfigError::File { path: shown.clone(), message: e.to_string() })?;
            merge(&mut table, overrides);
            // Deserializing here reports unknown sections and keys against the file.
            Config::deserialize(toml::Value::Table(table.clone()))
                .map_err(|e| ConfigError::File { path: shown, message: e.to_string() })?;
        }
        apply_env(&mut table, env)?;
        let config = Config::deserialize(toml::Value::Table(table)).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// The effective configuration as TOML, as `--print-config` shows it.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("configuration serializes")
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        let positive = [
            ("join.join_window_seconds", self.join.join_window_seconds),
            ("payments.metrics_window_seconds", self.payments.metrics_window_seconds),
            ("payments.window_size_seconds", self.payments.window_size_seconds),
            ("payments.window_slide_seconds", self.payments.window_slide_seconds),
            ("devices.device_window_size_seconds", self.devices.device_window_size_seconds),
            ("devices.device_window_slide_seconds", self.devices.device_window_slide_seconds),
            ("health.health_window_seconds", self.health.health_window_seconds),
            ("runtime.partitions", u64::from(self.runtime.partitions)),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return invalid(format!("{name} must be greater than 0"));
        }
        for (size, slide, name) in [
            (self.payments.window_size_seconds, self.payments.window_slide_seconds, "payments.window_size_seconds"),
            (
                self.devices.device_window_size_seconds,
                self.devices.device_window_slide_seconds,
                "devices.device_window_size_seconds",
            ),
        ] {
            if size % slide != 0 {
                return invalid(format!("{name} ({size}) must be a whole multiple of its slide ({slide})"));
            }
        }
        let non_negative = [
            ("join.amount_match_tolerance", self.join.amount_match_tolerance),
            ("payments.amount_sigma_multiplier", self.payments.amount_sigma_multiplier),
            ("payments.amount_static_floor", self.payments.amount_static_floor),
        ];
        if let Some((name, value)) = non_negative.iter().find(|(_, v)| v.is_nan() || *v < 0.0) {
            return invalid(format!("{name} must be 0 or more, got {value}"));
        }
        if let Some(problem) = self.topics.problem() {
            return invalid(problem);
        }
        Ok(())
    }

    pub fn join_window_ms(&self) -> Millis {
        secs(self.join.join_window_seconds)
    }

    pub fn payment_bound_ms(&self) -> Millis {
        secs(self.payments.allowed_lateness_seconds)
    }

    /// A time-to-live in milliseconds; `None` keeps state forever.
    pub fn ttl_ms(seconds: u64) -> Option<Millis> {
        (seconds > 0).then(|| secs(seconds))
    }
}

fn secs(s: u64) -> Millis {
    s as Millis * 1000
}

fn merge(base: &mut toml::Table, overrides: toml::Table) {
    for (key, value) in overrides {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(key, v);
            }
        }
    }
}

fn apply_env<I>(table: &mut toml::Table, env: I) -> Result<(), ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    for (var, value) in env {
        let Some(rest) = var.strip_prefix("VIGIL_") else { continue };
        for section in SECTIONS {
            let Some(key) = rest.strip_prefix(&format!("{}_", section.to_uppercase())) else { continue };
            let Some(toml::Value::Table(fields)) = table.get_mut(section) else { continue };
            let key = key.to_lowercase();
            let Some(current) = fields.get(&key) else { continue };
            let parsed = match current {
                toml::Value::Integer(_) => value.trim().parse::<i64>().map(toml::Value::Integer).ok(),
                toml::Value::Float(_) => value.trim().parse::<f64>().map(toml::Value::Float).ok(),
                toml::Value::Boolean(_) => value.trim().parse::<bool>().map(toml::Value::Boolean).ok(),
                _ => Some(toml::Value::String(value.clone())),
            };
            let expected = match current {
                toml::Value::Integer(_) => "whole number",
                toml::Value::Float(_) => "number",
                toml::Value::Boolean(_) => "boolean",
                _ => "string",
            };
            let parsed = parsed.ok_or_else(|| ConfigError::Env { var: var.clone(), value: value.clone(), expected })?;
            fields.insert(key, parsed);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn defaults_are_the_seed_parameters() {
        let c = Config::load(None, env(&[])).unwrap();
        assert_eq!(c.join.join_window_seconds, 10);
        assert_eq!(c.join.amount_match_tolerance, 0.01);
        assert_eq!(c.payments.max_transactions_per_window, 4);
        assert_eq!(c.payments.amount_static_floor, 5000.0);
        assert_eq!(c.devices.max_faults_per_window, 3);
        assert_eq!(c.health.max_faults_per_window, 4);
        assert_eq!(c.health.max_event_gap_ms, 4000);
    }

    #[test]
    fn file_then_environment_override_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vigil.toml");
        std::fs::write(&path, "[join]\njoin_window_seconds = 15\n[health]\nmax_event_gap_ms = 9000\n").unwrap();
        let c = Config::load(
            Some(&path),
            env(&[("VIGIL_HEALTH_MAX_EVENT_GAP_MS", "7000"), ("VIGIL_JOIN_AMOUNT_MATCH_TOLERANCE", "0.5")]),
        )
        .unwrap();
        assert_eq!(c.join.join_window_seconds, 15);
        assert_eq!(c.health.max_event_gap_ms, 7000);
        assert_eq!(c.join.amount_match_tolerance, 0.5);
        assert_eq!(c.devices, DeviceConfig::default());
    }

    #[test]
    fn a_misspelt_file_key_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vigil.toml");
        std::fs::write(&path, "[join]\njoin_window_secs = 15\n").unwrap();
        let err = Config::load(Some(&path), env(&[])).unwrap_err().to_string();
        assert!(err.contains("join_window_secs"), "{err}");
    }

    #[test]
    fn a_bad_environment_value_is_an_error_naming_the_variable() {
        let err = Config::load(None, env(&[("VIGIL_PAYMENTS_WINDOW_SIZE_SECONDS", "five")])).unwrap_err().to_string();
        assert!(err.contains("VIGIL_PAYMENTS_WINDOW_SIZE_SECONDS"), "{err}");
    }

    #[test]
    fn a_slide_that_does_not_divide_the_window_is_rejected() {
        let err =
            Config::load(None, env(&[("VIGIL_DEVICES_DEVICE_WINDOW_SLIDE_SECONDS", "2")])).unwrap_err().to_string();
        assert!(err.contains("multiple of its slide"), "{err}");
    }

    #[test]
    fn printed_configuration_loads_back_unchanged() {
        let c = Config::default();
        let back: Config = toml::from_str(&c.to_toml()).unwrap();
        assert_eq!(back, c);
    }
}
