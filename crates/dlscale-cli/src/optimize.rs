//! `dlscale optimize` and `dlscale demo`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;
use clap::Args;
use dlscale_autoscaler::{decide_placed, PlacedDecision};
use dlscale_core::allocator::knapsack::SolverPath;
use dlscale_core::allocator::{team_policy_names, Teams};
use dlscale_core::jobfile::{parse_document, parse_jobs, FileFormat};
use dlscale_core::placement::{ShapeRule, Topology};
use dlscale_core::{
    policy_info, Admission, Cluster, CountRule, Decision, DecisionRequest, Fleet, Job, JobState,
    PolicyInfo, PolicyOptions, RestartAwareness, Settings, Utility, Weighing, REGISTRY,
};
use dlscale_server::input_file::read_input_file;
use dlscale_sim::teams::parse_teams_file;
use serde::Serialize;

use crate::input_error;

/// Output format of a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Aligned text table.
    Table,
    /// JSON document.
    Json,
}

/// Allocator settings shared by every command that runs an allocator. A flag left out keeps
/// the base settings' value (the core's defaults, or a simulation preset's).
#[derive(Debug, Clone, Args)]
pub struct PolicyArgs {
    /// What to maximise: speedup, throughput, goodput, fair (p = −1) or fair:P with P in [-10, 0)
    /// [default: speedup].
    #[arg(long, value_parser = clap::builder::ValueParser::new(parse_utility))]
    pub utility: Option<Utility>,
    /// What happens to a job whose minimum does not fit: drop (the paper) or queue [default:
    /// drop].
    #[arg(long, value_parser = clap::builder::ValueParser::new(parse_admission))]
    pub admission: Option<Admission>,
    /// With queue admission, let later jobs start while an earlier one waits.
    #[arg(long)]
    pub backfill: bool,
    /// A running job changes only if its own metric improves by more than this fraction
    /// [default: 0].
    #[arg(long)]
    pub min_gain: Option<f64>,
    /// Seconds of progress a restart costs, for Pollux's restart penalty (0: off) [default: 0].
    #[arg(long)]
    pub restart_cost_s: Option<f64>,
    /// Candidate per-GPU batch sizes tried per GPU count [default: 32].
    #[arg(long)]
    pub batch_candidates: Option<usize>,
    /// Tiresias: attained GPU-seconds after which a job drops to the low-priority queue
    /// [default: 3200; the Pollux preset: 57600].
    #[arg(long)]
    pub tiresias_threshold_gpu_s: Option<f64>,
    /// GPU counts elastic-batch and elastic-gpu offer a job besides its smallest and current
    /// one: any, powers-of-two or whole-nodes-beyond-one [default: any; the Pollux preset:
    /// powers-of-two].
    #[arg(long, value_parser = clap::builder::ValueParser::new(parse_counts))]
    pub counts: Option<CountRule>,
    /// Elastic-batch and elastic-gpu: a restarting job that would be spread over more nodes
    /// than its count needs is capped at the largest count that fits on the fewest nodes
    /// [default: false; the Pollux preset: true].
    #[arg(long)]
    pub consolidate: Option<bool>,
    /// Elastic-batch and elastic-gpu, shortest remaining first: a job with r seconds left (its
    /// declared work less what it has done) weighs (1 + r / scale)^(−this), and waiting jobs
    /// are admitted shortest first (0: off) [default: 0; the Pollux preset: 1.5].
    #[arg(long)]
    pub remaining_exponent: Option<f64>,
    /// The scale of `--remaining-exponent`, seconds [default: 3600].
    #[arg(long)]
    pub remaining_scale_s: Option<f64>,
    /// Elastic-batch and elastic-gpu, least attained service: a job that has held a
    /// GPU-seconds weighs (1 + a / scale)^(−this), so that young jobs get GPUs first (0: off)
    /// [default: 0].
    #[arg(long)]
    pub service_exponent: Option<f64>,
    /// The scale of `--service-exponent`, GPU-seconds [default: 3600].
    #[arg(long)]
    pub service_scale_gpu_s: Option<f64>,
}

impl PolicyArgs {
    /// The core's settings, validated.
    pub fn settings(&self) -> Result<Settings> {
        self.settings_over(Settings::default())
    }

    /// `base` with the flags given, validated.
    pub fn settings_over(&self, base: Settings) -> Result<Settings> {
        let min_gain = self.min_gain.unwrap_or(base.restart.min_gain);
        if !(0.0..=RestartAwareness::MAX_MIN_GAIN).contains(&min_gain) {
            return Err(input_error(anyhow::anyhow!(
                "--min-gain must be a number in [0, {}], got {min_gain}",
                RestartAwareness::MAX_MIN_GAIN
            )));
        }
        let restart_cost_s = self.restart_cost_s.unwrap_or(base.restart.cost_s);
        if !(restart_cost_s.is_finite() && restart_cost_s >= 0.0) {
            return Err(input_error(anyhow::anyhow!(
                "--restart-cost-s must be a number ≥ 0, got {restart_cost_s}"
            )));
        }
        let batch_candidates = self.batch_candidates.unwrap_or(base.batch_candidates);
        if batch_candidates < 2 {
            return Err(input_error(anyhow::anyhow!(
                "--batch-candidates must be at least 2"
            )));
        }
        if let Some(t) = self.tiresias_threshold_gpu_s {
            if !(t.is_finite() && t > 0.0) {
                return Err(input_error(anyhow::anyhow!(
                    "--tiresias-threshold-gpu-s must be a positive number, got {t}"
                )));
            }
        }
        let mut weighing = base.weighing;
        if let Some(x) = self.remaining_exponent {
            weighing.remaining_exponent = x;
        }
        if let Some(s) = self.remaining_scale_s {
            weighing.remaining_scale_s = s;
        }
        if weighing.remaining_exponent > 0.0 && weighing.remaining_scale_s == 0.0 {
            weighing.remaining_scale_s = Weighing::DEFAULT_REMAINING_SCALE_S;
        }
        if let Some(x) = self.service_exponent {
            weighing.service_exponent = x;
        }
        if let Some(s) = self.service_scale_gpu_s {
            weighing.service_scale_gpu_s = s;
        }
        if weighing.service_exponent > 0.0 && weighing.service_scale_gpu_s == 0.0 {
            weighing.service_scale_gpu_s = Weighing::DEFAULT_SERVICE_SCALE_GPU_S;
        }
        weighing
            .validate()
            .map_err(|e| input_error(anyhow::anyhow!("--{}", e.replace('_', "-"))))?;
        Ok(Settings {
            utility: self.utility.unwrap_or(base.utility),
            weighing,
            admission: self.admission.unwrap_or(base.admission),
            backfill: self.backfill || base.backfill,
            restart: RestartAwareness {
                min_gain,
                cost_s: restart_cost_s,
            },
            batch_candidates,
            counts: self.counts.unwrap_or(base.counts),
            consolidate: self.consolidate.unwrap_or(base.consolidate),
        })
    }

    /// Options of individual policies.
    pub fn policy_options(&self) -> PolicyOptions {
        self.policy_options_over(PolicyOptions::default())
    }

    /// `base` with the flags given.
    pub fn policy_options_over(&self, base: PolicyOptions) -> PolicyOptions {
        PolicyOptions {
            tiresias_threshold_gpu_s: self
                .tiresias_threshold_gpu_s
                .unwrap_or(base.tiresias_threshold_gpu_s),
        }
    }
}

/// Parses a policy name; `--help` lists every policy of the registry with what it does.
pub fn policy_parser() -> impl clap::builder::TypedValueParser<Value = PolicyInfo> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(
        REGISTRY
            .iter()
            .map(|p| PossibleValue::new(p.name).help(p.about)),
    )
    .map(|name| *policy_info(&name).expect("the possible values are the registry's names"))
}

fn parse_utility(s: &str) -> Result<Utility, String> {
    s.parse()
}

fn parse_admission(s: &str) -> Result<Admission, String> {
    s.parse()
}

fn parse_counts(s: &str) -> Result<CountRule, String> {
    s.parse()
}

/// Arguments of `dlscale optimize`.
#[derive(Debug, Args)]
pub struct OptimizeArgs {
    /// Job file (JSON, or TOML by its .toml extension): one job, or `jobs = [...]`.
    #[arg(long)]
    pub jobs: PathBuf,
    /// Cluster file: {"nodes": N, "gpus_per_node": M} (JSON or TOML).
    #[arg(long, conflicts_with_all = ["nodes", "gpus_per_node", "fleet"])]
    pub cluster: Option<PathBuf>,
    /// Fleet file, a cluster of several GPU types: {"types": [{"name": "a100", "nodes": N,
    /// "gpus_per_node": M, "memory_gib": G}, ...]} (JSON, or `[[types]]` in TOML). Each job runs
    /// on one type, as its `types` say (a bundled model: its table on each bundled type).
    #[arg(long, conflicts_with_all = ["nodes", "gpus_per_node"])]
    pub fleet: Option<PathBuf>,
    /// Number of nodes.
    #[arg(long, requires = "gpus_per_node")]
    pub nodes: Option<u32>,
    /// GPUs per node.
    #[arg(long, requires = "nodes")]
    pub gpus_per_node: Option<u32>,
    /// Teams file: {"NAME": {"guaranteed_gpus": G, "max_gpus": M, "lend_limit": L}} (JSON,
    /// each key optional, as the server's `[teams]` tables): each job's `team` keeps its team's
    /// quota (the policies that keep quotas; a job of no team is in the default team).
    #[arg(long)]
    pub teams: Option<PathBuf>,
    /// The policy.
    #[arg(long, default_value = "elastic-batch", value_parser = policy_parser())]
    pub policy: PolicyInfo,
    #[command(flatten)]
    pub policy_args: PolicyArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,
}

/// Arguments of `dlscale demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,
}

/// The JSON document `optimize` prints.
#[derive(Debug, Serialize)]
struct Report<'a> {
    policy: &'a str,
    utility: String,
    objective: f64,
    /// The solver path the decision took (`exact-dp`, `lagrangian-dp`, ...).
    solver: SolverPath,
    /// Certified relative gap between `objective` and an upper bound on the optimum (0: exact).
    gap: f64,
    solve_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster: Option<Cluster>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fleet: Option<&'a Fleet>,
    gpus_used: u32,
    jobs: &'a [dlscale_core::JobDecision],
    #[serde(skip_serializing_if = "Option::is_none")]
    teams: Option<Vec<TeamHeld>>,
}

/// A team's quota and what its jobs hold in a decision.
#[derive(Debug, Serialize)]
struct TeamHeld {
    team: String,
    guaranteed_gpus: u32,
    /// The most its jobs hold together (`None`: no limit).
    max_gpus: Option<u32>,
    /// GPUs its running jobs hold.
    gpus: u32,
}

/// Each team's quota on `on` and what its jobs hold in `decision`.
fn teams_held(teams: &Teams, on: Machines<'_>, jobs: &[Job], decision: &Decision) -> Vec<TeamHeld> {
    let quotas = teams.quotas_on(on.total_gpus());
    let mut held = vec![0; quotas.len()];
    let by_id = jobs_by_id(jobs);
    for d in &decision.jobs {
        if let Some(job) = by_id.get(d.id.as_str()) {
            held[teams.of(job)] += d.gpus;
        }
    }
    teams
        .names()
        .iter()
        .zip(quotas)
        .zip(held)
        .map(|((name, q), gpus)| TeamHeld {
            team: name.to_string(),
            guaranteed_gpus: q.guaranteed_gpus,
            max_gpus: Some(q.max_gpus).filter(|&m| m != u32::MAX),
            gpus,
        })
        .collect()
}

/// `jobs` by id: a decision's rows name their jobs (a job the placement left waiting is not
/// among them, so rows and jobs need not line up).
fn jobs_by_id(jobs: &[Job]) -> std::collections::HashMap<&str, &Job> {
    jobs.iter().map(|j| (j.id.as_str(), j)).collect()
}

/// Reads a teams file for `jobs` on `gpus` GPUs, refusing a policy that keeps no quotas and a
/// job whose team the file does not configure.
fn load_teams(path: &Path, policy: PolicyInfo, gpus: u32, jobs: &[Job]) -> Result<Teams> {
    if !policy.keeps_teams {
        return Err(input_error(anyhow::anyhow!(
            "--teams: quotas are kept by the policies {}, not {policy}",
            team_policy_names().join(", ")
        )));
    }
    let text = read_input(path, "teams file")?;
    let teams = parse_teams_file(path, &text, gpus).map_err(input_error)?;
    let unknown = jobs.iter().find_map(|job| {
        let team = job.team.as_deref()?;
        teams.find(team).is_none().then_some((&job.id, team))
    });
    if let Some((id, team)) = unknown {
        return Err(input_error(anyhow::anyhow!(
            "job '{id}' names team '{team}', which {} does not configure (teams: {})",
            path.display(),
            teams.names().join(", ")
        )));
    }
    Ok(teams)
}

/// Reads the file `what` (`job file`, `cluster file`) at `path`, bounded, naming it on failure
/// (bad input, as a missing file is).
pub fn read_input(path: &Path, what: &str) -> Result<String> {
    read_input_file(path, what).map_err(input_error)
}

/// Reads and validates a job file.
pub fn load_jobs(path: &Path) -> Result<Vec<Job>> {
    let text = read_input(path, "job file")?;
    let name = path.display().to_string();
    let jobs = parse_jobs(&text, FileFormat::for_path(&name), &name).map_err(input_error)?;
    if jobs.is_empty() {
        return Err(input_error(anyhow::anyhow!(
            "{name}: field 'jobs': no jobs"
        )));
    }
    Ok(jobs)
}

/// Reads and validates a cluster file.
pub fn load_cluster(path: &Path) -> Result<Cluster> {
    let text = read_input(path, "cluster file")?;
    let name = path.display().to_string();
    let cluster: Cluster =
        parse_document(&text, FileFormat::for_path(&name), &name).map_err(input_error)?;
    cluster
        .validate()
        .map_err(|e| input_error(anyhow::anyhow!("{name}: {e}")))?;
    Ok(cluster)
}

/// Runs `dlscale optimize`.
pub fn run_optimize(args: &OptimizeArgs) -> Result<()> {
    let settings = args.policy_args.settings()?;
    let options = args.policy_args.policy_options();
    let (fleet, cluster);
    let on = match (&args.fleet, &args.cluster, args.nodes, args.gpus_per_node) {
        (Some(path), _, _, _) => {
            fleet = load_fleet(path)?;
            if !args.policy.keeps_types {
                let typed: Vec<&str> = REGISTRY
                    .iter()
                    .filter(|p| p.keeps_types)
                    .map(|p| p.name)
                    .collect();
                return Err(input_error(anyhow::anyhow!(
                    "policy '{}' does not decide across GPU types (those that do: {})",
                    args.policy,
                    typed.join(", ")
                )));
            }
            Machines::Fleet(&fleet)
        }
        (None, Some(path), _, _) => {
            cluster = load_cluster(path)?;
            Machines::Cluster(&cluster)
        }
        (None, None, Some(nodes), Some(per_node)) => {
            cluster = Cluster::new(nodes, per_node).map_err(input_error)?;
            Machines::Cluster(&cluster)
        }
        _ => {
            return Err(input_error(anyhow::anyhow!(
                "give --cluster FILE, --fleet FILE or --nodes N --gpus-per-node M"
            )))
        }
    };
    let jobs = load_jobs(&args.jobs)?;
    check_current(&jobs, on, &args.jobs.display().to_string())?;
    let teams = match &args.teams {
        Some(path) => Some(load_teams(path, args.policy, on.total_gpus(), &jobs)?),
        None => None,
    };
    let decided = solve(args.policy, &options, on, &jobs, teams.as_ref(), &settings);
    let teams = teams.map(|t| teams_held(&t, on, &jobs, &decided.0));
    print(args, &settings, on, &jobs, &decided, teams)
}

/// Checks what the jobs of file `name` run on now against the machines: a current type the
/// fleet has, each current allocation within its type's (or the cluster's) GPUs, and all of
/// them together within each type's. Errors name the job and its field.
fn check_current(jobs: &[Job], on: Machines, name: &str) -> Result<()> {
    // Each type's name (`None`: the cluster) and GPUs, and what the jobs hold there now.
    let pools: Vec<(Option<&str>, u32)> = match on {
        Machines::Cluster(c) => vec![(None, c.total_gpus())],
        Machines::Fleet(f) => f
            .pools()
            .iter()
            .map(|p| (Some(&*p.name), p.cluster().total_gpus()))
            .collect(),
    };
    let mut held = vec![0u64; pools.len()];
    let refuse = |id: &str, field: &str, why: String| {
        input_error(anyhow::anyhow!(
            "{name}: job '{id}': field '{field}': {why}"
        ))
    };
    for job in jobs {
        let Some(current) = &job.current else {
            continue;
        };
        let pool = match (on, &job.types.current) {
            (Machines::Fleet(f), Some(t)) => f.index_of(t).ok_or_else(|| {
                let names: Vec<&str> = f.pools().iter().map(|p| &*p.name).collect();
                refuse(
                    &job.id,
                    "current_type",
                    format!(
                        "{t:?} is not one of the fleet's types ({})",
                        names.join(", ")
                    ),
                )
            })?,
            // The largest type bounds a job whose type is not said.
            (Machines::Fleet(_), None) => (0..pools.len()).max_by_key(|&i| pools[i].1).unwrap_or(0),
            (Machines::Cluster(_), _) => 0,
        };
        let (type_name, gpus) = pools[pool];
        let of = type_name.map_or("the cluster's".to_string(), |t| format!("type {t}'s"));
        if current.gpus > gpus {
            return Err(refuse(
                &job.id,
                "current.gpus",
                format!("{} is more than {of} {gpus} GPUs", current.gpus),
            ));
        }
        if job.types.current.is_some() || type_name.is_none() {
            held[pool] += u64::from(current.gpus);
            if held[pool] > u64::from(gpus) {
                return Err(refuse(
                    &job.id,
                    "current.gpus",
                    format!(
                        "the jobs' current allocations add up to {} GPUs by this one, more than \
                         {of} {gpus}",
                        held[pool]
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// What a decision ran on: a cluster of alike GPUs, or a fleet of types.
#[derive(Debug, Clone, Copy)]
enum Machines<'a> {
    Cluster(&'a Cluster),
    Fleet(&'a Fleet),
}

impl Machines<'_> {
    fn total_gpus(&self) -> u32 {
        match self {
            Machines::Cluster(c) => c.total_gpus(),
            Machines::Fleet(f) => f.total_gpus(),
        }
    }
}

/// Prints `decided` (the decision and its milliseconds), with each team's GPUs where teams
/// keep quotas, in the format `args` ask for.
fn print(
    args: &OptimizeArgs,
    settings: &Settings,
    on: Machines<'_>,
    jobs: &[Job],
    (decision, solve_ms): &(Decision, f64),
    teams: Option<Vec<TeamHeld>>,
) -> Result<()> {
    match args.format {
        OutputFormat::Json => print_json(args.policy, settings, on, decision, *solve_ms, teams)?,
        OutputFormat::Table => {
            print_table(args.policy, settings, on, jobs, decision, *solve_ms);
            for t in teams.iter().flatten() {
                let max = t
                    .max_gpus
                    .map_or(String::new(), |m| format!(", at most {m}"));
                println!(
                    "team {}: holds {} GPUs (guaranteed {}{max})",
                    t.team, t.gpus, t.guaranteed_gpus
                );
            }
        }
    }
    Ok(())
}

/// Reads and validates a fleet file.
pub fn load_fleet(path: &Path) -> Result<Fleet> {
    let text = read_input(path, "fleet file")?;
    let name = path.display().to_string();
    parse_document(&text, FileFormat::for_path(&name), &name).map_err(input_error)
}

/// Runs `dlscale demo`: the bundled example mix on a 4 × 4 cluster with each policy.
pub fn run_demo(args: &DemoArgs) -> Result<()> {
    let text = include_str!("../../../examples/jobs.json");
    let jobs = parse_jobs(text, FileFormat::Json, "examples/jobs.json")?;
    let cluster = Cluster::new(4, 4)?;
    let settings = Settings::default();
    if args.format == OutputFormat::Table {
        println!(
            "dlscale demo: {} jobs of examples/jobs.json on {} nodes × {} GPUs\n",
            jobs.len(),
            cluster.nodes,
            cluster.gpus_per_node
        );
    }
    for &policy in REGISTRY {
        let options = PolicyOptions::default();
        let on = Machines::Cluster(&cluster);
        let (decision, solve_ms) = solve(policy, &options, on, &jobs, None, &settings);
        match args.format {
            OutputFormat::Json => print_json(policy, &settings, on, &decision, solve_ms, None)?,
            OutputFormat::Table => {
                print_table(policy, &settings, on, &jobs, &decision, solve_ms);
                println!();
            }
        }
    }
    Ok(())
}

/// Decides as the autoscaler does: the policy (with `teams`' quotas, when given), then the
/// placement on the nodes (a fleet's jobs each on their type's), after which consolidation
/// (`--consolidate`) may make the policy decide again. Each running job's `nodes` are those the
/// placement put it on.
fn solve(
    policy: PolicyInfo,
    options: &PolicyOptions,
    on: Machines<'_>,
    jobs: &[Job],
    teams: Option<&Teams>,
    settings: &Settings,
) -> (Decision, f64) {
    let start = Instant::now();
    let (cluster, fleet, topologies) = match on {
        Machines::Cluster(cluster) => (
            *cluster,
            None,
            vec![Topology::uniform(cluster.nodes, cluster.gpus_per_node)],
        ),
        Machines::Fleet(fleet) => (fleet.pools()[0].cluster(), Some(fleet), fleet.topologies()),
    };
    let PlacedDecision {
        mut decision,
        placed,
        ..
    } = decide_placed(
        policy.instance(options).as_mut(),
        &DecisionRequest {
            fleet,
            teams,
            ..DecisionRequest::new(&cluster, jobs, settings)
        },
        &topologies,
        ShapeRule::Any,
        &|_| None,
        0,
    );
    for d in &mut decision.jobs {
        if let Some(shares) = placed.placement.get(&d.id) {
            d.nodes = shares.len() as u32;
        }
    }
    (decision, start.elapsed().as_secs_f64() * 1e3)
}

fn print_json(
    policy: PolicyInfo,
    settings: &Settings,
    on: Machines<'_>,
    decision: &Decision,
    solve_ms: f64,
    teams: Option<Vec<TeamHeld>>,
) -> Result<()> {
    let (cluster, fleet) = match on {
        Machines::Cluster(c) => (Some(*c), None),
        Machines::Fleet(f) => (None, Some(f)),
    };
    let report = Report {
        policy: policy.name,
        utility: settings.utility.to_string(),
        objective: decision.objective,
        solver: decision.solver,
        gap: decision.gap,
        solve_ms,
        cluster,
        fleet,
        gpus_used: decision.gpus_used(),
        jobs: &decision.jobs,
        teams,
    };
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

fn print_table(
    policy: PolicyInfo,
    settings: &Settings,
    on: Machines<'_>,
    jobs: &[Job],
    decision: &Decision,
    solve_ms: f64,
) {
    let typed = matches!(on, Machines::Fleet(_));
    println!(
        "policy {policy}  utility {}  objective {:.4}  GPUs {}/{}  solved in {solve_ms:.3} ms ({}, gap {:.1e})",
        settings.utility,
        decision.objective,
        decision.gpus_used(),
        on.total_gpus(),
        decision.solver.name(),
        decision.gap,
    );
    let type_column = if typed {
        format!(" {:<8}", "type")
    } else {
        String::new()
    };
    println!(
        "{:<16} {:<12} {:<8}{type_column} {:>5} {:>5} {:>7} {:>7} {:>14} {:>9}",
        "job", "model", "state", "gpus", "nodes", "batch", "local", "samples/s", "utility"
    );
    let by_id = jobs_by_id(jobs);
    for d in &decision.jobs {
        let model = by_id
            .get(d.id.as_str())
            .map_or("", |j| j.model_name.as_str());
        let state = match d.state {
            JobState::Running => "running",
            JobState::Queued => "queued",
            JobState::Dropped => "dropped",
        };
        let type_column = if typed {
            format!(" {:<8}", d.gpu_type.as_deref().unwrap_or("-"))
        } else {
            String::new()
        };
        println!(
            "{:<16} {:<12} {:<8}{type_column} {:>5} {:>5} {:>7} {:>7} {:>14.1} {:>9.4}",
            d.id,
            model,
            state,
            d.gpus,
            d.nodes,
            d.batch_size,
            d.local_batch_size,
            d.throughput_samples_per_s,
            d.utility
        );
    }
}
