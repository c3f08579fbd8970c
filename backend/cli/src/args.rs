//! The command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "gantry-cli",
    version,
    about = "Order and follow GPU capacity on a Gantry cloud, and operate one.",
    after_help = "Exit codes: 0 ok, 1 error, 2 usage (a bad argument or file), \
                  3 the order ended without completing, 4 a --timeout passed first."
)]
pub struct Cli {
    /// The file `login` keeps the sign-in in.
    #[arg(long, global = true, env = "GANTRY_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The server, such as https://gpu.example.com; the one signed in to
    /// when absent.
    #[arg(long, global = true, env = "GANTRY_SERVER", value_name = "URL")]
    pub server: Option<String>,
    /// The organization to act in, by name or id.
    #[arg(long, global = true, env = "GANTRY_ORG", value_name = "ORG")]
    pub org: Option<String>,
    /// Human tables, or the server's answers as JSON for scripts.
    #[arg(long, short, global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Sign in and keep the session (or an API key) in the config file.
    Login(Login),
    /// Sign out: end the session on the server and forget it here.
    Logout,
    /// Who the client acts as, and in which organizations.
    Whoami,
    /// Instance types and their prices.
    Catalog,
    /// Create, list, show, cancel and wait for orders.
    #[command(subcommand)]
    Order(OrderCommand),
    /// Submit jobs described in YAML.
    #[command(subcommand)]
    Job(JobCommand),
    /// Create, list, grow and delete the organization's volumes.
    #[command(subcommand)]
    Volume(VolumeCommand),
    /// A job's output; `-f` follows it until the job ends.
    Logs(LogsArgs),
    /// Connect to a running instance with the access command it shows.
    Ssh(SshArgs),
    /// GPU-hours and cost so far.
    Usage(UsageArgs),
    /// The organization's invoices.
    Invoices,
    /// The organization's quotas and what it uses of them.
    Quota,
    /// Operators: the fleet's nodes.
    Nodes(NodesArgs),
    /// Operators: stop new work on a node and move its work off.
    Drain(NodeAction),
    /// Operators: stop new work landing on a node.
    Cordon(NodeAction),
    /// Operators: let a cordoned node take work again.
    Uncordon {
        /// The node, by name or id.
        node: String,
    },
    /// Operators: what the next scheduling cycle would decide if the fleet
    /// or the placement changed.
    WhatIf(WhatIfArgs),
    /// Print a shell completion script.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
pub struct Login {
    /// Sign in as this user; the password is asked for, or read from
    /// standard input with --password-stdin.
    #[arg(
        long,
        conflicts_with = "api_key_stdin",
        required_unless_present = "api_key_stdin"
    )]
    pub email: Option<String>,
    #[arg(long, requires = "email")]
    pub password_stdin: bool,
    /// Keep an API key read from standard input instead.
    #[arg(long)]
    pub api_key_stdin: bool,
}

#[derive(Debug, Subcommand)]
pub enum OrderCommand {
    /// Order capacity: an instance kept until cancelled.
    Create(CreateOrder),
    /// The organization's orders, newest first.
    List(ListOrders),
    /// One order, by name or id.
    Show { order: String },
    /// Cancel an order, by name or id.
    Cancel { order: String },
    /// Wait until an order runs or ends; exit 3 when it ends without
    /// completing, 4 when --timeout passes first.
    Wait(WaitArgs),
}

#[derive(Debug, Args)]
pub struct CreateOrder {
    /// The instance type, by name.
    #[arg(long, short = 't')]
    pub instance_type: String,
    /// Nodes started together.
    #[arg(long, default_value_t = 1)]
    pub nodes: u32,
    #[arg(long)]
    pub region: Option<String>,
    /// What to call it; generated when absent.
    #[arg(long)]
    pub name: Option<String>,
    /// A catalog image's name, or a whole reference such as
    /// registry.example/team/train:v3 from a registry the installation
    /// allows; the default image when absent.
    #[arg(long)]
    pub image: Option<String>,
    #[arg(long, value_enum)]
    pub pricing: Option<Pricing>,
    #[arg(long, value_enum)]
    pub priority: Option<Priority>,
    /// How long to keep it, such as 2h or 30m.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// Attach a volume: NAME_OR_ID:/PATH, or NAME_OR_ID:/PATH:ro to only
    /// read it (repeatable).
    #[arg(long = "volume", value_name = "VOLUME:PATH[:ro]")]
    pub volumes: Vec<String>,
    /// Wait until it runs.
    #[arg(long)]
    pub wait: bool,
    #[arg(long, value_parser = humantime::parse_duration, requires = "wait")]
    pub timeout: Option<Duration>,
}

#[derive(Debug, Subcommand)]
pub enum VolumeCommand {
    /// Create a volume: storage kept apart from any order.
    Create(CreateVolume),
    /// The organization's volumes.
    List,
    /// Grow a volume, by name or id (it never shrinks).
    Grow {
        volume: String,
        /// The new size.
        #[arg(long)]
        size_gib: u32,
    },
    /// Delete a volume, by name or id: its data is erased.
    Rm { volume: String },
}

#[derive(Debug, Args)]
pub struct CreateVolume {
    pub name: String,
    #[arg(long)]
    pub region: String,
    #[arg(long)]
    pub size_gib: u32,
    /// `local` (one node's disk; orders attaching it run there) or
    /// `shared` (the region's shared file system).
    #[arg(long, value_enum, default_value_t = VolumeKind::Local)]
    pub kind: VolumeKind,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum VolumeKind {
    Local,
    Shared,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Pricing {
    OnDemand,
    Spot,
    Reserved,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Priority {
    Preemptible,
    Batch,
    Standard,
    Production,
}

#[derive(Debug, Args)]
pub struct ListOrders {
    #[arg(long)]
    pub status: Option<String>,
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u16).range(1..=200))]
    pub limit: u16,
}

#[derive(Debug, Args)]
pub struct WaitArgs {
    pub order: String,
    /// Until it runs (instances' default), or until it ends (jobs').
    #[arg(long, value_enum)]
    pub until: Option<Until>,
    /// Give up after this long, such as 10m, with exit code 4.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub timeout: Option<Duration>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Until {
    Running,
    Ended,
}

#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Submit the job FILE describes (YAML; `-` reads standard input).
    Submit(SubmitJob),
}

#[derive(Debug, Args)]
pub struct SubmitJob {
    pub file: PathBuf,
    /// Follow its output until it ends; exit 3 if it fails.
    #[arg(long, short)]
    pub follow: bool,
    /// Wait until it ends; exit 3 if it fails.
    #[arg(long, conflicts_with = "follow")]
    pub wait: bool,
    #[arg(long, value_parser = humantime::parse_duration)]
    pub timeout: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The job, by name or id.
    pub order: String,
    /// Follow new lines until the job ends; exit 3 if it fails.
    #[arg(long, short)]
    pub follow: bool,
    /// Only this attempt's output.
    #[arg(long)]
    pub attempt: Option<u32>,
    #[arg(long, value_parser = humantime::parse_duration, requires = "follow")]
    pub timeout: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct SshArgs {
    /// The instance, by name or id.
    pub order: String,
    /// The node of a multi-node order, by name; the first when absent.
    #[arg(long)]
    pub node: Option<String>,
    /// Passed to ssh after its own arguments: a command to run, say.
    #[arg(last = true)]
    pub rest: Vec<String>,
}

#[derive(Debug, Args)]
pub struct UsageArgs {
    /// From this day (YYYY-MM-DD, UTC); the start of this month when absent.
    #[arg(long)]
    pub from: Option<chrono::NaiveDate>,
    /// Until the start of this day; now when absent.
    #[arg(long)]
    pub to: Option<chrono::NaiveDate>,
    #[arg(long, value_enum, default_value_t = GroupBy::Day)]
    pub by: GroupBy,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum GroupBy {
    Day,
    Order,
    GpuModel,
    Project,
    Region,
    InstanceType,
    PricingClass,
}

#[derive(Debug, Args)]
pub struct NodesArgs {
    #[arg(long)]
    pub region: Option<String>,
    #[arg(long)]
    pub state: Option<String>,
}

#[derive(Debug, Args)]
pub struct NodeAction {
    /// The node, by name or id.
    pub node: String,
    /// Go ahead although it breaks reservations that hold its GPUs.
    #[arg(long)]
    pub force: bool,
    /// Why, for other operators and the audit log.
    #[arg(long)]
    pub reason: Option<String>,
}

#[derive(Debug, Args)]
pub struct WhatIfArgs {
    /// Add nodes: INSTANCE_TYPE:REGION:COUNT (repeatable).
    #[arg(long = "add-nodes", value_name = "TYPE:REGION:COUNT")]
    pub add_nodes: Vec<String>,
    #[arg(long, value_enum)]
    pub placement: Option<Placement>,
    /// Carry out a defragmentation plan first, letting each organization
    /// lose this many GPU-seconds of work per hour to moves.
    #[arg(long, value_name = "GPU_SECONDS")]
    pub defragment: Option<f64>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Placement {
    FragmentationAware,
    BestFit,
    FirstFit,
    Spread,
}

/// The API's spelling of a value-enum value.
pub fn api_name(value: impl ValueEnum) -> String {
    value
        .to_possible_value()
        .map(|v| v.get_name().replace('-', "_"))
        .unwrap_or_default()
}
