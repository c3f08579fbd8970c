use sea_orm::entity::prelude::*;

/// The Slurm job behind one attempt of an order placed in a Slurm region.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "slurm_jobs")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub order_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub attempt: i32,
    pub region_id: Uuid,
    /// Its Slurm job name: the order and the attempt, so it is found
    /// again after a crash between writing this row and `sbatch`.
    pub name: String,
    /// Slurm's job id, once `sbatch` (or a look for the name) gave it.
    pub job_id: Option<i64>,
    /// Slurm's state of it, as last read.
    pub state: Option<String>,
    /// A JSON object: each node's GPU indices Slurm bound.
    pub bound: Option<String>,
    /// When its submission was last tried.
    pub submitted_at: DateTimeUtc,
    /// How many times its submission has been tried.
    pub tries: i32,
    /// When the next try is due, after a try Slurm refused or did not
    /// answer; none while a try may still run (a process that died
    /// mid-try leaves none: its try is taken over once its time is up).
    pub retry_at: Option<DateTimeUtc>,
    /// Bytes of its standard output and error files already read into
    /// the job's log.
    pub out_read: i64,
    pub err_read: i64,
    /// Slurm's start and end times of it, from its accounting.
    pub started_at: Option<DateTimeUtc>,
    pub ended_at: Option<DateTimeUtc>,
    /// Its end has been read back and its order moved on.
    pub finished: bool,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
