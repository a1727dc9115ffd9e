//! `vigil reset`: the command line of `vigil_kafka::reset`, which plans and
//! carries out the reset.

use anyhow::{Context, Result};
use clap::builder::PossibleValuesParser;
use vigil_kafka::names::Names;
use vigil_kafka::reset::{self, Admin, Options, Plan, Recreate, DEFAULT_GROUP};
use vigil_model::Config;

use super::topology;
use crate::stage_names;

/// Make stages process their inputs again from the start (stop them first).
///
/// For each stage: refuses (exit code 2) while any of its instances runs; deletes its
/// consumer group, so it reads its inputs again from the beginning; deletes its
/// changelog (its state, watermarks included) and creates it again empty and
/// compacted, as provision does; deletes a global stage's election group. An input
/// that other reset stages write is skipped to its end instead: they write it again.
/// Prints one line per action.
///
/// Input and output topics are left alone: what the stages wrote before stays, and
/// the replay's records come after it. A stage downstream of a reset one sees its
/// records twice unless it is reset too, so reset every stage (--all) for a full
/// replay. The inputs are replayed as they are: an end-of-input marker in them ends
/// the replay where it ended the first run; to process a new dataset after one that
/// ended, use --to-latest.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["stages", "all"])))]
pub struct ResetArgs {
    #[arg(long, env = "VIGIL_BOOTSTRAP_SERVERS", default_value = "127.0.0.1:9092")]
    bootstrap_servers: String,
    /// Stages to reset.
    #[arg(value_name = "STAGE", value_parser = PossibleValuesParser::new(stage_names()))]
    stages: Vec<String>,
    /// Reset every stage: a full replay.
    #[arg(long, conflicts_with = "stages")]
    all: bool,
    /// Consumer group of each stage, as the stages were given it (VIGIL_GROUP_ID);
    /// `{stage}` stands for the stage's name, so one pattern names every stage's group.
    #[arg(long, value_name = "GROUP", default_value = DEFAULT_GROUP)]
    group_id: String,
    /// Start every input at its end instead: forget the past and process only what
    /// is produced from now on.
    #[arg(long)]
    to_latest: bool,
    /// Print the plan (and whether a stage is running) without changing anything.
    #[arg(long)]
    dry_run: bool,
    /// Replication factor of the changelogs created again (default: the one they had).
    #[arg(long)]
    replication: Option<i32>,
}

pub fn run(args: ResetArgs, config: &Config) -> Result<()> {
    let topology = topology();
    let names = if args.all { stage_names().into_iter().map(String::from).collect() } else { args.stages.clone() };
    let cluster = Names::new(&config.topics, &topology);
    // The default groups are in the pipeline's namespace, as the stages take them.
    let group_id = if args.group_id == DEFAULT_GROUP { cluster.of(DEFAULT_GROUP) } else { args.group_id.clone() };
    let options = Options { group_id, to_latest: args.to_latest };
    let plan = reset::plan(&topology.stages, &names, &options)?;
    for warning in &plan.warnings {
        eprintln!("vigil reset: warning: {warning}");
    }
    let mut admin = Admin::connect(&args.bootstrap_servers, topology, cluster)?;
    if args.dry_run {
        return dry_run(&admin, &plan);
    }
    admin.ensure_stopped(&plan)?.iter().for_each(|line| println!("{line}"));
    let recreate = Recreate {
        partitions: config.runtime.partitions,
        topics: config.topics.clone(),
        replication: args.replication,
    };
    for action in plan.actions() {
        let outcome = admin
            .apply(&action, &recreate)
            .with_context(|| format!("{action} (the reset stopped here; it is safe to run again)"))?;
        println!("{action}: {outcome}");
    }
    Ok(())
}

/// The plan, then whether the reset would go ahead (the same check, the same exit
/// code), without changing anything.
fn dry_run(admin: &Admin, plan: &Plan) -> Result<()> {
    let checked = admin.ensure_stopped(plan);
    if let Ok(lines) = &checked {
        lines.iter().for_each(|line| println!("{line}"));
    }
    for action in plan.actions() {
        println!("{action}: not done (dry run)");
    }
    checked.map(drop)
}
