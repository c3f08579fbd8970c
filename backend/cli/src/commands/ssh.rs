//! `ssh ORDER`: runs the access command a running instance shows, in
//! place of this process.

use std::os::unix::process::CommandExt as _;
use std::process::Command;

use crate::api::{Api, read};
use crate::args::SshArgs;
use crate::commands::orders;
use crate::error::{CliError, CliResult};
use crate::views::Order;

pub async fn run(api: &mut Api, args: SshArgs) -> CliResult<()> {
    let org = api.org_id().await?;
    let order: Order = read(orders::find(api, org, &args.order).await?)?;
    if order.status != "running" {
        return Err(CliError::Local(format!(
            "{} is {}, not running: there is nothing to connect to",
            order.name, order.status
        )));
    }
    let hosts = order.access.map(|a| a.hosts).unwrap_or_default();
    let host = match &args.node {
        Some(node) => hosts.iter().find(|h| &h.node == node).ok_or_else(|| {
            let nodes: Vec<&str> = hosts.iter().map(|h| h.node.as_str()).collect();
            CliError::Usage(format!(
                "{} runs on no node called {node:?}; its nodes: {}",
                order.name,
                nodes.join(", ")
            ))
        })?,
        None => hosts
            .first()
            .ok_or_else(|| CliError::Local(format!("{} shows no access yet", order.name)))?,
    };
    let command = host
        .ssh
        .as_ref()
        .map(|s| s.command.clone())
        .ok_or_else(|| {
            CliError::Local(format!(
                "{} admits no SSH on {}: order it with an SSH key",
                order.name, host.node
            ))
        })?;
    let mut words = command.split_whitespace();
    let program = words
        .next()
        .ok_or_else(|| CliError::Transport("the server showed an empty access command".into()))?;
    let error = Command::new(program).args(words).args(&args.rest).exec();
    Err(CliError::Local(format!("running {program}: {error}")))
}
