//! Heartbeats: the beats that arrive while a batch commits are written
//! together, a few transactions at a time.
//!
//! A beat writes its node's time, its GPUs' health where it changed and a
//! telemetry row per GPU. Written one transaction each, 1,000 beats a
//! second (2,000 nodes at the default interval) cost the server about
//! 0.8 ms of CPU each, most of it per statement and per commit rather than
//! per row. A few writers per process take whatever has arrived and write
//! it with a few statements for all; each caller waits for the commit. A
//! batch that fails as a whole (a node deleted while its beat waited) is
//! written again beat by beat, so one bad beat fails alone.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{ColumnTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter};
use tokio::sync::{Mutex, mpsc, oneshot};
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};
use gantry_entities::{gpu, gpu_telemetry, node};

/// Beats one transaction takes at most.
const BATCH_MAX: usize = 512;

/// Writers working at once: one alone serialises every beat's statements
/// on one connection.
const WRITERS: usize = 4;

/// Beats that may wait for the writers before callers are slowed down.
const QUEUE: usize = 4 * BATCH_MAX;

/// What one heartbeat writes.
pub struct Beat {
    pub node_id: Uuid,
    pub at: DateTime<Utc>,
    /// The node's new fabric address, when it differs from the stored one.
    pub fabric_address: Option<Option<String>>,
    /// Each reported GPU's index and whether it is healthy.
    pub health: Vec<(i32, bool)>,
    pub samples: Vec<gpu_telemetry::ActiveModel>,
}

struct Submission {
    beat: Beat,
    reply: oneshot::Sender<ApiResult<()>>,
}

/// The process's heartbeat writers.
#[derive(Clone)]
pub struct Beats {
    sender: mpsc::Sender<Submission>,
}

impl Beats {
    /// Starts the writers; they stop when every handle is dropped.
    pub fn start(db: DatabaseConnection) -> Self {
        let (sender, receiver) = mpsc::channel(QUEUE);
        let receiver = Arc::new(Mutex::new(receiver));
        for _ in 0..WRITERS {
            tokio::spawn(run(db.clone(), receiver.clone()));
        }
        Self { sender }
    }

    /// Writes the beat; returns once its transaction has committed.
    pub async fn submit(&self, beat: Beat) -> ApiResult<()> {
        let (reply, answer) = oneshot::channel();
        let stopped = || ApiError::internal(anyhow::anyhow!("the heartbeat writer has stopped"));
        self.sender
            .send(Submission { beat, reply })
            .await
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

async fn run(db: DatabaseConnection, receiver: Arc<Mutex<mpsc::Receiver<Submission>>>) {
    let mut batch = Vec::with_capacity(BATCH_MAX);
    loop {
        // One writer takes what has arrived while the others commit.
        if receiver.lock().await.recv_many(&mut batch, BATCH_MAX).await == 0 {
            return;
        }
        let submissions = std::mem::take(&mut batch);
        let beats: Vec<&Beat> = submissions.iter().map(|s| &s.beat).collect();
        let answers: Vec<ApiResult<()>> = match store(&db, &beats).await {
            Ok(()) => beats.iter().map(|_| Ok(())).collect(),
            Err(error) if beats.len() > 1 => {
                tracing::warn!(%error, beats = beats.len(), "heartbeat batch failed; writing each on its own");
                let mut answers = Vec::with_capacity(beats.len());
                for one in &beats {
                    answers.push(
                        store(&db, std::slice::from_ref(one))
                            .await
                            .map_err(ApiError::from),
                    );
                }
                answers
            }
            Err(error) => vec![Err(error.into())],
        };
        for (submission, answer) in submissions.into_iter().zip(answers) {
            // A caller that went away (its agent hung up) needs no answer.
            let _ = submission.reply.send(answer);
        }
    }
}

/// Writes `beats` in one transaction.
async fn store(db: &DatabaseConnection, beats: &[&Beat]) -> Result<(), DbErr> {
    let Some(at) = beats.iter().map(|b| b.at).max() else {
        return Ok(());
    };
    // A node that beat twice in the batch stands as its last beat says.
    let latest: HashMap<Uuid, &Beat> = beats.iter().map(|b| (b.node_id, *b)).collect();
    let txn = crate::db::write(db).await?;
    // One time for the batch: the beats in it arrived within one commit of
    // each other, and silence is judged in tens of seconds.
    node::Entity::update_many()
        .col_expr(node::Column::LastHeartbeatAt, Expr::value(Some(at)))
        .col_expr(node::Column::UpdatedAt, Expr::value(at))
        .filter(node::Column::Id.is_in(latest.keys().copied()))
        .exec(&txn)
        .await?;
    for beat in latest.values() {
        if let Some(address) = &beat.fabric_address {
            node::Entity::update_many()
                .col_expr(node::Column::FabricAddress, Expr::value(address.clone()))
                .filter(node::Column::Id.eq(beat.node_id))
                .exec(&txn)
                .await?;
        }
    }
    // Only GPUs whose health changed are written: every write of a GPU row
    // is a change the scheduling copies follow. Nodes that report the same
    // GPUs in the same health (nearly all of them) share one statement.
    let mut same: BTreeMap<(bool, Vec<i32>), Vec<Uuid>> = BTreeMap::new();
    for beat in latest.values() {
        for healthy in [true, false] {
            let indices: Vec<i32> = beat
                .health
                .iter()
                .filter(|(_, h)| *h == healthy)
                .map(|(i, _)| *i)
                .collect();
            if !indices.is_empty() {
                same.entry((healthy, indices))
                    .or_default()
                    .push(beat.node_id);
            }
        }
    }
    for ((healthy, indices), nodes) in same {
        gpu::Entity::update_many()
            .col_expr(gpu::Column::Healthy, Expr::value(healthy))
            .filter(gpu::Column::NodeId.is_in(nodes))
            .filter(gpu::Column::Index.is_in(indices))
            .filter(gpu::Column::Healthy.ne(healthy))
            .exec(&txn)
            .await?;
    }
    let samples: Vec<gpu_telemetry::ActiveModel> = beats
        .iter()
        .flat_map(|b| b.samples.iter().cloned())
        .collect();
    crate::db::insert_batched_new(
        &txn,
        samples,
        OnConflict::columns([
            gpu_telemetry::Column::NodeId,
            gpu_telemetry::Column::GpuIndex,
            gpu_telemetry::Column::SampledAt,
        ])
        .do_nothing()
        .to_owned(),
    )
    .await?;
    txn.commit().await
}
