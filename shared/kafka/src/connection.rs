//! How every Vigil client reaches a secured Kafka and schema registry, configured
//! as the rest: in the TOML file (`--config`, `VIGIL_CONFIG`) and by `VIGIL_…`
//! variables, which win.
//!
//! Kafka: the file's `[kafka]` table holds librdkafka's own properties as they are
//! (`"sasl.mechanism" = "SCRAM-SHA-512"`); `VIGIL_KAFKA_SECURITY_PROTOCOL` and the
//! `VIGIL_KAFKA_SASL_*` and `VIGIL_KAFKA_SSL_*` variables are the same properties with
//! dots written as underscores. Only `security.protocol`, `sasl.*` and `ssl.*` are
//! taken (nothing that would change the clients' transactions or isolation), and they
//! go to every client a process makes: consumers, producers, the admin, changelog
//! readers, the election. Registry: `[schema_registry]` `username`, `password` (HTTP
//! basic auth) and `ca_location` (a PEM file of certificates to trust for an https
//! URL, besides the system's), or `VIGIL_SCHEMA_REGISTRY_USERNAME`, `…_PASSWORD`,
//! `…_CA_LOCATION`.
//!
//! Secrets show as `***` wherever the settings are printed; keep them out of command
//! lines (visible to every user of a machine): a file readable by the service only, or
//! the environment.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;
use tracing::warn;

const KAFKA_PREFIX: &str = "VIGIL_KAFKA_";
const REGISTRY_USERNAME: &str = "VIGIL_SCHEMA_REGISTRY_USERNAME";
const REGISTRY_PASSWORD: &str = "VIGIL_SCHEMA_REGISTRY_PASSWORD";
const REGISTRY_CA: &str = "VIGIL_SCHEMA_REGISTRY_CA_LOCATION";
/// The librdkafka settings passed on: those of security, nothing that would change
/// how Vigil's clients behave (their ids, isolation, transactions).
const KAFKA_SETTINGS: [&str; 5] = ["security.protocol", "sasl.", "ssl.", "enable.ssl.", "enable.sasl."];

#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error(
        "{var} is not a Kafka security setting: Vigil passes on security.protocol, sasl.* and ssl.* (in [kafka] \
         as they are, or as VIGIL_KAFKA_SECURITY_PROTOCOL, VIGIL_KAFKA_SASL_*, VIGIL_KAFKA_SSL_*)"
    )]
    NotSecurity { var: String },
    #[error("{0} in [schema_registry] is not a setting: it takes username, password and ca_location")]
    NotRegistry(String),
    #[error("{0} must be a string")]
    NotString(String),
    #[error("the registry's username and password go together: set both for basic auth, or neither")]
    HalfCredentials,
    #[error("cannot read the configuration file {path}: {message}")]
    File { path: String, message: String },
}

/// The security settings of one process's Kafka clients and registry client.
#[derive(Clone, Default, PartialEq)]
pub struct Security {
    /// librdkafka property → value.
    kafka: BTreeMap<String, String>,
    pub registry_credentials: Option<(String, String)>,
    pub registry_ca: Option<PathBuf>,
}

fn is_security_property(property: &str) -> bool {
    KAFKA_SETTINGS.iter().any(|s| property == *s || (s.ends_with('.') && property.starts_with(s)))
}

impl Security {
    /// The settings among `vars` (the environment's, in a process).
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Result<Security, ConnectionError> {
        Security::from_sources(&toml::Table::new(), vars)
    }

    /// The settings of a configuration file's `[kafka]` and `[schema_registry]`
    /// tables, then those among `vars`, which win.
    pub fn from_sources(
        file: &toml::Table,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Security, ConnectionError> {
        let mut security = Security::default();
        let string = |name: String, value: &toml::Value| match value {
            toml::Value::String(s) => Ok(s.clone()),
            toml::Value::Boolean(b) => Ok(b.to_string()),
            toml::Value::Integer(i) => Ok(i.to_string()),
            _ => Err(ConnectionError::NotString(name)),
        };
        let table = |name: &str| match file.get(name) {
            Some(toml::Value::Table(t)) => Ok(t.clone()),
            Some(_) => Err(ConnectionError::NotString(format!("[{name}]"))),
            None => Ok(toml::Table::new()),
        };
        for (property, value) in table("kafka")? {
            if !is_security_property(&property) {
                return Err(ConnectionError::NotSecurity { var: format!("[kafka] {property}") });
            }
            let value = string(format!("[kafka] {property}"), &value)?;
            security.kafka.insert(property, value);
        }
        let (mut username, mut password) = (None, None);
        for (key, value) in table("schema_registry")? {
            let value = string(format!("[schema_registry] {key}"), &value)?;
            match key.as_str() {
                "username" => username = Some(value),
                "password" => password = Some(value),
                "ca_location" => security.registry_ca = Some(PathBuf::from(value)),
                _ => return Err(ConnectionError::NotRegistry(key)),
            }
        }
        for (var, value) in vars {
            if let Some(name) = var.strip_prefix(KAFKA_PREFIX) {
                let property = name.to_lowercase().replace('_', ".");
                if !is_security_property(&property) {
                    return Err(ConnectionError::NotSecurity { var });
                }
                security.kafka.insert(property, value);
            } else if var == REGISTRY_USERNAME {
                username = Some(value);
            } else if var == REGISTRY_PASSWORD {
                password = Some(value);
            } else if var == REGISTRY_CA {
                security.registry_ca = Some(PathBuf::from(value));
            }
        }
        security.registry_credentials = match (username, password) {
            (Some(u), Some(p)) => Some((u, p)),
            (None, None) => None,
            _ => return Err(ConnectionError::HalfCredentials),
        };
        Ok(security)
    }

    /// Adds the Kafka settings to a client's configuration.
    pub fn apply(&self, config: &mut ClientConfig) {
        for (property, value) in &self.kafka {
            config.set(property, value);
        }
    }
}

/// Whether a librdkafka property holds a secret (a password, a private key).
fn is_secret(property: &str) -> bool {
    property.contains("password") || property.contains("secret") || property == "ssl.key.pem"
}

impl fmt::Debug for Security {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kafka: BTreeMap<&str, &str> =
            self.kafka.iter().map(|(k, v)| (k.as_str(), if is_secret(k) { "***" } else { v.as_str() })).collect();
        f.debug_struct("Security")
            .field("kafka", &kafka)
            .field("registry_username", &self.registry_credentials.as_ref().map(|(user, _)| user))
            .field("registry_password", &self.registry_credentials.as_ref().map(|_| "***"))
            .field("registry_ca", &self.registry_ca)
            .finish()
    }
}

static SECURITY: OnceLock<Security> = OnceLock::new();

/// Reads this process's settings from its configuration file (if any) and its
/// environment, once: every binary calls it as it starts, so a mistake in them stops
/// it there with a clear error.
pub fn load(config_file: Option<&Path>) -> Result<&'static Security, ConnectionError> {
    if let Some(security) = SECURITY.get() {
        return Ok(security);
    }
    let file = match config_file {
        Some(path) => {
            let error = |message: String| ConnectionError::File { path: path.display().to_string(), message };
            let text = std::fs::read_to_string(path).map_err(|e| error(e.to_string()))?;
            text.parse::<toml::Table>().map_err(|e| error(e.to_string()))?
        }
        None => toml::Table::new(),
    };
    let security = Security::from_sources(&file, std::env::vars())?;
    Ok(SECURITY.get_or_init(|| security))
}

/// This process's settings; none (plaintext, no credentials) unless [`load`] found some.
pub fn security() -> &'static Security {
    SECURITY.get_or_init(Security::default)
}

/// How often a client asks the broker for its topics' leaders unprompted.
/// librdkafka's default is five minutes: a client that missed a leader's return after
/// a broker restart (its last answer named no leader) sends nothing to that partition
/// until then, which is as long as a producer keeps a record before giving it up.
const METADATA_REFRESH: &str = "10000";

/// How long a client goes without a metadata answer before it starts over from
/// `bootstrap.servers`. librdkafka (since 2.10) forgets a broker that a metadata
/// answer leaves out, and a KRaft broker that was stalled past its controller
/// session answers, for the few milliseconds until it is unfenced, that no broker is
/// alive: a client that asked just then has no broker left to ask again, and by
/// default starts over only after five minutes (docs/decisions.md).
const REBOOTSTRAP_AFTER: &str = "10000";

/// A librdkafka configuration for `bootstrap_servers` with this process's security
/// settings: where every Vigil client starts.
pub fn client_config(bootstrap_servers: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap_servers);
    config.set("topic.metadata.refresh.interval.ms", METADATA_REFRESH);
    config.set("metadata.recovery.rebootstrap.trigger.ms", REBOOTSTRAP_AFTER);
    security().apply(&mut config);
    config
}

/// A consumer that may read a backlog fetches a partition again as soon as its
/// queue drains. librdkafka stops fetching a partition once `queued.min.messages`
/// of its records wait in the consumer's queue, then backs it off for
/// `fetch.queue.backoff.ms` (a second by default) however soon they are read, and a
/// pause does not reset that: a member reading a backlog sat half idle for seconds
/// (docs/decisions.md). It keeps up to `queued_records` of a partition (the queue
/// refills from below that). (The changelog reader, one partition a thread, sets
/// its own.)
pub fn fetch_again_when_drained(config: &mut ClientConfig, queued_records: u32) -> &mut ClientConfig {
    config.set("queued.min.messages", queued_records.to_string()).set("fetch.queue.backoff.ms", "10")
}

/// The context of a reader that waits for the end of its partitions, which
/// librdkafka reports as an error (logged as one by the default context): only real
/// errors are worth a log line.
pub struct QuietEof;

impl ClientContext for QuietEof {
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() != Some(RDKafkaErrorCode::PartitionEOF) {
            warn!(%error, reason, "Kafka client error");
        }
    }
}

impl ConsumerContext for QuietEof {}

/// A URL as it may be shown: credentials written into it (`https://user:pw@host`)
/// become `***`.
pub fn redacted_url(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.split('/').next().and_then(|authority| authority.rsplit_once('@')) {
            Some((_, host)) => format!("{scheme}://***@{host}{}", &rest[rest.find('/').unwrap_or(rest.len())..]),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn kafka_variables_become_librdkafka_security_settings_and_others_are_left_alone() {
        let security = Security::from_vars(vars(&[
            ("VIGIL_KAFKA_SECURITY_PROTOCOL", "SASL_SSL"),
            ("VIGIL_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512"),
            ("VIGIL_KAFKA_SASL_USERNAME", "vigil"),
            ("VIGIL_KAFKA_SASL_PASSWORD", "s3cret-pw"),
            ("VIGIL_KAFKA_SSL_CA_LOCATION", "/etc/vigil/ca.pem"),
            ("VIGIL_KAFKA_ENABLE_SSL_CERTIFICATE_VERIFICATION", "true"),
            ("VIGIL_BOOTSTRAP_SERVERS", "broker:9093"),
            ("PATH", "/usr/bin"),
        ]))
        .unwrap();
        let mut config = ClientConfig::new();
        security.apply(&mut config);
        assert_eq!(config.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(config.get("sasl.mechanism"), Some("SCRAM-SHA-512"));
        assert_eq!(config.get("sasl.username"), Some("vigil"));
        assert_eq!(config.get("sasl.password"), Some("s3cret-pw"));
        assert_eq!(config.get("ssl.ca.location"), Some("/etc/vigil/ca.pem"));
        assert_eq!(config.get("enable.ssl.certificate.verification"), Some("true"));
        assert_eq!(config.config_map().len(), 6, "nothing but security settings: {:?}", config.config_map());
    }

    #[test]
    fn a_kafka_variable_that_is_not_about_security_is_an_error_naming_it() {
        let err = Security::from_vars(vars(&[("VIGIL_KAFKA_TRANSACTIONAL_ID", "mine")])).unwrap_err().to_string();
        assert!(err.starts_with("VIGIL_KAFKA_TRANSACTIONAL_ID is not a Kafka security setting"), "{err}");
    }

    #[test]
    fn the_file_gives_librdkafka_properties_as_they_are_and_the_environment_wins() {
        let file: toml::Table = r#"
            [kafka]
            "security.protocol" = "SASL_SSL"
            "sasl.mechanism" = "PLAIN"
            "enable.ssl.certificate.verification" = true
            [schema_registry]
            username = "reader"
            password = "from-file"
        "#
        .parse()
        .unwrap();
        let security = Security::from_sources(
            &file,
            vars(&[("VIGIL_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512"), ("VIGIL_SCHEMA_REGISTRY_PASSWORD", "from-env")]),
        )
        .unwrap();
        let mut config = ClientConfig::new();
        security.apply(&mut config);
        assert_eq!(config.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(config.get("sasl.mechanism"), Some("SCRAM-SHA-512"));
        assert_eq!(config.get("enable.ssl.certificate.verification"), Some("true"));
        assert_eq!(security.registry_credentials, Some(("reader".into(), "from-env".into())));
        let isolation: toml::Table = "[kafka]\n\"isolation.level\" = \"read_uncommitted\"".parse().unwrap();
        let err = Security::from_sources(&isolation, vars(&[])).unwrap_err().to_string();
        assert!(err.starts_with("[kafka] isolation.level is not a Kafka security setting"), "{err}");
    }

    #[test]
    fn registry_credentials_come_in_pairs() {
        let both = Security::from_vars(vars(&[
            ("VIGIL_SCHEMA_REGISTRY_USERNAME", "reader"),
            ("VIGIL_SCHEMA_REGISTRY_PASSWORD", "pw"),
            ("VIGIL_SCHEMA_REGISTRY_CA_LOCATION", "/ca.pem"),
        ]))
        .unwrap();
        assert_eq!(both.registry_credentials, Some(("reader".into(), "pw".into())));
        assert_eq!(both.registry_ca, Some(PathBuf::from("/ca.pem")));
        let half = Security::from_vars(vars(&[("VIGIL_SCHEMA_REGISTRY_USERNAME", "reader")]));
        assert!(matches!(half, Err(ConnectionError::HalfCredentials)));
    }

    #[test]
    fn secrets_never_show_when_the_settings_are_printed() {
        let security = Security::from_vars(vars(&[
            ("VIGIL_KAFKA_SASL_USERNAME", "vigil"),
            ("VIGIL_KAFKA_SASL_PASSWORD", "s3cret-pw"),
            ("VIGIL_KAFKA_SSL_KEY_PASSWORD", "key-pw"),
            ("VIGIL_KAFKA_SSL_KEY_PEM", "-----BEGIN PRIVATE KEY-----"),
            ("VIGIL_SCHEMA_REGISTRY_USERNAME", "reader"),
            ("VIGIL_SCHEMA_REGISTRY_PASSWORD", "registry-pw"),
        ]))
        .unwrap();
        let shown = format!("{security:?}");
        for secret in ["s3cret-pw", "key-pw", "PRIVATE KEY", "registry-pw"] {
            assert!(!shown.contains(secret), "{secret} shows in {shown}");
        }
        assert!(shown.contains("vigil") && shown.contains("reader"), "{shown}");
    }

    #[test]
    fn credentials_in_a_url_are_not_shown() {
        assert_eq!(
            redacted_url("https://reader:pw@registry:8443/apis/ccompat/v7"),
            "https://***@registry:8443/apis/ccompat/v7"
        );
        assert_eq!(redacted_url("http://registry:8080/apis/ccompat/v7"), "http://registry:8080/apis/ccompat/v7");
        assert_eq!(redacted_url("http://a@b:1"), "http://***@b:1");
    }
}
