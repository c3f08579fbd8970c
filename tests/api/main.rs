//! The API suite: every test runs against a real server over HTTP, once on
//! SQLite and once on PostgreSQL.

use gantry_test_support as support;
use gantry_test_support::on_both_engines;
use gantry_test_support::receiver;

mod backup;
mod bad_input;
mod billing;
mod change_log;
mod console;
mod flows;
mod history;
mod images;
mod invitations;
mod isolation;
mod jobs;
mod limits;
mod migrations;
mod monitoring;
mod networks;
mod node_access;
mod openapi;
mod orders;
mod proxies;
mod readable;
mod reservations;
mod sessions;
mod shared_gpus;
mod slurm;
mod sso;
mod usage;
mod volumes;
mod webhooks;
