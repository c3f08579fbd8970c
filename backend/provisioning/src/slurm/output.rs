//! Jobs' output files read into their logs while they run, not only once
//! they end: each read takes the whole lines written since the last, from
//! the byte the last read stopped at, so nothing is kept twice.
//!
//! One `stat` call per read gives every running job's file sizes; only a
//! file that grew is read (`dd` from its offset), so quiet jobs cost no
//! command of their own, on this host or over SSH.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QueryOrder,
};
use uuid::Uuid;

use super::command::{Slurm, SlurmError};
use gantry_entities::{allocation, order, slurm_cluster, slurm_job};
use gantry_workload::jobs::logs::{self, Stream};

/// The most bytes one read takes of one file.
const READ_MAX: i64 = 1 << 20;
/// The most files one `stat` call names.
const STAT_FILES_MAX: usize = 500;

/// A job's two output files, each with how much of it is in the log.
pub struct Files {
    pub out: (String, i64),
    pub err: (String, i64),
}

/// Where `row`'s output files are, for an order of organization `org_id`.
pub fn files(cluster: &slurm_cluster::Model, org_id: Uuid, row: &slurm_job::Model) -> Files {
    let dir = super::output_dir(cluster, super::user_of(cluster, org_id).as_deref());
    Files {
        out: (format!("{dir}/{}.out", row.name), row.out_read),
        err: (format!("{dir}/{}.err", row.name), row.err_read),
    }
}

/// Up to `max` bytes of the file at `path` from byte `offset`. The file
/// is the tenant's to replace: a symbolic link (to a file only root may
/// read, say) or a FIFO (that would hold the read) is refused, not read.
pub async fn read_from(
    slurm: &Slurm,
    path: &str,
    offset: i64,
    max: i64,
) -> Result<Vec<u8>, SlurmError> {
    slurm
        .run_bytes(
            "dd",
            &[
                format!("if={path}"),
                "iflag=skip_bytes,count_bytes,nofollow,nonblock".into(),
                format!("skip={offset}"),
                format!("count={max}"),
                "status=none".into(),
            ],
            &[],
            None,
        )
        .await
}

/// The whole lines at the start of `bytes` (all of it once the file is
/// complete), with how many bytes they take: a line still being written
/// waits for the next read. A line longer than one read is cut there.
pub fn lines(bytes: &[u8], complete: bool) -> (usize, Vec<String>) {
    let whole = bytes.iter().rposition(|b| *b == b'\n').map(|i| i + 1);
    let full = i64::try_from(bytes.len()).unwrap_or(i64::MAX) >= READ_MAX;
    let taken = match whole {
        _ if complete => bytes.len(),
        Some(taken) => taken,
        None if full => bytes.len(),
        None => 0,
    };
    let text = String::from_utf8_lossy(&bytes[..taken]);
    (taken, text.lines().map(str::to_owned).collect())
}

/// The node an attempt's output is kept under: its first node, the one
/// that runs the batch script.
pub async fn log_node(
    db: &impl ConnectionTrait,
    row: &slurm_job::Model,
) -> Result<Option<Uuid>, DbErr> {
    Ok(allocation::Entity::find()
        .filter(allocation::Column::OrderId.eq(row.order_id))
        .filter(allocation::Column::Attempt.eq(row.attempt))
        .order_by_asc(allocation::Column::Id)
        .one(db)
        .await?
        .map(|a| a.node_id))
}

/// Reads what the running jobs of `rows` wrote since the last read into
/// their logs.
pub async fn follow(
    db: &DatabaseConnection,
    slurm: &Slurm,
    cluster: &slurm_cluster::Model,
    rows: &[&slurm_job::Model],
    log_limit: i64,
    now: DateTime<Utc>,
) -> Result<(), SlurmError> {
    let jobs = match order::Entity::find()
        .filter(order::Column::Id.is_in(rows.iter().map(|r| r.order_id)))
        .filter(order::Column::Kind.eq(gantry_workload::jobs::KIND))
        .all(db)
        .await
    {
        Ok(jobs) => jobs,
        Err(error) => {
            tracing::warn!(%error, "jobs whose output to read not found");
            return Ok(());
        }
    };
    let orgs: HashMap<Uuid, Uuid> = jobs.iter().map(|o| (o.id, o.org_id)).collect();
    let followed: Vec<(&slurm_job::Model, Files)> = rows
        .iter()
        .filter_map(|r| Some((*r, files(cluster, *orgs.get(&r.order_id)?, r))))
        .collect();
    let paths: Vec<String> = followed
        .iter()
        .flat_map(|(_, f)| [f.out.0.clone(), f.err.0.clone()])
        .collect();
    let mut sizes: HashMap<String, i64> = HashMap::new();
    for part in paths.chunks(STAT_FILES_MAX) {
        let mut args = vec!["--format=%s %n".to_owned(), "--".to_owned()];
        args.extend(part.iter().cloned());
        let out = slurm.run("stat", &args, &[], None).await?;
        sizes.extend(out.lines().filter_map(|l| {
            let (size, path) = l.split_once(' ')?;
            Some((path.to_owned(), size.parse().ok()?))
        }));
    }
    for (row, files) in followed {
        let mut read = Vec::new();
        let mut offsets = [files.out.1, files.err.1];
        for (i, (stream, (path, offset))) in
            [(Stream::Stdout, &files.out), (Stream::Stderr, &files.err)]
                .into_iter()
                .enumerate()
        {
            if sizes.get(path).is_none_or(|size| size <= offset) {
                continue;
            }
            // One file refused (its tenant replaced it) holds up no other.
            let bytes = match read_from(slurm, path, *offset, READ_MAX).await {
                Ok(bytes) => bytes,
                Err(error) => {
                    tracing::info!(%error, order_id = %row.order_id, "a job's output not read");
                    continue;
                }
            };
            let (taken, lines) = lines(&bytes, false);
            offsets[i] += i64::try_from(taken).unwrap_or(0);
            read.extend(lines.into_iter().map(|l| (stream, l)));
        }
        if offsets == [files.out.1, files.err.1] {
            continue;
        }
        if let Err(error) = keep(db, row, offsets, read, log_limit, now).await {
            tracing::warn!(%error, order_id = %row.order_id, "Slurm output not kept");
        }
    }
    Ok(())
}

/// Keeps `lines` in the attempt's log and moves its files' offsets on, in
/// one transaction; a row another read moved on meanwhile keeps nothing.
async fn keep(
    db: &DatabaseConnection,
    row: &slurm_job::Model,
    offsets: [i64; 2],
    lines: Vec<(Stream, String)>,
    log_limit: i64,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let txn = gantry_core::db::write(db).await?;
    let moved = slurm_job::Entity::update_many()
        .col_expr(slurm_job::Column::OutRead, Expr::value(offsets[0]))
        .col_expr(slurm_job::Column::ErrRead, Expr::value(offsets[1]))
        .filter(slurm_job::Column::OrderId.eq(row.order_id))
        .filter(slurm_job::Column::Attempt.eq(row.attempt))
        .filter(slurm_job::Column::OutRead.eq(row.out_read))
        .filter(slurm_job::Column::ErrRead.eq(row.err_read))
        .filter(slurm_job::Column::Finished.eq(false))
        .exec(&txn)
        .await?;
    if moved.rows_affected == 0 {
        return Ok(());
    }
    let job = order::Entity::find_by_id(row.order_id).one(&txn).await?;
    if let (Some(job), Some(node_id)) = (job, log_node(&txn, row).await?) {
        logs::keep(&txn, &job, node_id, lines, log_limit, now).await?;
    }
    txn.commit().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_still_being_written_waits_for_the_next_read() {
        let (taken, lines) = lines(b"first\nsecond\nthi", false);
        assert_eq!(taken, 13);
        assert_eq!(lines, ["first", "second"]);
        assert_eq!(super::lines(b"no newline yet", false), (0, Vec::new()));
        let mut full = vec![b'y'; usize::try_from(READ_MAX).unwrap_or(0)];
        full[10] = b'\n';
        assert_eq!(super::lines(&full, false).0, 11);
        // Once the file is complete, the last line counts without one.
        let (taken, lines) = super::lines(b"thi\xffrd", true);
        assert_eq!(taken, 6);
        assert_eq!(lines, ["thi\u{fffd}rd"]);
    }

    #[test]
    fn a_line_longer_than_a_read_is_cut_there() {
        let long = vec![b'x'; usize::try_from(READ_MAX).unwrap_or(0)];
        let (taken, lines) = lines(&long, false);
        assert_eq!(taken, long.len());
        assert_eq!(lines.len(), 1);
    }
}
