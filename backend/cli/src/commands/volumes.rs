//! `volume …`: create, list, grow, rm; and finding a volume by name or id,
//! which orders and job files that attach one share.

use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::api::{Api, read};
use crate::args::{self, CreateVolume, Output, VolumeCommand};
use crate::error::{CliError, CliResult};
use crate::output::{self, or_dash};
use crate::routes;

#[derive(Debug, Deserialize)]
struct Volume {
    id: Uuid,
    name: String,
    region: String,
    kind: String,
    size_gib: i64,
    used_bytes: Option<i64>,
    status: String,
    status_reason: Option<String>,
    node: Option<String>,
    #[serde(default)]
    orders: Vec<User>,
}

#[derive(Debug, Deserialize)]
struct User {
    name: String,
}

pub async fn run(api: &mut Api, output: Output, command: VolumeCommand) -> CliResult<()> {
    let org = api.org_id().await?;
    match command {
        VolumeCommand::Create(args) => create(api, output, org, args).await,
        VolumeCommand::List => list(api, output, org).await,
        VolumeCommand::Grow { volume, size_gib } => {
            let id = find(api, org, &volume).await?;
            let grown = api
                .call(
                    routes::UPDATE_VOLUME,
                    &routes::UPDATE_VOLUME.path(&[&org, &id]),
                    Some(&json!({ "size_gib": size_gib })),
                )
                .await?;
            output::show(output, grown, details)
        }
        VolumeCommand::Rm { volume } => {
            let id = find(api, org, &volume).await?;
            let deleted = api
                .call(
                    routes::DELETE_VOLUME,
                    &routes::DELETE_VOLUME.path(&[&org, &id]),
                    None,
                )
                .await?;
            output::show(output, deleted, details)
        }
    }
}

async fn create(api: &mut Api, output: Output, org: Uuid, args: CreateVolume) -> CliResult<()> {
    let body = json!({
        "name": args.name,
        "region": args.region,
        "size_gib": args.size_gib,
        "kind": args::api_name(args.kind),
    });
    let created = api
        .call(
            routes::CREATE_VOLUME,
            &routes::CREATE_VOLUME.path(&[&org]),
            Some(&body),
        )
        .await?;
    output::show(output, created, details)
}

async fn list(api: &mut Api, output: Output, org: Uuid) -> CliResult<()> {
    let path = format!("{}?", routes::VOLUMES.path(&[&org]));
    let all = api.every_page(routes::VOLUMES, &path).await?;
    output::show(output, Value::Array(all), |value| {
        let volumes: Vec<Volume> = read(value)?;
        let mut table = output::table(&[
            "NAME", "STATUS", "KIND", "REGION", "NODE", "SIZE", "USED", "ORDERS", "ID",
        ]);
        for v in volumes {
            table.add_row([
                v.name,
                v.status,
                v.kind,
                v.region,
                or_dash(v.node),
                format!("{} GiB", v.size_gib),
                v.used_bytes.map_or_else(|| "-".to_owned(), gib),
                v.orders.len().to_string(),
                v.id.to_string(),
            ]);
        }
        Ok(table)
    })
}

/// "1.25 GiB".
fn gib(bytes: i64) -> String {
    format!("{:.2} GiB", bytes as f64 / f64::from(1u32 << 30))
}

fn details(value: Value) -> CliResult<comfy_table::Table> {
    let v: Volume = read(value)?;
    let mut table = output::table(&[]);
    let users: Vec<String> = v.orders.into_iter().map(|u| u.name).collect();
    for (label, shown) in [
        ("Name", v.name),
        ("Id", v.id.to_string()),
        ("Status", v.status),
        ("Why", or_dash(v.status_reason)),
        ("Kind", v.kind),
        ("Region", v.region),
        ("Node", or_dash(v.node)),
        ("Size", format!("{} GiB", v.size_gib)),
        ("Used", v.used_bytes.map_or_else(|| "-".to_owned(), gib)),
        (
            "Orders",
            if users.is_empty() {
                "-".to_owned()
            } else {
                users.join(", ")
            },
        ),
    ] {
        table.add_row([label.to_owned(), shown]);
    }
    Ok(table)
}

/// The volume `reference` names: its id, or the name of one of the
/// organization's volumes (names are unique among them).
pub async fn find(api: &mut Api, org: Uuid, reference: &str) -> CliResult<Uuid> {
    if let Ok(id) = reference.parse::<Uuid>() {
        return Ok(id);
    }
    let path = format!("{}?", routes::VOLUMES.path(&[&org]));
    let volumes: Vec<Volume> = read(Value::Array(api.every_page(routes::VOLUMES, &path).await?))?;
    volumes
        .into_iter()
        .find(|v| v.name == reference)
        .map(|v| v.id)
        .ok_or_else(|| {
            CliError::Usage(format!(
                "no volume is called {reference:?} in this organization"
            ))
        })
}

/// An attachment as `--volume VOLUME:/PATH[:ro]` writes it, with the
/// volume found by name or id.
pub async fn attachment(api: &mut Api, org: Uuid, spec: &str) -> CliResult<Value> {
    let mut parts = spec.splitn(3, ':');
    let (Some(volume), Some(path)) = (parts.next(), parts.next()) else {
        return Err(CliError::Usage(format!(
            "--volume {spec:?}: write VOLUME:/PATH or VOLUME:/PATH:ro"
        )));
    };
    let read_only = match parts.next() {
        None => false,
        Some("ro") => true,
        Some(other) => {
            return Err(CliError::Usage(format!(
                "--volume {spec:?}: {other:?} is not `ro`"
            )));
        }
    };
    let id = find(api, org, volume).await?;
    Ok(json!({ "volume_id": id, "mount_path": path, "read_only": read_only }))
}
