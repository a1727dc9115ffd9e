//! `[anomalies] provisional`: amount anomalies come at once, and their corrections
//! follow. Net of the corrections, the verdicts are exactly those without the
//! option, and nothing else the pipeline writes changes.

use std::collections::BTreeSet;

use vigil_datagen::Dataset;
use vigil_ingest::MergedInput;
use vigil_model::Config;
use vigil_operators::SeedPipeline;

fn lines(provisional: bool) -> Vec<String> {
    let mut config = Config::default();
    config.anomalies.provisional = provisional;
    // The planted section (a history, then pay-9003) and traffic in the seed's disorder.
    let input = MergedInput::from_dataset(Dataset::planted(500, 7));
    vigil_embedded::result_lines(&SeedPipeline::default(), &config, input).unwrap()
}

fn json(line: &str) -> serde_json::Value {
    serde_json::from_str(line.split_once("> ").unwrap().1).unwrap()
}

fn is_amount(line: &str) -> bool {
    line.starts_with("ANOMALY>") && json(line)["anomaly_type"] == "amount"
}

#[test]
fn net_of_corrections_the_provisional_verdicts_are_the_event_time_ones() {
    let (with, without) = (lines(true), lines(false));
    let others = |lines: &[String]| -> Vec<String> { lines.iter().filter(|l| !is_amount(l)).cloned().collect() };
    assert_eq!(others(&with), others(&without), "only amount anomalies change");

    let expected: BTreeSet<String> =
        without.iter().filter(|l| is_amount(l)).map(|l| json(l)["payment_id"].as_str().unwrap().into()).collect();
    let mut net = BTreeSet::new();
    let (mut provisional, mut retracted, mut missed) = (0, 0, 0);
    for line in with.iter().filter(|l| is_amount(l)) {
        let a = json(line);
        let payment = a["payment_id"].as_str().unwrap().to_string();
        match (a["provisional"].as_bool(), a["retracted"].as_bool(), a["revision"].as_u64()) {
            (Some(true), None, None) => {
                provisional += 1;
                assert!(net.insert(payment), "one provisional verdict per payment: {line}");
            }
            (None, Some(true), Some(2)) => {
                retracted += 1;
                assert!(net.remove(&payment), "a retraction follows its provisional anomaly: {line}");
            }
            (None, None, Some(2)) => {
                missed += 1;
                assert!(net.insert(payment), "a missed anomaly was not given a provisional one: {line}");
            }
            _ => panic!("an amount verdict is provisional, a retraction or a revision 2: {line}"),
        }
    }
    assert_eq!(net, expected);
    assert!(provisional > 0 && expected.contains("pay-9003"), "the planted anomaly among them");
    eprintln!("provisional {provisional}, retracted {retracted}, missed {missed}, final {}", expected.len());
}
