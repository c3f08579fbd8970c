//! Order intake: the writes that queue new orders, one transaction for all
//! the orders that arrive while the previous one commits.
//!
//! Orders of one organization are counted against its queue limit under a
//! lock on its row, so writing them one transaction each would make every
//! order wait for the commits (and disk flushes) of all those before it. A
//! single writer per process takes whatever has arrived, locks the
//! organizations, counts, inserts the orders, their dependency edges and
//! audit rows with a few multi-row statements, and commits once; each
//! caller gets its own answer. The volumes the orders attach are locked
//! and read again: one deleted since its order was checked refuses that
//! order, and a delete waiting on the lock then finds the order attaching
//! it. When the batch fails as a whole (a
//! constraint that only a race can break), each order is written again on
//! its own, so one bad order never refuses the others.

use std::collections::{BTreeSet, HashMap};

use sea_orm::{ColumnTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QuerySelect};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};
use crate::handles::waiting::Waiting;
use gantry_entities::{audit_log, order, order_dependency, order_volume, volume};
use gantry_types::classes::VolumeState;

/// The order, and whether this call made it (a replayed key did not).
pub struct Created {
    pub order: order::Model,
    pub new: bool,
}

/// Requests one transaction takes at most. Enough to cover every client a
/// busy replica serves at once; small enough that a batch's statements stay
/// short.
const BATCH_MAX: usize = 256;

/// Requests that may wait for the writer before callers are slowed down.
const QUEUE: usize = 4 * BATCH_MAX;

/// One request's rows, validated and admitted, to be inserted.
pub struct Prepared {
    pub org_id: Uuid,
    pub project_id: Option<Uuid>,
    /// Already scoped to the caller; only the first member carries it.
    pub idempotency_key: Option<String>,
    /// The order, or every member of a job array; the first answers.
    pub members: Vec<order::ActiveModel>,
    /// Dependency edges of every member.
    pub edges: Vec<order_dependency::ActiveModel>,
    /// The volumes every member attaches.
    pub volumes: Vec<order_volume::ActiveModel>,
    pub audit: audit_log::ActiveModel,
}

impl Prepared {
    fn first_id(&self) -> Option<Uuid> {
        self.members.first().and_then(|m| m.id.clone().take())
    }
}

struct Submission {
    prepared: Prepared,
    reply: oneshot::Sender<ApiResult<Created>>,
}

/// The process's order writer.
#[derive(Clone)]
pub struct Intake {
    sender: mpsc::Sender<Submission>,
}

impl Intake {
    /// Starts the writer; it stops when every handle is dropped.
    pub fn start(db: DatabaseConnection, default_waiting_limit: u32) -> Self {
        let (sender, receiver) = mpsc::channel(QUEUE);
        tokio::spawn(run(db, default_waiting_limit, receiver));
        Self { sender }
    }

    /// Queues the prepared order (or answers the order its idempotency key
    /// made before), once the writer's transaction has committed.
    pub async fn submit(&self, prepared: Prepared) -> ApiResult<Created> {
        let (reply, answer) = oneshot::channel();
        let stopped = || ApiError::internal(anyhow::anyhow!("the order writer has stopped"));
        self.sender
            .send(Submission { prepared, reply })
            .await
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

async fn run(db: DatabaseConnection, limit: u32, mut receiver: mpsc::Receiver<Submission>) {
    let mut batch = Vec::with_capacity(BATCH_MAX);
    while receiver.recv_many(&mut batch, BATCH_MAX).await > 0 {
        let submissions = std::mem::take(&mut batch);
        let prepared: Vec<&Prepared> = submissions.iter().map(|s| &s.prepared).collect();
        let answers = match store(&db, limit, &prepared).await {
            Ok(answers) => answers,
            Err(error) if prepared.len() > 1 => {
                tracing::warn!(%error, orders = prepared.len(), "order batch failed; writing each on its own");
                let mut answers = Vec::with_capacity(prepared.len());
                for one in &prepared {
                    answers.push(match store(&db, limit, std::slice::from_ref(one)).await {
                        Ok(mut answer) => answer.pop().unwrap_or_else(|| Err(lost())),
                        Err(error) => Err(error.into()),
                    });
                }
                answers
            }
            Err(error) => vec![Err(error.into())],
        };
        for (submission, answer) in submissions.into_iter().zip(answers) {
            // A caller that went away (its client hung up) needs no answer.
            let _ = submission.reply.send(answer);
        }
    }
}

fn lost() -> ApiError {
    ApiError::internal(anyhow::anyhow!(
        "an order's row was not found after its insert"
    ))
}

/// An order an idempotency key already names.
enum Keyed {
    Committed(Box<order::Model>),
    /// Inserted by this batch; its first member's id.
    Batch(Uuid),
}

/// What one request comes to before the rows are read back.
enum Outcome {
    Refused(ApiError),
    /// An order committed before, under the same key.
    Replayed(Box<order::Model>),
    /// Inserted now; the id of its first member.
    Inserted(Uuid),
    /// Replays a key inserted earlier in this batch.
    SameAs(Uuid),
}

/// The volumes `batch` attaches that are still there to attach, locked
/// until the batch commits.
async fn live_volumes(
    txn: &impl sea_orm::ConnectionTrait,
    batch: &[&Prepared],
) -> Result<BTreeSet<Uuid>, DbErr> {
    let ids: BTreeSet<Uuid> = batch
        .iter()
        .flat_map(|p| p.volumes.iter().filter_map(|v| v.volume_id.clone().take()))
        .collect();
    if ids.is_empty() {
        return Ok(BTreeSet::new());
    }
    Ok(volume::Entity::find()
        .filter(volume::Column::Id.is_in(ids))
        .filter(volume::Column::State.is_in([VolumeState::Creating, VolumeState::Available]))
        .lock_exclusive()
        .all(txn)
        .await?
        .into_iter()
        .map(|v| v.id)
        .collect())
}

/// Writes one batch in one transaction: an answer per request, in order.
async fn store(
    db: &DatabaseConnection,
    limit: u32,
    batch: &[&Prepared],
) -> Result<Vec<ApiResult<Created>>, DbErr> {
    let txn = crate::db::write(db).await?;
    let orgs: BTreeSet<Uuid> = batch.iter().map(|p| p.org_id).collect();
    let mut waiting = Waiting::read(&txn, &orgs, limit).await?;
    // Read under the organizations' locks, so no other writer can insert
    // one of these keys before this transaction commits.
    let keys: Vec<&str> = batch
        .iter()
        .filter_map(|p| p.idempotency_key.as_deref())
        .collect();
    let mut keyed: HashMap<(Uuid, String), Keyed> = HashMap::new();
    if !keys.is_empty() {
        for row in order::Entity::find()
            .filter(order::Column::OrgId.is_in(orgs.iter().copied()))
            .filter(order::Column::IdempotencyKey.is_in(keys))
            .all(&txn)
            .await?
        {
            if let Some(key) = row.idempotency_key.clone() {
                keyed.insert((row.org_id, key), Keyed::Committed(Box::new(row)));
            }
        }
    }
    let live = live_volumes(&txn, batch).await?;
    let mut outcomes = Vec::with_capacity(batch.len());
    let (mut orders, mut edges, mut audits) = (Vec::new(), Vec::new(), Vec::new());
    let mut volumes = Vec::new();
    for prepared in batch {
        let key = prepared
            .idempotency_key
            .clone()
            .map(|key| (prepared.org_id, key));
        if let Some(earlier) = key.as_ref().and_then(|key| keyed.get(key)) {
            outcomes.push(match earlier {
                Keyed::Committed(row) => Outcome::Replayed(row.clone()),
                Keyed::Batch(id) => Outcome::SameAs(*id),
            });
            continue;
        }
        let (Some(first), Ok(count)) = (prepared.first_id(), u64::try_from(prepared.members.len()))
        else {
            outcomes.push(Outcome::Refused(lost()));
            continue;
        };
        if let Some(gone) = prepared
            .volumes
            .iter()
            .filter_map(|v| v.volume_id.clone().take())
            .find(|id| !live.contains(id))
        {
            outcomes.push(Outcome::Refused(ApiError::conflict(
                "volume_unavailable",
                format!("volume {gone} is being deleted"),
            )));
            continue;
        }
        if let Err(refused) = waiting.admit(prepared.org_id, prepared.project_id, count) {
            outcomes.push(Outcome::Refused(refused));
            continue;
        }
        if let Some(key) = key {
            keyed.insert(key, Keyed::Batch(first));
        }
        orders.extend(prepared.members.iter().cloned());
        edges.extend(prepared.edges.iter().cloned());
        volumes.extend(prepared.volumes.iter().cloned());
        audits.push(prepared.audit.clone());
        outcomes.push(Outcome::Inserted(first));
    }
    crate::db::insert_batched(&txn, orders).await?;
    crate::db::insert_batched(&txn, edges).await?;
    crate::db::insert_batched(&txn, volumes).await?;
    crate::db::insert_batched(&txn, audits).await?;
    let firsts: Vec<Uuid> = outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Inserted(id) | Outcome::SameAs(id) => Some(*id),
            _ => None,
        })
        .collect();
    let mut rows: HashMap<Uuid, order::Model> = HashMap::new();
    if !firsts.is_empty() {
        rows = order::Entity::find()
            .filter(order::Column::Id.is_in(firsts))
            .all(&txn)
            .await?
            .into_iter()
            .map(|o| (o.id, o))
            .collect();
    }
    txn.commit().await?;
    Ok(outcomes
        .into_iter()
        .map(|outcome| match outcome {
            Outcome::Refused(error) => Err(error),
            Outcome::Replayed(order) => Ok(Created {
                order: *order,
                new: false,
            }),
            Outcome::Inserted(id) | Outcome::SameAs(id) => rows
                .get(&id)
                .cloned()
                .map(|order| Created {
                    order,
                    new: matches!(outcome, Outcome::Inserted(_)),
                })
                .ok_or_else(lost),
        })
        .collect())
}
