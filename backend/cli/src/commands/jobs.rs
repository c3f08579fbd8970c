//! `job submit FILE.yaml`: a job described in YAML, submitted as an order.

use std::io::Read as _;

use crate::api::{Api, read};
use crate::args::{Output, SubmitJob, Until};
use crate::commands::{logs, orders};
use crate::error::{CliError, CliResult};
use crate::jobfile;
use crate::output;
use crate::routes;
use crate::views::Order;

pub async fn submit(api: &mut Api, output: Output, args: SubmitJob) -> CliResult<()> {
    let name = args.file.display().to_string();
    let text = if name == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| CliError::Usage(format!("reading the job from standard input: {e}")))?;
        text
    } else {
        std::fs::read_to_string(&args.file)
            .map_err(|e| CliError::Usage(format!("reading {name}: {e}")))?
    };
    let job = jobfile::parse(&text).map_err(|e| CliError::Usage(format!("{name}: {e}")))?;
    let secrets = job
        .secrets(|variable| std::env::var(variable).ok())
        .map_err(|e| CliError::Usage(format!("{name}: {e}")))?;
    let org = api.org_id().await?;
    let mut dependencies = Vec::with_capacity(job.depends_on.len());
    for entry in &job.depends_on {
        let parent: Order = read(orders::find(api, org, entry.order()).await?)?;
        dependencies.push(parent.id);
    }
    let mut volumes = Vec::with_capacity(job.volumes.len());
    for entry in &job.volumes {
        volumes.push(crate::commands::volumes::find(api, org, &entry.volume).await?);
    }
    let created = api
        .call(
            routes::CREATE_ORDER,
            &routes::CREATE_ORDER.path(&[&org]),
            Some(&job.order(&dependencies, &volumes, &secrets)),
        )
        .await?;
    let order: Order = read(created.clone())?;
    if args.follow {
        eprintln!(
            "{} submitted ({}); following its output",
            order.name, order.id
        );
        let what = format!("{} did not end", order.name);
        let following = logs::follow(api, org, &order, None, output);
        return orders::within(args.timeout, what, following).await;
    }
    if !args.wait {
        return output::show(output, created, orders::details);
    }
    let ended = orders::wait_for(api, org, &order, Until::Ended, args.timeout).await?;
    let finished: Order = read(ended.clone())?;
    output::show(output, ended, orders::details)?;
    orders::outcome(&finished, Until::Ended)
}
