//! The refusal to reset a stage that still has members: which stages, whose members,
//! and what to do.

/// A stage that still has members: what
/// [`Admin::ensure_stopped`](super::Admin::ensure_stopped) refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Busy {
    pub stage: &'static str,
    pub group: String,
    /// `client id on host` of each member.
    pub members: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
#[error(
    "cannot reset a running stage: {}. Stop every instance of {} (or the taskmanagers running them) first, \
     then reset again; a member stopped a moment ago stays listed until its session expires (10 s)",
    describe(.0),
    stage_names(.0)
)]
pub struct Running(pub Vec<Busy>);

fn describe(busy: &[Busy]) -> String {
    let each = busy.iter().map(|b| {
        let n = b.members.len();
        format!(
            "{} has {n} member{} in group {} ({})",
            b.stage,
            if n == 1 { "" } else { "s" },
            b.group,
            b.members.join(", ")
        )
    });
    each.collect::<Vec<_>>().join("; ")
}

fn stage_names(busy: &[Busy]) -> String {
    let mut stages: Vec<&str> = busy.iter().map(|b| b.stage).collect();
    stages.dedup();
    stages.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_stages_their_members_and_what_to_do() {
        let running = Running(vec![
            Busy {
                stage: "join-enrich",
                group: "vigil-join-enrich".into(),
                members: vec!["vigil-join-enrich-0 on 127.0.0.1".into()],
            },
            Busy {
                stage: "health-monitor",
                group: "vigil-health-monitor-leader".into(),
                members: vec!["tm-1 on 10.0.0.2".into(), "tm-2 on 10.0.0.3".into()],
            },
        ]);
        let text = running.to_string();
        assert!(
            text.contains("join-enrich has 1 member in group vigil-join-enrich (vigil-join-enrich-0 on 127.0.0.1)"),
            "{text}"
        );
        assert!(text.contains("health-monitor has 2 members in group vigil-health-monitor-leader"), "{text}");
        assert!(text.contains("Stop every instance of join-enrich, health-monitor (or the taskmanagers"), "{text}");
    }
}
