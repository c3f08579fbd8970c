//! `logs`: a job's output, read page by page or followed live over the
//! server's event stream until the job ends. The job's stdout goes to
//! standard output and everything else to standard error, so a followed
//! job pipes like the command itself.

use std::io::Write as _;
use std::time::Duration;

use eventsource_stream::Eventsource as _;
use futures_util::StreamExt as _;
use http_body_util::BodyExt as _;
use uuid::Uuid;

use crate::api::{Api, json_of, read};
use crate::args::{LogsArgs, Output, Until};
use crate::commands::orders;
use crate::error::{CliError, CliResult};
use crate::http::Reply;
use crate::routes;
use crate::views::{LogLine, Logs, Order};

/// Reconnections in a row before following gives up.
const RECONNECTS: u32 = 5;

pub async fn run(api: &mut Api, output: Output, args: LogsArgs) -> CliResult<()> {
    let org = api.org_id().await?;
    let order: Order = read(orders::find(api, org, &args.order).await?)?;
    if !args.follow {
        return page_through(api, org, order.id, args.attempt, output).await;
    }
    let what = format!("{} did not end", order.name);
    orders::within(
        args.timeout,
        what,
        follow(api, org, &order, args.attempt, output),
    )
    .await
}

fn query(attempt: Option<u32>) -> String {
    attempt.map(|a| format!("&attempt={a}")).unwrap_or_default()
}

async fn page_through(
    api: &mut Api,
    org: Uuid,
    order: Uuid,
    attempt: Option<u32>,
    output: Output,
) -> CliResult<()> {
    let mut after = 0;
    loop {
        let path = format!(
            "{}?limit=5000&after={after}{}",
            routes::LOGS.path(&[&org, &order]),
            query(attempt)
        );
        let page: Logs = read(api.get(routes::LOGS, &path).await?)?;
        if page.lines.is_empty() {
            if page.truncated {
                eprintln!("(output past the job's size limit was dropped)");
            }
            return Ok(());
        }
        for line in &page.lines {
            print_line(line, output)?;
        }
        after = page.next_after.unwrap_or(after);
    }
}

/// Streams new lines until the job ends, reconnecting from the last line
/// seen when the connection drops; then the job's outcome decides.
pub async fn follow(
    api: &mut Api,
    org: Uuid,
    order: &Order,
    attempt: Option<u32>,
    output: Output,
) -> CliResult<()> {
    let mut after = 0_i64;
    let mut failures = 0;
    let base = routes::LOGS.path(&[&org, &order.id]);
    loop {
        let path = format!("{base}?follow=true&after={after}{}", query(attempt));
        let bearer = api.bearer().await?;
        match stream(api, &path, &bearer, &mut after, output).await {
            Ok(true) => break,
            Ok(false) => failures = 0,
            Err(error @ CliError::Api { .. }) => return Err(error),
            Err(error) => {
                failures += 1;
                if failures > RECONNECTS {
                    return Err(error);
                }
            }
        }
        // A stream the server closed is picked up again after a breath; a
        // failing one after longer each time.
        tokio::time::sleep(Duration::from_millis(200 + 500 * u64::from(failures))).await;
    }
    let ended = orders::wait_for(api, org, order, Until::Ended, None).await?;
    orders::outcome(&read(ended)?, Until::Ended)
}

/// One connection's events; `true` once the `end` event came.
async fn stream(
    api: &Api,
    path: &str,
    bearer: &str,
    after: &mut i64,
    output: Output,
) -> CliResult<bool> {
    let response = api.http().open_stream(path, bearer).await?;
    if !response.status().is_success() {
        let (parts, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        return json_of(Reply {
            status: parts.status,
            headers: parts.headers,
            body,
        })
        .map(|_| false);
    }
    let mut events = response.into_body().into_data_stream().eventsource();
    while let Some(event) = events.next().await {
        let event = event.map_err(|e| CliError::Transport(format!("following the output: {e}")))?;
        if event.event == "end" {
            return Ok(true);
        }
        let line: LogLine = serde_json::from_str(&event.data).map_err(|e| {
            CliError::Transport(format!("a line of output the client cannot read: {e}"))
        })?;
        *after = line.id;
        print_line(&line, output)?;
    }
    Ok(false)
}

fn print_line(line: &LogLine, output: Output) -> CliResult<()> {
    let written = match (output, line.stream.as_str()) {
        (Output::Json, _) => serde_json::to_string(line)
            .map_err(std::io::Error::other)
            .and_then(|text| writeln!(std::io::stdout(), "{text}")),
        (Output::Table, "stdout") => writeln!(std::io::stdout(), "{}", line.line),
        (Output::Table, _) => writeln!(std::io::stderr(), "{}", line.line),
    };
    written.map_err(|e| CliError::Local(format!("writing the output: {e}")))
}
