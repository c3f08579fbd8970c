//! Jobs: orders that run a command to completion on the GPUs the engine
//! picks, with a walltime, retries, arrays, dependencies and captured
//! output. An order with a `job` section is a job; everything else about it
//! (admission, placement, metering, billing) is an order's.

pub mod arrays;
pub mod attempts;
pub mod dependencies;
pub mod logs;

use gantry_types::job_spec::Dependency;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use gantry_core::sealing::Sealer;
use gantry_core::validate::Fields;
use gantry_entities::order;
use gantry_types::classes::StopCause;

pub const KIND: &str = "job";

const COMMAND_MAX: usize = 4096;
const ARGS_MAX: usize = 256;
const ENV_MAX: usize = 128;
const ENV_VALUE_MAX: usize = 4096;
const PATH_MAX: usize = 1024;
const IMAGE_MAX: usize = 512;
pub const RUNTIME_MAX: i64 = 31 * 24 * 3600;
pub const RETRIES_MAX: i32 = 10;
const DEFAULT_RETRIES: i32 = 3;
pub const DEPENDENCIES_MAX: usize = 64;
pub const ARRAY_MAX: i32 = 10_000;
/// The variable that tells each member of an array its index.
pub const ARRAY_INDEX_ENV: &str = "GANTRY_ARRAY_INDEX";
/// What secret variables are sealed for: the key derived for them.
pub const SECRETS_PURPOSE: &str = "gantry job secrets v1";
/// Variables Gantry sets itself on every node of a job.
const RESERVED_ENV: &[&str] = &[
    "CUDA_VISIBLE_DEVICES",
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "NODE_RANK",
];

/// What a job runs, and how it is retried, limited and ordered.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// Run by `sh -c` on every node; `args` are appended to it, each quoted
    /// as one word (as a container's args follow its command).
    #[schema(min_length = 1, max_length = 4096)]
    pub command: String,
    #[serde(default)]
    #[schema(max_items = 256)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Variables whose values are taken once and never shown again (tokens,
    /// passwords): stored sealed, given only to the job's own processes;
    /// the order shows their names. At most 128 with `env`.
    #[serde(default)]
    pub secret_env: BTreeMap<String, String>,
    /// An absolute path on the node; the agent's own when absent.
    #[schema(max_length = 1024)]
    pub working_dir: Option<String>,
    /// The image the job runs in, as the order's `image` takes it (that
    /// field wins when both are given); told to the job as `GANTRY_IMAGE`.
    #[schema(max_length = 512)]
    pub image: Option<String>,
    /// Walltime in seconds (1 to 31 days): past it the job is stopped and
    /// marked `timed_out`.
    #[schema(minimum = 1, maximum = 2678400)]
    pub max_runtime_seconds: Option<i64>,
    #[serde(default)]
    pub retry: RetryPolicy,
    /// Jobs of this organization that must end first.
    #[serde(default)]
    #[schema(max_items = 64)]
    pub depends_on: Vec<Dependency>,
    /// Submit this many copies (1 to 10,000), each told its index in
    /// `GANTRY_ARRAY_INDEX`; the answer is the first, the rest share its
    /// `array_id`.
    #[schema(minimum = 1, maximum = 10000)]
    pub array_count: Option<i32>,
}

/// Node loss and preemption are always retried, up to `max_retries`; a
/// non-zero exit only with `on_failure`.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    #[serde(default)]
    pub on_failure: bool,
    /// Attempts after the first, 0 to 10; 3 when absent.
    #[serde(default = "default_retries")]
    #[schema(minimum = 0, maximum = 10)]
    pub max_retries: i32,
}

fn default_retries() -> i32 {
    DEFAULT_RETRIES
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            on_failure: false,
            max_retries: DEFAULT_RETRIES,
        }
    }
}

/// What is stored in `orders.job`, from which agents are handed the launch.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command {
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// Sealed values once stored (see [`seal_secrets`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_env: BTreeMap<String, String>,
    pub working_dir: Option<String>,
    pub image: Option<String>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Command")
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env)
            .field("secret_env", &self.secret_env.keys().collect::<Vec<_>>())
            .field("working_dir", &self.working_dir)
            .field("image", &self.image)
            .finish()
    }
}

/// A job as tenants see it, beside the order's own fields.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobView {
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// The names of its secret variables; their values are never shown.
    pub secret_env: Vec<String>,
    pub working_dir: Option<String>,
    pub image: Option<String>,
    pub max_runtime_seconds: Option<i64>,
    pub retry: RetryPolicy,
    pub depends_on: Vec<Dependency>,
    pub array_id: Option<Uuid>,
    pub array_index: Option<i32>,
    /// The exit code of its last attempt, once one exited.
    pub exit_code: Option<i32>,
}

impl JobSpec {
    /// Checks every field, naming each bad one; the command to store.
    pub fn validate(&self, fields: &mut Fields) -> Command {
        if self.command.trim().is_empty() {
            fields.push("job.command", "must not be empty");
        }
        fields.text("job.command", &self.command, COMMAND_MAX);
        if self.args.len() > ARGS_MAX {
            fields.push("job.args", format!("at most {ARGS_MAX} arguments"));
        }
        for (i, arg) in self.args.iter().enumerate() {
            fields.text(&format!("job.args[{i}]"), arg, COMMAND_MAX);
        }
        if self.env.len() + self.secret_env.len() > ENV_MAX {
            fields.push(
                "job.env",
                format!("at most {ENV_MAX} variables, secret ones included"),
            );
        }
        check_variables(fields, "job.env", &self.env);
        check_variables(fields, "job.secret_env", &self.secret_env);
        for name in self.secret_env.keys().filter(|n| self.env.contains_key(*n)) {
            fields.push(
                "job.secret_env",
                format!("{name} is also in env: give it once"),
            );
        }
        if let Some(dir) = &self.working_dir
            && (!dir.starts_with('/') || dir.len() > PATH_MAX || dir.contains('\0'))
        {
            fields.push(
                "job.working_dir",
                "must be an absolute path of at most 1024 bytes",
            );
        }
        if let Some(image) = &self.image
            && (image.trim().is_empty()
                || image.len() > IMAGE_MAX
                || image.chars().any(char::is_whitespace))
        {
            fields.push(
                "job.image",
                "must be an image reference without spaces, at most 512 bytes",
            );
        }
        if let Some(runtime) = self.max_runtime_seconds {
            fields.range("job.max_runtime_seconds", runtime, 1, RUNTIME_MAX);
        }
        fields.range(
            "job.retry.max_retries",
            self.retry.max_retries,
            0,
            RETRIES_MAX,
        );
        if self.depends_on.len() > DEPENDENCIES_MAX {
            fields.push(
                "job.depends_on",
                format!("at most {DEPENDENCIES_MAX} dependencies"),
            );
        }
        if let Some(count) = self.array_count {
            fields.range("job.array_count", count, 1, ARRAY_MAX);
        }
        Command {
            command: self.command.clone(),
            args: self.args.clone(),
            env: self.env.clone(),
            secret_env: self.secret_env.clone(),
            working_dir: self.working_dir.clone(),
            image: self.image.clone(),
        }
    }
}

/// Variable names a shell takes, not set by Gantry, values within bounds.
fn check_variables(fields: &mut Fields, field: &str, variables: &BTreeMap<String, String>) {
    for (name, value) in variables {
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.len() <= 128
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            fields.push(field, format!("{name:?} is not a valid variable name"));
        } else if RESERVED_ENV.contains(&name.as_str()) || name.starts_with("GANTRY_") {
            fields.push(field, format!("{name} is set by Gantry"));
        }
        fields.text(&format!("{field}.{name}"), value, ENV_VALUE_MAX);
    }
}

/// What a secret variable's seal is bound to: its organization and name,
/// so it opens for no other.
fn secret_context(org_id: Uuid, name: &str) -> String {
    format!("{org_id}/{name}")
}

/// Replaces the secret variables' values by their seals, before storing.
pub fn seal_secrets(command: &mut Command, sealer: &Sealer, org_id: Uuid) -> anyhow::Result<()> {
    for (name, value) in &mut command.secret_env {
        *value = sealer.seal(value, &secret_context(org_id, name))?;
    }
    Ok(())
}

/// The secret variables opened, for the job's own processes. One that does
/// not open (the server's secret changed) is left out and logged: the job
/// meets an unset variable rather than a seal.
fn open_secrets(command: &Command, sealer: &Sealer, org_id: Uuid) -> Vec<(String, String)> {
    command
        .secret_env
        .iter()
        .filter_map(|(name, sealed)| {
            let value = sealer.open(sealed, &secret_context(org_id, name));
            if value.is_none() {
                tracing::warn!(
                    %org_id,
                    variable = %name,
                    "a secret job variable does not open with this server's secret; \
                     the job runs without it"
                );
            }
            Some((name.clone(), value?))
        })
        .collect()
}

/// The stored command of a job order.
pub fn command_of(order: &order::Model) -> Option<Command> {
    order
        .job
        .as_deref()
        .and_then(|j| serde_json::from_str(j).ok())
}

pub fn view(order: &order::Model, depends_on: Vec<Dependency>) -> Option<JobView> {
    let command = command_of(order)?;
    Some(JobView {
        command: command.command,
        args: command.args,
        env: command.env,
        secret_env: command.secret_env.into_keys().collect(),
        working_dir: command.working_dir,
        image: command.image,
        max_runtime_seconds: order.max_runtime_seconds,
        retry: RetryPolicy {
            on_failure: order.retry_on_failure,
            max_retries: order.max_retries,
        },
        depends_on,
        array_id: order.array_id,
        array_index: order.array_index,
        exit_code: order.exit_code,
    })
}

/// The shell line an agent runs: the command, then each argument quoted.
pub fn shell_line(command: &Command) -> String {
    let mut line = command.command.clone();
    for arg in &command.args {
        line.push(' ');
        line.push_str(&quoted(arg));
    }
    line
}

/// One word for a POSIX shell, whatever it holds.
pub fn quoted(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// Running jobs past their walltime are stopped and marked `timed_out`; the
/// driver stops their processes (SIGTERM, the grace period, SIGKILL).
/// `orders` are the scheduler's copy of the live orders: a row it holds as
/// running that has since ended is left alone.
pub async fn time_out<'a>(
    db: &sea_orm::DatabaseConnection,
    orders: impl IntoIterator<Item = &'a order::Model>,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), sea_orm::DbErr> {
    use sea_orm::sea_query::Expr;
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};

    use gantry_types::classes::OrderStatus;

    for o in orders {
        let (OrderStatus::Running, Some(started), Some(limit)) =
            (o.status, o.started_at, o.max_runtime_seconds)
        else {
            continue;
        };
        if started + chrono::Duration::seconds(limit) > now {
            continue;
        }
        let txn = gantry_core::db::write(db).await?;
        let stopped = order::Entity::update_many()
            .col_expr(order::Column::Status, Expr::value(OrderStatus::TimedOut))
            .col_expr(
                order::Column::FailureReason,
                Expr::value(Some(format!("stopped at its walltime of {limit} s"))),
            )
            .col_expr(order::Column::UpdatedAt, Expr::value(now))
            .filter(order::Column::Id.eq(o.id))
            .filter(order::Column::Status.eq(OrderStatus::Running))
            .exec(&txn)
            .await?;
        if stopped.rows_affected == 1 {
            crate::orders::lifecycle::stop(&txn, o.id, now, StopCause::Walltime).await?;
        }
        txn.commit().await?;
    }
    Ok(())
}

/// How a job starts on one of its nodes.
pub struct Launch {
    /// The shell line to run instead of the agent's own workload command.
    pub command: String,
    pub working_dir: Option<String>,
    pub env: Vec<(String, String)>,
}

/// The launch of `job` on the node of `this`, one of `allocations` (all of
/// the job's live allocations, each with its node's name). Every node gets
/// the same rendezvous: rank 0 is the first allocation's node.
pub fn launch(
    job: &order::Model,
    this: Uuid,
    allocations: &[(Uuid, &str)],
    sealer: &Sealer,
) -> Option<Launch> {
    let command = command_of(job)?;
    let mut ranked: Vec<&(Uuid, &str)> = allocations.iter().collect();
    ranked.sort_by_key(|(id, _)| *id);
    let rank = ranked.iter().position(|(id, _)| *id == this).unwrap_or(0);
    let master = ranked.first().map_or("localhost", |(_, node)| *node);
    // One port per job, so jobs sharing a master node do not collide.
    let port = 20_000 + (job.id.as_u128() % 10_000) as u32;
    let mut env: Vec<(String, String)> = command.env.clone().into_iter().collect();
    env.extend(open_secrets(&command, sealer, job.org_id));
    env.extend([
        ("MASTER_ADDR".to_owned(), master.to_owned()),
        ("MASTER_PORT".to_owned(), port.to_string()),
        ("WORLD_SIZE".to_owned(), ranked.len().max(1).to_string()),
        ("NODE_RANK".to_owned(), rank.to_string()),
        ("GANTRY_ATTEMPT".to_owned(), job.attempts.to_string()),
    ]);
    if let Some(index) = job.array_index {
        env.push((ARRAY_INDEX_ENV.to_owned(), index.to_string()));
    }
    if let Some(image) = &command.image {
        env.push(("GANTRY_IMAGE".to_owned(), image.clone()));
    }
    Some(Launch {
        command: shell_line(&command),
        working_dir: command.working_dir.clone(),
        env,
    })
}
