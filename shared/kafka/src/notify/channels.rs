//! The places an alert goes: a webhook, a rolling file, standard output. Each call
//! delivers one alert once, or says whether trying again may help.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use serde_json::json;

use super::alert::Alert;
use super::settings::{FileSettings, Format, WebhookSettings};

/// Why a delivery failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Worth another try: the receiver is down, slow, overloaded (429, 5xx).
    Retry(String),
    /// Another try gets the same answer (a 4xx other than 429).
    Permanent(String),
}

pub trait Channel: Send {
    /// How metrics and dead letters name it (`webhook:https://host/path`).
    fn name(&self) -> &str;
    fn deliver(&mut self, alert: &Alert) -> Result<(), Failure>;
}

/// The body a receiver gets: the alert and what tells repeats and corrections apart.
pub fn body(alert: &Alert, format: Format) -> serde_json::Value {
    let mut body = json!({
        "idempotency_key": alert.idempotency_key(),
        "alert_id": alert.id(),
        "revision": alert.revision,
        "topic": alert.topic,
        "rule": alert.rule,
        "line": alert.line,
        "alert": alert.fields,
    });
    if format == Format::Slack {
        let what = if alert.revision > 1 { format!("correction {} of ", alert.revision) } else { String::new() };
        body["text"] = json!(format!("Vigil {what}{} `{}`: {}", alert.rule, alert.subject, alert.line));
    }
    body
}

pub struct Webhook {
    name: String,
    settings: WebhookSettings,
    client: reqwest::blocking::Client,
}

impl Webhook {
    pub fn new(settings: WebhookSettings) -> anyhow::Result<Webhook> {
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_millis(settings.timeout_ms))
            .build()
            .map_err(|e| anyhow::anyhow!("cannot make an HTTP client for {}: {e}", settings.url))?;
        let name = format!("webhook:{}", crate::connection::redacted_url(&settings.url));
        Ok(Webhook { name, settings, client })
    }
}

impl Channel for Webhook {
    fn name(&self) -> &str {
        &self.name
    }

    fn deliver(&mut self, alert: &Alert) -> Result<(), Failure> {
        let key = alert.idempotency_key();
        let mut request = self
            .client
            .post(&self.settings.url)
            .header("Content-Type", "application/json")
            .header("Idempotency-Key", &key)
            .header("X-Vigil-Alert-Id", alert.id())
            .header("X-Vigil-Revision", alert.revision.to_string());
        for (name, value) in &self.settings.headers {
            request = request.header(name, value);
        }
        let body = body(alert, self.settings.format).to_string();
        match request.body(body).send() {
            Ok(response) if response.status().is_success() => Ok(()),
            Ok(response) => {
                let status = response.status();
                let text: String = response.text().unwrap_or_default().chars().take(200).collect();
                let reason = format!("{} answered {status}: {text}", self.name);
                if status.as_u16() == 429 || status.is_server_error() {
                    Err(Failure::Retry(reason))
                } else {
                    Err(Failure::Permanent(reason))
                }
            }
            Err(e) => Err(Failure::Retry(format!("{}: {e}", self.name))),
        }
    }
}

/// One line per alert in the seed's tagged form, in a file that is set aside (as
/// `<path>.<epoch ms>`) once it is too big or too old; the oldest beyond `keep` are
/// removed.
pub struct RollingFile {
    name: String,
    settings: FileSettings,
    open: Option<(File, u64, SystemTime)>,
}

impl RollingFile {
    pub fn new(settings: FileSettings) -> RollingFile {
        RollingFile { name: format!("file:{}", settings.path.display()), settings, open: None }
    }

    fn file(&mut self) -> std::io::Result<&mut (File, u64, SystemTime)> {
        if let Some((_, size, opened)) = &self.open {
            let age = SystemTime::now().duration_since(*opened).unwrap_or_default();
            let too_old = self.settings.max_age_seconds > 0 && age.as_secs() >= self.settings.max_age_seconds;
            if *size >= self.settings.max_bytes || too_old {
                self.open = None;
                self.rotate()?;
            }
        }
        if self.open.is_none() {
            if let Some(dir) = self.settings.path.parent().filter(|d| !d.as_os_str().is_empty()) {
                fs::create_dir_all(dir)?;
            }
            let file = OpenOptions::new().create(true).append(true).open(&self.settings.path)?;
            let meta = file.metadata()?;
            let opened = meta.created().or_else(|_| meta.modified()).unwrap_or_else(|_| SystemTime::now());
            self.open = Some((file, meta.len(), opened));
        }
        Ok(self.open.as_mut().expect("opened above"))
    }

    fn rotate(&self) -> std::io::Result<()> {
        let path = &self.settings.path;
        let ms = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_millis();
        let mut aside = path.clone().into_os_string();
        aside.push(format!(".{ms}"));
        fs::rename(path, &aside)?;
        let mut rotated = self.rotated()?;
        rotated.sort();
        let excess = rotated.len().saturating_sub(self.settings.keep);
        rotated.iter().take(excess).try_for_each(fs::remove_file)
    }

    /// The files set aside so far (their suffix is a time, so they sort by age).
    fn rotated(&self) -> std::io::Result<Vec<PathBuf>> {
        let path = &self.settings.path;
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
        let prefix = format!("{}.", path.file_name().unwrap_or_default().to_string_lossy());
        Ok(fs::read_dir(dir)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.file_name().map(|n| n.to_string_lossy().into_owned()).is_some_and(|n| {
                    n.strip_prefix(&prefix)
                        .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
                })
            })
            .collect())
    }
}

impl Channel for RollingFile {
    fn name(&self) -> &str {
        &self.name
    }

    fn deliver(&mut self, alert: &Alert) -> Result<(), Failure> {
        let line = format!("{}\n", alert.line);
        let written = self.file().and_then(|(file, size, _)| {
            file.write_all(line.as_bytes())?;
            *size += line.len() as u64;
            Ok(())
        });
        written.map_err(|e| {
            self.open = None;
            Failure::Retry(format!("cannot write {}: {e}", self.settings.path.display()))
        })
    }
}

/// Standard output, a line per alert.
pub struct Stdout;

impl Channel for Stdout {
    fn name(&self) -> &str {
        "stdout"
    }

    fn deliver(&mut self, alert: &Alert) -> Result<(), Failure> {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", alert.line).and_then(|_| out.flush()).map_err(|e| Failure::Retry(format!("stdout: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_model::topology::HEALTH_ALERTS;

    fn alert(n: u32) -> Alert {
        let json = format!(
            r#"{{"record_type": "health_alert", "reason": "throughput_below_floor", "severity": "critical", "gap_ms": {n}, "threshold_ms": 5000, "resumed_at": "2024-01-01T00:00:{n:02}Z"}}"#
        );
        Alert::from_json(&HEALTH_ALERTS, &json).unwrap()
    }

    #[test]
    fn the_file_rolls_over_by_size_and_keeps_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("alerts").join("vigil.log");
        let mut file =
            RollingFile::new(FileSettings { path: path.clone(), max_bytes: 300, max_age_seconds: 0, keep: 2 });
        for n in 0..20 {
            file.deliver(&alert(n)).unwrap();
            // Rotated names are epoch milliseconds: one rotation a millisecond at most.
            std::thread::sleep(Duration::from_millis(2));
        }
        let current = fs::read_to_string(&path).unwrap();
        assert!(current.ends_with("\"resumed_at\": \"2024-01-01T00:00:19Z\"}\n"), "{current}");
        assert!(current.lines().all(|l| l.starts_with("HEALTH_ALERT> {")));
        assert_eq!(file.rotated().unwrap().len(), 2, "only `keep` rotated files stay");
        let kept: usize = file.rotated().unwrap().iter().map(|p| fs::read_to_string(p).unwrap().lines().count()).sum();
        assert!(kept >= 2, "the newest rotated files hold lines");
    }

    #[test]
    fn a_slack_body_carries_text_and_the_same_key() {
        let a = alert(7);
        let slack = body(&a, Format::Slack);
        assert!(slack["text"].as_str().unwrap().starts_with("Vigil throughput_below_floor `pipeline`: HEALTH_ALERT>"));
        assert_eq!(slack["idempotency_key"], body(&a, Format::Generic)["idempotency_key"]);
        assert_eq!(slack["alert"]["gap_ms"], 7);
    }
}
