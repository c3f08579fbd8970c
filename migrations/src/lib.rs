//! Gantry's schema, one migration per change, portable between SQLite and
//! PostgreSQL. Constraints are declared when a table is created because
//! SQLite cannot add a foreign key to an existing table.

pub use sea_orm_migration::prelude::*;

mod checks;
mod m20261202_000001_tenancy;
mod m20261202_000002_capacity;
mod m20261202_000003_agents;
mod m20261203_000004_metering;
mod m20261203_000005_billing;
mod m20261203_000006_sla;
mod m20261203_000007_budgets;
mod m20261203_000008_prepaid;
mod m20261203_000009_jobs;
mod m20261203_000010_isolation;
mod m20261203_000011_queue_limits;
mod m20261203_000012_change_log;
mod m20261203_000013_catalog_version;
mod m20261203_000014_change_notify;
mod m20261204_000015_reservations;
mod m20261204_000016_maintenance;
mod m20261204_000017_shared_gpus;
mod m20261204_000018_refresh_tokens;
mod m20261205_000019_readability;
mod m20261205_000020_invitations;
mod m20261206_000021_history;
mod m20261207_000022_estimates_and_moves;
mod m20261208_000023_webhooks;
mod m20261209_000024_oidc;
mod m20261210_000025_images;
mod m20261211_000026_private_networks;
mod m20261212_000027_project_networks;
mod m20261213_000028_stop_causes;
mod m20261214_000029_node_state_reasons;
mod m20261215_000030_volumes;
mod m20261216_000031_shared_storage;
mod m20261217_000032_slurm;
mod m20261218_000033_slurm_outside_and_retries;
mod m20261219_000034_counts_and_launch_rooms;
mod m20261220_000035_waiting_counts;
mod triggers;

/// Every migration in the order it is applied.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261202_000001_tenancy::Migration),
            Box::new(m20261202_000002_capacity::Migration),
            Box::new(m20261202_000003_agents::Migration),
            Box::new(m20261203_000004_metering::Migration),
            Box::new(m20261203_000005_billing::Migration),
            Box::new(m20261203_000006_sla::Migration),
            Box::new(m20261203_000007_budgets::Migration),
            Box::new(m20261203_000008_prepaid::Migration),
            Box::new(m20261203_000009_jobs::Migration),
            Box::new(m20261203_000010_isolation::Migration),
            Box::new(m20261203_000011_queue_limits::Migration),
            Box::new(m20261203_000012_change_log::Migration),
            Box::new(m20261203_000013_catalog_version::Migration),
            Box::new(m20261203_000014_change_notify::Migration),
            Box::new(m20261204_000015_reservations::Migration),
            Box::new(m20261204_000016_maintenance::Migration),
            Box::new(m20261204_000017_shared_gpus::Migration),
            Box::new(m20261204_000018_refresh_tokens::Migration),
            Box::new(m20261205_000019_readability::Migration),
            Box::new(m20261205_000020_invitations::Migration),
            Box::new(m20261206_000021_history::Migration),
            Box::new(m20261207_000022_estimates_and_moves::Migration),
            Box::new(m20261208_000023_webhooks::Migration),
            Box::new(m20261209_000024_oidc::Migration),
            Box::new(m20261210_000025_images::Migration),
            Box::new(m20261211_000026_private_networks::Migration),
            Box::new(m20261212_000027_project_networks::Migration),
            Box::new(m20261213_000028_stop_causes::Migration),
            Box::new(m20261214_000029_node_state_reasons::Migration),
            Box::new(m20261215_000030_volumes::Migration),
            Box::new(m20261216_000031_shared_storage::Migration),
            Box::new(m20261217_000032_slurm::Migration),
            Box::new(m20261218_000033_slurm_outside_and_retries::Migration),
            Box::new(m20261219_000034_counts_and_launch_rooms::Migration),
            Box::new(m20261220_000035_waiting_counts::Migration),
        ]
    }
}
