//! What a reset cannot make clean, said rather than refused: an input only some of
//! whose writers are reset, and a stage left out that reads a reset stage's output.

use vigil_model::topology::StageTopology;

use super::plan::writers;
use super::verb_for;

/// An input some but not all of whose writers are reset cannot be replayed cleanly:
/// read from the beginning, the reset writers' records come twice.
pub(super) fn half_reset_inputs(
    graph: &[StageTopology],
    selected: &[&StageTopology],
    is_reset: &impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut warnings = Vec::new();
    for stage in selected {
        for (input, _) in stage.inputs {
            let (reset, kept): (Vec<&str>, Vec<&str>) =
                writers(graph, input.name).iter().map(|w| w.name).partition(|w| is_reset(w));
            if !reset.is_empty() && !kept.is_empty() {
                warnings.push(format!(
                    "{} reads {} again from the beginning, because {} (not reset) wrote to it too; what {} \
                     wrote there before comes to it twice: reset {} as well for a clean replay",
                    stage.name,
                    input.name,
                    kept.join(", "),
                    reset.join(", "),
                    kept.join(", ")
                ));
            }
        }
    }
    warnings
}

/// A stage left out that reads a reset stage's output sees the replay on top of its
/// old state and position.
pub(super) fn readers_left_out(
    graph: &[StageTopology],
    is_reset: &impl Fn(&str) -> bool,
    to_latest: bool,
) -> Vec<String> {
    let mut warnings = Vec::new();
    for reader in graph.iter().filter(|s| !is_reset(s.name)) {
        for (input, _) in reader.inputs {
            let reset_writers: Vec<&str> =
                writers(graph, input.name).iter().map(|w| w.name).filter(|w| is_reset(w)).collect();
            if reset_writers.is_empty() {
                continue;
            }
            let they = if reset_writers.len() == 1 { "it" } else { "they" };
            let write = verb_for("write", reset_writers.len());
            let effect = if to_latest {
                format!("keeps its old state for what {they} {write} next")
            } else {
                format!("sees what {they} {write} again a second time")
            };
            warnings.push(format!(
                "{} is not reset but reads {}, which {} {write}: it {effect}; reset it too (--all resets every stage)",
                reader.name,
                input.name,
                reset_writers.join(", "),
            ));
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use crate::reset::seed::{plan_of, start};
    use crate::reset::{Options, Start};

    #[test]
    fn the_stages_downstream_of_a_reset_are_warned_about() {
        let plan = plan_of(&["join-enrich"], &Options::default());
        assert_eq!(plan.warnings.len(), 2, "{:#?}", plan.warnings);
        for (warning, reader) in plan.warnings.iter().zip(["payment-metrics", "payment-anomalies"]) {
            assert!(warning
                .starts_with(&format!("{reader} is not reset but reads enriched-payments, which join-enrich writes")));
            assert!(warning.contains("a second time") && warning.contains("--all"), "{warning}");
        }
    }

    #[test]
    fn an_input_with_a_writer_left_out_is_read_from_the_beginning_with_a_warning() {
        let plan = plan_of(&["device-analytics", "health-monitor"], &Options::default());
        assert_eq!(start(&plan, "health-monitor", "device-events-late"), Start::Beginning);
        assert_eq!(start(&plan, "health-monitor", "device-events-ontime"), Start::Beginning);
        assert_eq!(plan.warnings.len(), 1, "{:#?}", plan.warnings);
        let warning = &plan.warnings[0];
        assert!(warning.starts_with("health-monitor reads device-events-late again from the beginning"), "{warning}");
        assert!(
            warning.contains("device-router (not reset)") && warning.contains("what device-analytics"),
            "{warning}"
        );
    }
}
