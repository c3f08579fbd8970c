//! Volumes: storage an organization owns apart from any order. A `local`
//! volume is a file system image of exactly its size on one node's disk,
//! so the orders that attach it run on that node; a `shared` one is a
//! directory on the region's distributed file system. Tenants create, grow
//! and delete them here; orders name them with a mount path (`attach`);
//! nodes are told which volumes to keep and say how they stand (`nodes`);
//! the sizes each held over time are what storage is billed by (`held`);
//! organizations may hold only so much of each kind (`quotas`).

pub mod api;
pub mod attach;
pub mod held;
pub mod nodes;
pub mod paths;
pub mod quotas;
pub mod service;
pub mod shared;
