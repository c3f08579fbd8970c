//! What can go wrong in a command, and the exit code each says it with.

use std::process::ExitCode;

/// The exit codes scripts can rely on.
pub mod exit {
    pub const ERROR: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const ORDER_FAILED: u8 = 3;
    pub const TIMED_OUT: u8 = 4;
}

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line or a file it named is wrong: nothing was sent.
    #[error("{0}")]
    Usage(String),
    /// The server refused the request with a problem document.
    #[error("{}", problem_text(.status, .title, .detail, .fields))]
    Api {
        status: u16,
        title: String,
        detail: String,
        fields: Vec<(String, String)>,
    },
    /// The server could not be reached or answered something unreadable.
    #[error("{0}")]
    Transport(String),
    #[error("not signed in: run `gantry-cli login` first")]
    NotSignedIn,
    #[error("{0}")]
    Local(String),
    /// The order ended without completing.
    #[error("{0}")]
    OrderFailed(String),
    /// A wait's `--timeout` passed before the order got there.
    #[error("{0}")]
    TimedOut(String),
}

fn problem_text(status: &u16, title: &str, detail: &str, fields: &[(String, String)]) -> String {
    let mut text = if detail.is_empty() || detail == title {
        format!("{title} ({status})")
    } else {
        format!("{title} ({status}): {detail}")
    };
    for (field, message) in fields {
        text.push_str(&format!("\n  {field}: {message}"));
    }
    text
}

impl CliError {
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(match self {
            Self::Usage(_) => exit::USAGE,
            Self::OrderFailed(_) => exit::ORDER_FAILED,
            Self::TimedOut(_) => exit::TIMED_OUT,
            Self::Api { .. } | Self::Transport(_) | Self::NotSignedIn | Self::Local(_) => {
                exit::ERROR
            }
        })
    }
}

pub type CliResult<T> = Result<T, CliError>;
