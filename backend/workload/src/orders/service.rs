//! Creating an order, apart from HTTP: validation, the catalog, keys,
//! ports and image it names, admission, and the rows with their audit
//! entry. The API and anything else that orders call this.

use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, DatabaseConnection, QueryFilter, Set};
use uuid::Uuid;

use super::intake::{Created, Intake, Prepared};
use super::{CreateOrder, DURATION_MAX, DURATION_MIN, NODE_COUNT_MAX, admission};
use gantry_access::tenancy::access::OrgScope;
use gantry_core::audit::{self, Change};
use gantry_core::auth::principal::Actor;
use gantry_core::catalog::Catalog;
use gantry_core::config::Config;
use gantry_core::error::{ApiError, ApiResult};
use gantry_core::sealing::Sealer;
use gantry_core::validate::Fields;
use gantry_entities::order;
use gantry_types::classes::{OrderStatus, PricingClass, PriorityClass, WorkloadClass};

/// Ports one order may expose.
const PORTS_MAX: usize = 8;

/// Who orders, and the `Idempotency-Key` (already scoped to the caller).
pub struct Caller<'a> {
    pub scope: &'a OrgScope,
    pub actor: &'a Actor,
    pub idempotency_key: Option<String>,
}

/// Checks the ports an order exposes against the operator's list.
fn check_ports(fields: &mut Fields, ports: &[u16], allowed: &[u16]) {
    if ports.len() > PORTS_MAX {
        fields.push("ports", format!("at most {PORTS_MAX} ports"));
    }
    for (i, port) in ports.iter().enumerate() {
        if !allowed.contains(port) {
            fields.push(
                &format!("ports[{i}]"),
                format!("port {port} may not be exposed; allowed: {allowed:?}"),
            );
        } else if ports[..i].contains(port) {
            fields.push(
                &format!("ports[{i}]"),
                format!("port {port} is listed twice"),
            );
        }
    }
}

/// What creating an order reads and writes through.
#[derive(Clone, Copy)]
pub struct Services<'a> {
    pub db: &'a DatabaseConnection,
    pub catalog: &'a Catalog,
    pub intake: &'a Intake,
    pub config: &'a Config,
    /// Seals a job's secret variables.
    pub sealer: &'a Sealer,
}

/// Validates, admits and stores an order (or a job array), or answers the
/// order an earlier call with the same key made. Every read comes before
/// the intake's write transaction, which then holds the organization's lock
/// (and SQLite's single write lock) only for the inserts.
pub async fn create(
    services: Services<'_>,
    caller: &Caller<'_>,
    request: CreateOrder,
    now: DateTime<Utc>,
) -> ApiResult<Created> {
    let Services {
        db,
        catalog,
        intake,
        config,
        sealer,
    } = services;
    let scope = caller.scope;
    let node_count = request.node_count.unwrap_or(1);
    let pricing_class = request.pricing_class.unwrap_or(PricingClass::OnDemand);
    let mut fields = Fields::default();
    fields.range("node_count", node_count, 1, NODE_COUNT_MAX);
    let command = request.job.as_ref().map(|job| job.validate(&mut fields));
    if let Some(name) = &request.name {
        super::names::check(
            &mut fields,
            name,
            request.job.as_ref().and_then(|j| j.array_count),
        );
    }
    if let Some(duration) = request.duration_seconds {
        let min = if command.is_some() { 1 } else { DURATION_MIN };
        fields.range("duration_seconds", duration, min, DURATION_MAX);
    }
    if request.deadline.is_some_and(|deadline| deadline <= now) {
        fields.push("deadline", "must be in the future");
    }
    if request.job.is_some() && request.ssh_key_ids.is_some() {
        fields.push(
            "ssh_key_ids",
            "a job has no SSH server; only instances admit keys",
        );
    }
    let ports = request.ports.clone().unwrap_or_default();
    check_ports(&mut fields, &ports, &config.exposable_ports);
    let volumes = request.volumes.as_deref().unwrap_or_default();
    gantry_volumes::attach::check(&mut fields, volumes);
    if request
        .ssh_key_ids
        .as_ref()
        .is_some_and(|ids| ids.len() > gantry_access::ssh_keys::KEYS_PER_ORDER_MAX)
    {
        fields.push(
            "ssh_key_ids",
            format!(
                "at most {} keys",
                gantry_access::ssh_keys::KEYS_PER_ORDER_MAX
            ),
        );
    }
    match (request.reservation_id, request.pricing_class) {
        (Some(_), Some(class)) if class != PricingClass::Reserved => fields.push(
            "pricing_class",
            "an order in a reservation is paid by it: reserved, or leave it out",
        ),
        (None, Some(PricingClass::Reserved)) => fields.push(
            "reservation_id",
            "reserved capacity is used through a reservation: name one",
        ),
        _ => {}
    }
    let pricing_class = if request.reservation_id.is_some() {
        PricingClass::Reserved
    } else {
        pricing_class
    };
    let priority_class = match (pricing_class, request.priority_class) {
        (PricingClass::Spot, None | Some(PriorityClass::Preemptible)) => PriorityClass::Preemptible,
        (PricingClass::Spot, Some(_)) => {
            fields.push("priority_class", "spot capacity is always preemptible");
            PriorityClass::Preemptible
        }
        (_, class) => class.unwrap_or(PriorityClass::Standard),
    };
    fields.finish()?;
    if let Some(key) = &caller.idempotency_key
        && let Some(existing) = scope
            .select::<order::Entity>()
            .filter(order::Column::IdempotencyKey.eq(key))
            .one(db)
            .await?
    {
        return Ok(Created {
            order: existing,
            new: false,
        });
    }
    let instance = catalog.instance_type(&request.instance_type)?;
    if gantry_core::catalog::shares::GpuShape::of_type(instance).is_shared() && node_count > 1 {
        return Err(ApiError::unprocessable(
            "shared_gpu_gang",
            format!(
                "instance type {} shares one GPU; it runs on one node, not {node_count}",
                instance.name
            ),
        ));
    }
    let model = catalog
        .gpu_model(instance.gpu_model_id)
        .ok_or_else(|| ApiError::internal(anyhow::anyhow!("instance type without GPU model")))?;
    let region = request
        .region
        .as_deref()
        .map(|reference| catalog.region(reference))
        .transpose()?;
    gantry_access::tenancy::projects::require_in(db, scope, request.project_id).await?;
    let reservation = match request.reservation_id {
        Some(id) => Some(
            crate::reservations::for_order(
                db,
                scope,
                id,
                crate::reservations::OrderShape {
                    project_id: request.project_id,
                    gpu_model_id: model.id,
                    region_id: region.map(|r| r.id),
                    gpus_per_node: instance.gpus_per_node,
                    node_count,
                },
                now,
            )
            .await?,
        ),
        None => None,
    };
    let region = match &reservation {
        Some(r) => Some(catalog.region(&r.region_id.to_string())?),
        None => region,
    };
    let attached =
        gantry_volumes::attach::resolve(db, scope, volumes, region.map(|r| r.id), node_count)
            .await?;
    let region = match (region, attached.region_id) {
        (None, Some(id)) => Some(catalog.region(&id.to_string())?),
        (region, _) => region,
    };
    let job = request.job.as_ref();
    if let Some(job) = job {
        crate::jobs::arrays::check_dependencies(db, scope, &job.depends_on).await?;
    }
    let (image_field, image_name) = match (&request.image, job.and_then(|j| j.image.as_deref())) {
        (Some(image), _) => ("image", Some(image.as_str())),
        (None, Some(image)) => ("job.image", Some(image)),
        (None, None) => ("image", None),
    };
    let image = catalog.image_for_order(image_field, image_name)?;
    let (image_id, image_reference) = match &image {
        gantry_core::catalog::OrderImage::Catalog(image) => (Some(image.id), None),
        gantry_core::catalog::OrderImage::Reference(reference) => (None, Some(reference.clone())),
        gantry_core::catalog::OrderImage::Default => (None, None),
    };
    let ssh_key_ids = if job.is_some() {
        Vec::new()
    } else {
        gantry_access::ssh_keys::choose(
            db,
            &scope.principal,
            scope.org_id,
            request.ssh_key_ids.as_deref(),
        )
        .await?
    };
    admission::admit(
        db,
        catalog,
        &admission::Request {
            org_id: scope.org_id,
            project_id: request.project_id,
            instance,
            model,
            region,
            node: attached.node_id.zip(attached.pinned_by.as_deref()),
            node_count,
            pricing_class,
            priority_class,
            in_reservation: reservation.is_some(),
            now,
        },
    )
    .await?;
    let count = job.and_then(|j| j.array_count).unwrap_or(1);
    let kind = if job.is_some() {
        crate::jobs::KIND
    } else {
        "instance"
    };
    let array_id = job
        .filter(|j| j.array_count.is_some())
        .map(|_| Uuid::now_v7());
    let stored = match command {
        Some(mut command) => {
            crate::jobs::seal_secrets(&mut command, sealer, scope.org_id)
                .map_err(ApiError::internal)?;
            Some(serde_json::to_string(&command).map_err(ApiError::internal)?)
        }
        None => None,
    };
    let json = |ids: String| (ids != "[]").then_some(ids);
    let stored_keys = json(serde_json::to_string(&ssh_key_ids).unwrap_or_default());
    let stored_ports = json(serde_json::to_string(&ports).unwrap_or_default());
    let member = |index: i32| {
        let id = Uuid::now_v7();
        // An array's members share its name, given or drawn from its id.
        let name = match (&request.name, array_id) {
            (Some(name), Some(_)) => super::names::member(name, index),
            (None, Some(array)) => {
                super::names::member(&super::names::generated(&instance.name, array), index)
            }
            (Some(name), None) => name.clone(),
            (None, None) => super::names::generated(&instance.name, id),
        };
        order::ActiveModel {
            id: Set(id),
            name: Set(Some(name)),
            org_id: Set(scope.org_id),
            project_id: Set(request.project_id),
            created_by_kind: Set(caller.actor.kind.to_owned()),
            created_by: Set(caller.actor.id),
            kind: Set(kind.to_owned()),
            instance_type_id: Set(instance.id),
            gpu_model_id: Set(model.id),
            gpus_per_node: Set(instance.gpus_per_node),
            gpu_milli: Set(instance.gpu_milli),
            mig_profile: Set(instance.mig_profile.clone()),
            node_count: Set(node_count),
            region_id: Set(region.map(|r| r.id)),
            priority_class: Set(priority_class),
            pricing_class: Set(pricing_class),
            workload_class: Set(request.workload_class.unwrap_or(if job.is_some() {
                WorkloadClass::Batch
            } else {
                WorkloadClass::Dev
            })),
            duration_seconds: Set(request.duration_seconds),
            checkpointable: Set(request.checkpointable.unwrap_or(false)),
            deadline: Set(request.deadline),
            status: Set(OrderStatus::Queued),
            pending_reason: Set(Some("waiting for the scheduler".to_owned())),
            pending_details: Set(None),
            estimated_start: Set(None),
            estimate_confidence: Set(None),
            failure_reason: Set(None),
            access: Set(None),
            attempts: Set(0),
            // Only the first member answers a retried request.
            idempotency_key: Set(if index == 0 {
                caller.idempotency_key.clone()
            } else {
                None
            }),
            job: Set(stored.clone()),
            max_runtime_seconds: Set(job.and_then(|j| j.max_runtime_seconds)),
            retry_on_failure: Set(job.is_some_and(|j| j.retry.on_failure)),
            max_retries: Set(job.map_or(0, |j| j.retry.max_retries)),
            array_id: Set(array_id),
            array_index: Set(array_id.map(|_| index)),
            exit_code: Set(None),
            log_bytes: Set(0),
            ssh_key_ids: Set(stored_keys.clone()),
            ports: Set(stored_ports.clone()),
            image_id: Set(image_id),
            image_reference: Set(image_reference.clone()),
            reservation_id: Set(reservation.as_ref().map(|r| r.id)),
            node_id: Set(attached.node_id),
            started_at: Set(None),
            ended_at: Set(None),
            created_at: Set(now),
            updated_at: Set(now),
        }
    };
    let members: Vec<order::ActiveModel> = (0..count).map(member).collect();
    let members_name = members
        .first()
        .and_then(|m| m.name.clone().take().flatten());
    let ids: Vec<Uuid> = members.iter().filter_map(|m| m.id.clone().take()).collect();
    let edges = job.map_or_else(Vec::new, |job| {
        crate::jobs::arrays::dependency_edges(&ids, &job.depends_on)
    });
    let attachments = ids.iter().flat_map(|id| attached.rows(*id)).collect();
    let audit = audit::row(Change {
        org_id: Some(scope.org_id),
        action: "order.create",
        target_type: "order",
        target_id: ids.first().map(Uuid::to_string),
        details: serde_json::json!({
            "name": members_name,
            "instance_type": instance.name,
            "node_count": node_count,
            "pricing_class": pricing_class,
            "priority_class": priority_class,
            "kind": kind,
            "array_id": array_id,
            "array_count": array_id.map(|_| count),
            "image": image.describe(),
            "ssh_key_ids": ssh_key_ids,
            "ports": ports,
            "reservation_id": reservation.as_ref().map(|r| r.id),
            "volumes": attached.attachments,
        }),
        actor: caller.actor,
    });
    intake
        .submit(Prepared {
            org_id: scope.org_id,
            project_id: request.project_id,
            idempotency_key: caller.idempotency_key.clone(),
            members,
            edges,
            volumes: attachments,
            audit,
        })
        .await
}
