//! The Prometheus rules (`deploy/prometheus/rules/vigil.yml`) and their `promtool`
//! tests name stages and topics by hand, in label matchers and labels. These tests
//! hold those names to the topology, so that a stage renamed, added or made global
//! in its definition fails here, with the line to fix, instead of silently leaving
//! an alert that matches nothing.

use std::collections::BTreeSet;

use vigil_model::topology::Topology;
use vigil_operators::SeedPipeline;
use vigil_stream::Pipeline;

const RULES_PATH: &str = "deploy/prometheus/rules/vigil.yml";
const RULES: &str = include_str!("../../../../deploy/prometheus/rules/vigil.yml");
const TESTS_PATH: &str = "deploy/prometheus/tests/vigil_test.yml";
const TESTS: &str = include_str!("../../../../deploy/prometheus/tests/vigil_test.yml");

/// The rule that must match exactly the global stages.
const GLOBAL_RULE: &str = "VigilGlobalStageSeveralActive";

fn topology() -> Topology {
    SeedPipeline::default().topology()
}

fn stage_names() -> BTreeSet<&'static str> {
    topology().stages.iter().map(|s| s.name).collect()
}

fn global_stages() -> BTreeSet<&'static str> {
    topology().stages.iter().filter(|s| s.global).map(|s| s.name).collect()
}

fn topic_names() -> BTreeSet<&'static str> {
    topology().topics().iter().map(|t| t.name).collect()
}

/// A label matcher in PromQL or in a series selector: `label="v"`, `label!="v"`,
/// `label=~"a|b"`, `label!~"a|b"`.
#[derive(Debug)]
struct Matcher {
    line: usize,
    op: &'static str,
    value: String,
}

impl Matcher {
    fn is_regex(&self) -> bool {
        self.op.ends_with('~')
    }

    /// The names it matches: the alternatives of a regex, or the value itself.
    /// `Err` for a regex that is more than plain alternatives of names.
    fn names(&self) -> Result<Vec<&str>, String> {
        if !self.is_regex() {
            return Ok(vec![self.value.as_str()]);
        }
        let names: Vec<&str> = self.value.split('|').collect();
        match names
            .iter()
            .find(|n| n.is_empty() || !n.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        {
            Some(bad) => Err(format!(
                "`{bad}` in {}\"{}\" is not a plain name: write the matcher as names joined by `|`, \
                 so that it can be checked against the topology",
                self.op, self.value
            )),
            None => Ok(names),
        }
    }
}

/// Every matcher on `label` in `text`, with its line (1-based).
fn matchers(text: &str, label: &str) -> Vec<Matcher> {
    let mut found = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let mut rest = line;
        let mut offset = 0;
        while let Some(at) = rest.find(label) {
            let start = offset + at;
            let before = line[..start].chars().next_back();
            let after = &line[start + label.len()..];
            offset = start + label.len();
            rest = &line[offset..];
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == '.') {
                continue;
            }
            let after = after.trim_start();
            let Some(op) = ["=~", "!~", "!=", "="].into_iter().find(|op| after.starts_with(op)) else {
                continue;
            };
            let Some(quoted) = after[op.len()..].trim_start().strip_prefix('"') else {
                continue;
            };
            let Some(end) = quoted.find('"') else {
                continue;
            };
            found.push(Matcher { line: i + 1, op, value: quoted[..end].to_string() });
        }
    }
    found
}

/// The values of YAML keys `key: "value"` (an alert test's `exp_labels`), with the
/// line and the alert the test is about (its `alertname:`).
fn yaml_labels<'a>(text: &'a str, key: &str) -> Vec<(usize, Option<&'a str>, &'a str)> {
    let mut alertname = None;
    let mut found = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_start().trim_start_matches("- ");
        if let Some(name) = line.strip_prefix("alertname:") {
            alertname = Some(name.trim().trim_matches('"'));
        } else if line.starts_with("name:") {
            alertname = None;
        } else if let Some(value) = line.strip_prefix(key).and_then(|l| l.strip_prefix(':')) {
            found.push((i + 1, alertname, value.trim().trim_matches(|c| c == '"' || c == '\'')));
        }
    }
    found
}

/// The text of one alerting rule: from its `- alert: NAME` to the next rule.
fn rule<'a>(text: &'a str, alert: &str) -> Option<(usize, &'a str)> {
    let head = format!("- alert: {alert}");
    let start = text.find(&head)?;
    let body = &text[start + head.len()..];
    let end = body.find("- alert:").map_or(text.len(), |e| start + head.len() + e);
    let first_line = text[..start].matches('\n').count() + 1;
    Some((first_line, &text[start..end]))
}

fn listing(set: &BTreeSet<&str>) -> String {
    set.iter().copied().collect::<Vec<_>>().join(", ")
}

/// Each stage a matcher on `stage` names must exist.
fn unknown_stages(path: &str, text: &str) -> Vec<String> {
    let stages = stage_names();
    let mut problems = Vec::new();
    for m in matchers(text, "stage") {
        match m.names() {
            Err(why) => problems.push(format!("{path}:{}: {why}", m.line)),
            Ok(names) => {
                for name in names.into_iter().filter(|n| !stages.contains(n)) {
                    problems.push(format!(
                        "{path}:{}: stage{}\"{}\" names `{name}`, which is no stage of the topology ({})",
                        m.line,
                        m.op,
                        m.value,
                        listing(&stages)
                    ));
                }
            }
        }
    }
    problems
}

#[test]
fn the_rules_name_only_stages_of_the_topology() {
    let problems = unknown_stages(RULES_PATH, RULES);
    assert!(problems.is_empty(), "the rules drifted from the topology:\n{}", problems.join("\n"));
}

#[test]
fn the_global_stage_rule_matches_exactly_the_global_stages() {
    let globals = global_stages();
    assert!(!globals.is_empty(), "the topology has no global stage: {GLOBAL_RULE} would have nothing to watch");
    let (line, text) = rule(RULES, GLOBAL_RULE)
        .unwrap_or_else(|| panic!("{RULES_PATH} has no alert {GLOBAL_RULE}, which watches the global stages"));
    let ms = matchers(text, "stage");
    let [m] = ms.as_slice() else {
        panic!("{RULES_PATH}:{line}: {GLOBAL_RULE} should select the global stages with one stage=~\"…\" matcher, found {ms:?}");
    };
    let listed: BTreeSet<&str> = match (m.op, m.names()) {
        ("=~" | "=", Ok(names)) => names.into_iter().collect(),
        (_, Err(why)) => panic!("{RULES_PATH}:{}: {why}", line + m.line - 1),
        (op, _) => panic!(
            "{RULES_PATH}:{}: {GLOBAL_RULE} selects stage{op}\"…\"; it should list the global stages",
            line + m.line - 1
        ),
    };
    let in_order: Vec<&str> = topology().stages.iter().filter(|s| s.global).map(|s| s.name).collect();
    let globals_regex = in_order.join("|");
    assert_eq!(
        listed,
        globals,
        "{RULES_PATH}:{}: {GLOBAL_RULE} should watch exactly the global stages of the topology \
         (`global: true` in their definitions); not global: [{}], missing: [{}]. Write stage=~\"{globals_regex}\"",
        line + m.line - 1,
        listing(&listed.difference(&globals).copied().collect()),
        listing(&globals.difference(&listed).copied().collect()),
    );
}

#[test]
fn the_rule_tests_name_only_stages_and_topics_of_the_topology() {
    let stages = stage_names();
    let topics = topic_names();
    let labels = yaml_labels(TESTS, "stage");
    assert!(
        !matchers(TESTS, "stage").is_empty() && !labels.is_empty(),
        "{TESTS_PATH}: no stage label found; has its format changed?"
    );
    let mut problems = unknown_stages(TESTS_PATH, TESTS);
    for (line, alert, stage) in labels {
        if !stages.contains(stage) {
            problems.push(format!(
                "{TESTS_PATH}:{line}: an expected alert has stage \"{stage}\", which is no stage of the topology ({})",
                listing(&stages)
            ));
        } else if alert == Some(GLOBAL_RULE) && !global_stages().contains(stage) {
            problems.push(format!(
                "{TESTS_PATH}:{line}: {GLOBAL_RULE} is expected for stage \"{stage}\", which is not global ({})",
                listing(&global_stages())
            ));
        }
    }
    for m in matchers(TESTS, "topic") {
        match m.names() {
            Err(why) => problems.push(format!("{TESTS_PATH}:{}: {why}", m.line)),
            Ok(names) => {
                for name in names.into_iter().filter(|n| !topics.contains(n)) {
                    problems.push(format!(
                        "{TESTS_PATH}:{}: topic{}\"{}\" names `{name}`, which is no topic of the topology",
                        m.line, m.op, m.value
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "the rule tests drifted from the topology:\n{}", problems.join("\n"));
}

#[test]
fn the_parser_finds_matchers_and_labels() {
    let text = r#"
      expr: max by (stage) (vigil_stage_members{role="active", stage=~"a|b-c"}) > 1 and x{stage = "d"}
      summary: "Stage {{ $labels.stage }}"
      - series: 'vigil_x{stage!="e", topic="t"}'
      - alertname: Foo
            stage: "f"
    "#;
    let found: Vec<(&str, String)> = matchers(text, "stage").into_iter().map(|m| (m.op, m.value)).collect();
    assert_eq!(found, [("=~", "a|b-c".to_string()), ("=", "d".to_string()), ("!=", "e".to_string())]);
    assert_eq!(matchers(text, "stage")[0].names().unwrap(), ["a", "b-c"]);
    assert!(Matcher { line: 1, op: "=~", value: "pay.*".into() }.names().is_err(), "a regex is refused");
    assert_eq!(yaml_labels(text, "stage"), [(6, Some("Foo"), "f")]);
    // Deliberate drift is caught, with the place to fix.
    let drift = r#"expr: vigil_stage_members{stage=~"payment-metrics|fraud-score"}"#;
    let problems = unknown_stages("r.yml", drift);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("r.yml:1: ") && problems[0].contains("`fraud-score`"), "{}", problems[0]);
}
