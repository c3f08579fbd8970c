//! `gantry-cli`: Gantry's command-line client. It speaks only the REST
//! API, so it runs anywhere a browser could, with no database and none of
//! the server's dependencies.

mod api;
mod args;
mod commands;
mod config;
mod error;
mod http;
mod jobfile;
mod output;
mod routes;
mod views;

use std::process::ExitCode;

use clap::{CommandFactory as _, Parser as _};

use crate::api::{Api, Source};
use crate::args::{Cli, Command, JobCommand, OrderCommand};
use crate::commands::{account, jobs, login, logs, operator, orders, ssh, volumes};
use crate::error::CliResult;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: starting: {e}");
            return ExitCode::from(error::exit::ERROR);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            error.exit_code()
        }
    }
}

async fn run(cli: Cli) -> CliResult<()> {
    let config_path = match cli.config {
        Some(path) => path,
        None => config::default_path()?,
    };
    let output = cli.output;
    let (server, org) = (cli.server, cli.org);
    let signed_in = || {
        Api::open(Source {
            config_path: config_path.clone(),
            server: server.clone(),
            api_key: std::env::var("GANTRY_API_KEY")
                .ok()
                .filter(|k| !k.is_empty()),
            org: org.clone(),
        })
    };
    match cli.command {
        Command::Login(args) => login::login(&config_path, server, org, args).await,
        Command::Logout => login::logout(&config_path).await,
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "gantry-cli",
                &mut std::io::stdout(),
            );
            Ok(())
        }
        Command::Whoami => login::whoami(&mut signed_in()?, output).await,
        Command::Catalog => account::catalog(&mut signed_in()?, output).await,
        Command::Order(command) => {
            let api = &mut signed_in()?;
            match command {
                OrderCommand::Create(args) => orders::create(api, output, args).await,
                OrderCommand::List(args) => orders::list(api, output, args).await,
                OrderCommand::Show { order } => orders::show(api, output, &order).await,
                OrderCommand::Cancel { order } => orders::cancel(api, output, &order).await,
                OrderCommand::Wait(args) => orders::wait(api, output, args).await,
            }
        }
        Command::Job(JobCommand::Submit(args)) => {
            jobs::submit(&mut signed_in()?, output, args).await
        }
        Command::Volume(command) => volumes::run(&mut signed_in()?, output, command).await,
        Command::Logs(args) => logs::run(&mut signed_in()?, output, args).await,
        Command::Ssh(args) => ssh::run(&mut signed_in()?, args).await,
        Command::Usage(args) => account::usage(&mut signed_in()?, output, args).await,
        Command::Invoices => account::invoices(&mut signed_in()?, output).await,
        Command::Quota => account::quota(&mut signed_in()?, output).await,
        Command::Nodes(args) => operator::nodes(&mut signed_in()?, output, args).await,
        Command::Drain(args) => {
            operator::act(
                &mut signed_in()?,
                output,
                routes::DRAIN,
                &args.node,
                args.force,
                args.reason.as_deref(),
            )
            .await
        }
        Command::Cordon(args) => {
            operator::act(
                &mut signed_in()?,
                output,
                routes::CORDON,
                &args.node,
                args.force,
                args.reason.as_deref(),
            )
            .await
        }
        Command::Uncordon { node } => {
            operator::act(
                &mut signed_in()?,
                output,
                routes::UNCORDON,
                &node,
                false,
                None,
            )
            .await
        }
        Command::WhatIf(args) => operator::what_if(&mut signed_in()?, output, args).await,
    }
}
