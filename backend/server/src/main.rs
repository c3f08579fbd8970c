//! The `gantry` command: the server and its tools in one binary.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use gantry_access::operators::{self, Outcome};
use gantry_core::config::Config;
use gantry_server::{serve, state};
use tracing_subscriber::EnvFilter;

mod simulate;

#[derive(Parser)]
#[command(
    name = "gantry",
    version,
    about = "Gantry: a multi-tenant GPU cloud control plane"
)]
struct Cli {
    /// A TOML configuration file; environment variables override it.
    #[arg(long, global = true, env = "GANTRY_CONFIG")]
    config: Option<PathBuf>,
    /// Log line format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "GANTRY_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Apply migrations and serve the API until SIGINT or SIGTERM.
    Serve {
        /// Start an empty production installation: no demo catalog,
        /// simulated cluster or demo logins (also `GANTRY_DEMO=false`).
        #[arg(long)]
        no_demo: bool,
    },
    /// Apply pending database migrations and exit.
    Migrate,
    /// Print the OpenAPI document.
    Openapi,
    /// Replay workload traces through the scheduling engine.
    Sim {
        #[command(subcommand)]
        command: simulate::SimCommand,
    },
    /// Administrative tasks.
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
    },
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Create a platform operator, or promote an existing user to one.
    CreateOperator {
        #[arg(long)]
        email: String,
        /// Used only when the user does not exist yet.
        #[arg(long, env = "GANTRY_OPERATOR_PASSWORD")]
        password: String,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match cli.command {
        Command::Openapi => {
            print!("{}", gantry_server::openapi::to_committed_json()?);
            Ok(())
        }
        Command::Migrate => {
            let config = Config::load(cli.config.as_deref())?;
            let db = gantry_core::db::connect(&config.database_url(), 1, "gantry").await?;
            gantry_core::db::migrate(&db).await?;
            tracing::info!("migrations applied");
            Ok(())
        }
        Command::Serve { no_demo } => {
            let mut config = Config::load(cli.config.as_deref())?;
            config.demo &= !no_demo;
            serve(config).await
        }
        Command::Sim { command } => simulate::run(command),
        Command::Admin {
            command: AdminCommand::CreateOperator { email, password },
        } => {
            let config = Config::load(cli.config.as_deref())?;
            let db = gantry_core::db::connect(&config.database_url(), 1, "gantry").await?;
            gantry_core::db::migrate(&db).await?;
            match operators::create_or_promote(&db, &email, &password).await? {
                Outcome::Created(id) => println!("created operator {email} ({id})"),
                Outcome::Promoted(id) => println!("promoted {email} ({id}) to operator"),
            }
            Ok(())
        }
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    tracing::info!(?config, "starting");
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let demo = config.demo;
    let state = state::start(config).await?;
    let address = listener.local_addr()?;
    tracing::info!(%address, "serving");
    if demo {
        use gantry_server::demo::*;
        println!(
            "Gantry demo at http://{address}/\n  operator: {OPERATOR_EMAIL} / {OPERATOR_PASSWORD}\n  tenant:   {TENANT_EMAIL} / {TENANT_PASSWORD}\n(start with --no-demo for an empty installation)"
        );
    }
    serve::serve(listener, state, shutdown_signal()).await?;
    tracing::info!("stopped");
    Ok(())
}

async fn shutdown_signal() {
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
    tracing::info!("shutting down; finishing requests in flight");
}

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,sea_orm=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .init(),
    }
}
