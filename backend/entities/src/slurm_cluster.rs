use sea_orm::entity::prelude::*;

use gantry_types::classes::{SlurmAccess, SlurmUsers};

/// The Slurm cluster that runs a region's work, as its operator declared it.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "slurm_clusters")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub region_id: Uuid,
    /// The partition whose nodes are the region's.
    pub partition: String,
    /// The Slurm account Gantry's jobs are charged to.
    pub account: Option<String>,
    /// `SLURM_CONF` for the Slurm commands, where not the default.
    pub conf_path: Option<String>,
    /// The login node the commands run on over SSH; none to run them on
    /// the control plane's own host.
    pub login_host: Option<String>,
    /// Where jobs' output files go, on a file system both the nodes and
    /// the host the commands run on see.
    pub output_dir: String,
    /// A JSON object: each catalog GPU model's name to its GRES type.
    pub gres_types: String,
    /// How tenants reach an instance's allocation.
    pub access: SlurmAccess,
    /// Whom its jobs run as.
    pub users: SlurmUsers,
    /// How each organization's Unix user's name begins, where each has
    /// its own.
    pub user_prefix: String,
    /// What went wrong on the last sync; none when it went well.
    pub problem: Option<String>,
    /// A JSON object: each node's GPUs held by Slurm jobs Gantry did not
    /// submit, as of the last sync.
    pub outside: Option<String>,
    pub synced_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
