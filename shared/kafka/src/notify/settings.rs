//! Where alerts go, configured as the rest: the TOML file's `[notify]` table, then
//! `VIGIL_NOTIFY_…` variables, which win. docs/notifications.md lists every setting.
//! A mistake (an unknown key or channel, a URL that is not http or https) stops the
//! process as it starts.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use serde::Deserialize;

use super::policy::Backoff;

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NotifySettings {
    /// Print each alert's tagged line on standard output.
    pub stdout: bool,
    pub webhooks: Vec<WebhookSettings>,
    pub file: Option<FileSettings>,
    pub retry: RetrySettings,
    pub breaker: BreakerSettings,
}

/// How a webhook's body looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// The alert, its identity, revision, idempotency key and tagged line.
    Generic,
    /// As Slack's incoming webhooks take it (`text`), with the same fields beside.
    Slack,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSettings {
    pub url: String,
    #[serde(default = "generic")]
    pub format: Format,
    /// Sent with every request (`Authorization = "Bearer …"`).
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    #[serde(default = "ten")]
    pub rate_per_second: f64,
    #[serde(default = "ten_u32")]
    pub burst: u32,
    #[serde(default = "five_seconds")]
    pub timeout_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSettings {
    pub path: PathBuf,
    /// A new file once the current one holds this much…
    #[serde(default = "ten_megabytes")]
    pub max_bytes: u64,
    /// …or is this old (0: never by age).
    #[serde(default = "one_day")]
    pub max_age_seconds: u64,
    /// Rotated files kept beside the current one.
    #[serde(default = "ten_usize")]
    pub keep: usize,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetrySettings {
    pub first_ms: u64,
    pub max_ms: u64,
    /// A delivery still failing this long after its first attempt is a dead letter.
    pub give_up_after_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BreakerSettings {
    /// Failures in a row that open a channel's breaker…
    pub failures: u32,
    /// …for this long, before one trial call.
    pub open_ms: u64,
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings { first_ms: 250, max_ms: 10_000, give_up_after_ms: 300_000 }
    }
}

impl Default for BreakerSettings {
    fn default() -> Self {
        BreakerSettings { failures: 5, open_ms: 5_000 }
    }
}

fn generic() -> Format {
    Format::Generic
}
fn ten() -> f64 {
    10.0
}
fn ten_u32() -> u32 {
    10
}
fn ten_usize() -> usize {
    10
}
fn five_seconds() -> u64 {
    5_000
}
fn ten_megabytes() -> u64 {
    10 * 1024 * 1024
}
fn one_day() -> u64 {
    86_400
}

#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("[notify] in {path}: {message}")]
    File { path: String, message: String },
    #[error("{var}={value:?}: {message}")]
    Var { var: String, value: String, message: String },
    #[error("webhook URL `{url}`: {message}; give a full http:// or https:// URL")]
    Url { url: String, message: String },
    #[error("[notify] {0}")]
    Invalid(String),
}

const PREFIX: &str = "VIGIL_NOTIFY_";

impl NotifySettings {
    /// The channels a notifier delivers to; none configured leaves it off.
    pub fn is_off(&self) -> bool {
        !self.stdout && self.webhooks.is_empty() && self.file.is_none()
    }

    pub fn backoff(&self) -> Backoff {
        Backoff { first: Duration::from_millis(self.retry.first_ms), max: Duration::from_millis(self.retry.max_ms) }
    }

    /// The file's `[notify]` table (if any), then the variables among `vars`.
    pub fn from_sources(
        file: Option<(&str, &toml::Table)>,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<NotifySettings, NotifyError> {
        let mut settings = match file.and_then(|(path, t)| t.get("notify").map(|n| (path, n))) {
            Some((path, table)) => NotifySettings::deserialize(table.clone())
                .map_err(|e| NotifyError::File { path: path.to_string(), message: e.to_string() })?,
            None => NotifySettings::default(),
        };
        let mut webhook: Option<WebhookSettings> = None;
        for (var, value) in vars {
            let Some(name) = var.strip_prefix(PREFIX) else { continue };
            let bad =
                |message: &str| NotifyError::Var { var: var.clone(), value: value.clone(), message: message.into() };
            let number = || value.trim().parse::<u64>().map_err(|_| bad("not a whole number"));
            let hook = || WebhookSettings {
                url: String::new(),
                format: Format::Generic,
                headers: Default::default(),
                rate_per_second: ten(),
                burst: ten_u32(),
                timeout_ms: five_seconds(),
            };
            match name {
                "STDOUT" => settings.stdout = value.trim().parse().map_err(|_| bad("say true or false"))?,
                "WEBHOOK_URL" => webhook.get_or_insert_with(hook).url = value.clone(),
                "WEBHOOK_FORMAT" => {
                    webhook.get_or_insert_with(hook).format = match value.trim() {
                        "generic" => Format::Generic,
                        "slack" => Format::Slack,
                        _ => return Err(bad("say generic or slack")),
                    }
                }
                "WEBHOOK_AUTHORIZATION" => {
                    webhook.get_or_insert_with(hook).headers.insert("Authorization".into(), value.clone());
                }
                "WEBHOOK_RATE_PER_SECOND" => {
                    webhook.get_or_insert_with(hook).rate_per_second =
                        value.trim().parse().map_err(|_| bad("not a number"))?
                }
                "FILE_PATH" => {
                    let file = settings.file.get_or_insert(FileSettings {
                        path: PathBuf::new(),
                        max_bytes: ten_megabytes(),
                        max_age_seconds: one_day(),
                        keep: ten_usize(),
                    });
                    file.path = PathBuf::from(&value);
                }
                "RETRY_GIVE_UP_AFTER_MS" => settings.retry.give_up_after_ms = number()?,
                "RETRY_FIRST_MS" => settings.retry.first_ms = number()?,
                "RETRY_MAX_MS" => settings.retry.max_ms = number()?,
                _ => {
                    return Err(bad(
                        "not a notifier setting: VIGIL_NOTIFY_ takes STDOUT, WEBHOOK_URL, WEBHOOK_FORMAT, \
                         WEBHOOK_AUTHORIZATION, WEBHOOK_RATE_PER_SECOND, FILE_PATH, RETRY_FIRST_MS, RETRY_MAX_MS \
                         and RETRY_GIVE_UP_AFTER_MS",
                    ))
                }
            }
        }
        if let Some(hook) = webhook {
            if hook.url.is_empty() {
                return Err(NotifyError::Invalid("VIGIL_NOTIFY_WEBHOOK_* needs VIGIL_NOTIFY_WEBHOOK_URL".into()));
            }
            settings.webhooks.push(hook);
        }
        settings.validate()?;
        Ok(settings)
    }

    fn validate(&self) -> Result<(), NotifyError> {
        for hook in &self.webhooks {
            let url = reqwest::Url::parse(&hook.url)
                .map_err(|e| NotifyError::Url { url: hook.url.clone(), message: e.to_string() })?;
            if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
                return Err(NotifyError::Url { url: hook.url.clone(), message: "not an http(s) URL".into() });
            }
            if hook.rate_per_second.is_nan() || hook.rate_per_second <= 0.0 {
                return Err(NotifyError::Invalid(format!("the rate of {} must be above 0", hook.url)));
            }
        }
        if self.file.as_ref().is_some_and(|f| f.path.as_os_str().is_empty()) {
            return Err(NotifyError::Invalid("file.path is empty".into()));
        }
        if self.retry.first_ms == 0 || self.retry.max_ms < self.retry.first_ms {
            return Err(NotifyError::Invalid("retry wants 0 < first_ms <= max_ms".into()));
        }
        Ok(())
    }
}

static LOADED: OnceLock<NotifySettings> = OnceLock::new();

/// Reads the process's notifier settings once, from `config_file` and the
/// environment: a mistake stops it as it starts, before any member runs.
pub fn load(config_file: Option<&Path>) -> Result<&'static NotifySettings, NotifyError> {
    if let Some(loaded) = LOADED.get() {
        return Ok(loaded);
    }
    let table = match config_file {
        Some(path) => {
            let shown = path.display().to_string();
            let text = std::fs::read_to_string(path)
                .map_err(|e| NotifyError::File { path: shown.clone(), message: e.to_string() })?;
            Some((
                shown.clone(),
                text.parse::<toml::Table>().map_err(|e| NotifyError::File { path: shown, message: e.to_string() })?,
            ))
        }
        None => None,
    };
    let settings = NotifySettings::from_sources(table.as_ref().map(|(p, t)| (p.as_str(), t)), std::env::vars())?;
    Ok(LOADED.get_or_init(|| settings))
}

/// What `load` read (the defaults, with no channel, before it ran).
pub fn loaded() -> &'static NotifySettings {
    LOADED.get_or_init(NotifySettings::default)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn the_file_and_the_variables_configure_channels() {
        let table: toml::Table = r#"
            [notify]
            stdout = true
            [[notify.webhooks]]
            url = "https://hooks.example.com/a"
            format = "slack"
            headers = { Authorization = "Bearer x" }
            [notify.file]
            path = "alerts.log"
            max_bytes = 1000
        "#
        .parse()
        .unwrap();
        let s = NotifySettings::from_sources(
            Some(("vigil.toml", &table)),
            vars(&[("VIGIL_NOTIFY_WEBHOOK_URL", "http://receiver:9000/alerts"), ("VIGIL_OTHER", "x")]),
        )
        .unwrap();
        assert!(s.stdout && !s.is_off());
        assert_eq!(s.webhooks.len(), 2);
        assert_eq!(s.webhooks[0].format, Format::Slack);
        assert_eq!(s.webhooks[1].url, "http://receiver:9000/alerts");
        assert_eq!(s.file.as_ref().unwrap().max_bytes, 1000);
        assert_eq!(s.file.as_ref().unwrap().keep, 10);
        assert!(NotifySettings::from_sources(None, vars(&[])).unwrap().is_off());
    }

    #[test]
    fn mistakes_are_named() {
        let table: toml::Table = "[notify]\n[[notify.pager]]\nurl = \"x\"".parse().unwrap();
        let e = NotifySettings::from_sources(Some(("vigil.toml", &table)), vars(&[])).unwrap_err();
        assert!(e.to_string().contains("unknown field `pager`"), "{e}");
        let e = NotifySettings::from_sources(None, vars(&[("VIGIL_NOTIFY_WEBHOOK_URL", "receiver:9000")])).unwrap_err();
        assert!(e.to_string().contains("http"), "{e}");
        let e = NotifySettings::from_sources(None, vars(&[("VIGIL_NOTIFY_WEBHOOK_URL", "ftp://x/y")])).unwrap_err();
        assert!(e.to_string().contains("not an http(s) URL"), "{e}");
        let e = NotifySettings::from_sources(None, vars(&[("VIGIL_NOTIFY_PAGER", "1")])).unwrap_err();
        assert!(e.to_string().contains("not a notifier setting"), "{e}");
        let e = NotifySettings::from_sources(None, vars(&[("VIGIL_NOTIFY_WEBHOOK_FORMAT", "slack")])).unwrap_err();
        assert!(e.to_string().contains("WEBHOOK_URL"), "{e}");
    }
}
