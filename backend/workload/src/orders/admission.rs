//! Admission: what an order must satisfy to be queued at all. An order that
//! can never run (no such GPU where it asks, bigger than any node or the
//! cluster, above the maximum quota, not offered at its pricing class) is
//! refused at once, as is a non-production order of an organization whose
//! hard-capped budget is spent; one that can run later is queued.

use sea_orm::{ConnectionTrait, EntityTrait};
use uuid::Uuid;

use chrono::{DateTime, Utc};

use gantry_core::catalog::Catalog;
use gantry_core::catalog::shares::{GpuShape, slices_of};
use gantry_core::error::{ApiError, ApiResult};
use gantry_entities::{billing_account, gpu_model, instance_type, region};
use gantry_types::classes::{PricingClass, PriorityClass};

/// What admission looks at in an order.
pub struct Request<'a> {
    pub org_id: Uuid,
    pub project_id: Option<Uuid>,
    pub instance: &'a instance_type::Model,
    pub model: &'a gpu_model::Model,
    pub region: Option<&'a region::Model>,
    /// The node its local volumes pin it to, with the first such volume's
    /// name.
    pub node: Option<(Uuid, &'a str)>,
    pub node_count: i32,
    pub pricing_class: PricingClass,
    pub priority_class: PriorityClass,
    /// It runs in a reservation, which was priced when confirmed.
    pub in_reservation: bool,
    pub now: DateTime<Utc>,
}

impl Request<'_> {
    fn gpus(&self) -> i64 {
        i64::from(self.instance.gpus_per_node) * i64::from(self.node_count)
    }

    fn where_(&self) -> String {
        if let Some((_, volume)) = self.node {
            return format!("where its volume {volume} lives");
        }
        self.region.map_or_else(
            || "in any region".to_owned(),
            |r| format!("in region {}", r.name),
        )
    }
}

/// Refuses an order that can never run; `Ok` means it may be queued.
pub async fn admit(
    db: &impl ConnectionTrait,
    catalog: &Catalog,
    request: &Request<'_>,
) -> ApiResult<()> {
    let account = billing_account::Entity::find_by_id(request.org_id)
        .one(db)
        .await?;
    gantry_pricing::spending::prepaid_admits(account.as_ref())?;
    gantry_pricing::spending::budget_admits(account.as_ref(), request.priority_class, request.now)?;
    if !request.in_reservation {
        offered(catalog, request)?;
    }
    within_max_quota(catalog, request)?;
    fits_somewhere(catalog, request)
}

fn offered(catalog: &Catalog, request: &Request<'_>) -> ApiResult<()> {
    let priced = catalog
        .prices
        .iter()
        .filter(|p| p.instance_type_id == request.instance.id)
        .filter(|p| p.pricing_class == request.pricing_class)
        .any(|p| match (p.region_id, request.region) {
            (None, _) => true,
            (Some(price_region), Some(region)) => price_region == region.id,
            (Some(_), None) => true,
        });
    if priced {
        Ok(())
    } else {
        Err(ApiError::unprocessable(
            "not_offered",
            format!(
                "instance type {} is not offered as {} {}",
                request.instance.name,
                request.pricing_class.as_str(),
                request.where_()
            ),
        ))
    }
}

fn within_max_quota(catalog: &Catalog, request: &Request<'_>) -> ApiResult<()> {
    let rows = catalog
        .quotas
        .iter()
        .filter(|q| q.org_id == request.org_id && q.gpu_model_id == request.model.id);
    let gpus = request.gpus();
    for row in rows {
        // A regional quota binds an order pinned to that region only; an
        // order that may go anywhere can still run elsewhere.
        let region_applies = row
            .region_id
            .is_none_or(|r| request.region.is_some_and(|region| region.id == r));
        let project_applies = row.project_id.is_none_or(|p| request.project_id == Some(p));
        let Some(max) = row.max_gpus else { continue };
        if region_applies && project_applies && gpus > i64::from(max) {
            let scope = match (row.project_id, row.region_id) {
                (Some(_), _) => "the project's",
                (None, Some(_)) => "the organization's regional",
                (None, None) => "the organization's",
            };
            return Err(ApiError::unprocessable(
                "quota_exceeded",
                format!(
                    "the order asks for {gpus} {} GPUs; {scope} maximum is {max}",
                    request.model.name
                ),
            ));
        }
    }
    Ok(())
}

fn fits_somewhere(catalog: &Catalog, request: &Request<'_>) -> ApiResult<()> {
    let instance = request.instance;
    let hosts = catalog
        .hosts
        .iter()
        .filter(|h| h.cpu_milli >= i64::from(instance.vcpus) * 1000)
        .filter(|h| h.memory_mib >= i64::from(instance.memory_gib) * 1024)
        .filter(|h| request.region.is_none_or(|r| r.id == h.region_id))
        .filter(|h| request.node.is_none_or(|(node, _)| node == h.node_id))
        .filter(|h| match GpuShape::of_type(instance) {
            GpuShape::Whole(gpus) => h.gpus.get(&request.model.id).copied().unwrap_or(0) >= gpus,
            GpuShape::Fraction(_) => h.gpus.get(&request.model.id).copied().unwrap_or(0) >= 1,
            GpuShape::Mig(profile) => h
                .mig
                .get(&request.model.id)
                .is_some_and(|sizes| sizes.iter().any(|s| Some(*s) == slices_of(profile))),
        })
        .count();
    let needed = usize::try_from(request.node_count).unwrap_or(usize::MAX);
    if hosts >= needed {
        return Ok(());
    }
    let gpus = match GpuShape::of_type(instance) {
        GpuShape::Whole(gpus) => format!("{gpus} {} GPUs", request.model.name),
        GpuShape::Fraction(_) => format!("a {} GPU to share", request.model.name),
        GpuShape::Mig(profile) => format!(
            "a {} GPU in MIG mode with {profile} instances",
            request.model.name
        ),
    };
    let shape = format!(
        "{gpus} with {} vCPU and {} GiB",
        instance.vcpus, instance.memory_gib
    );
    Err(ApiError::unprocessable(
        "never_fits",
        if hosts == 0 {
            format!("no node {} has {shape}", request.where_())
        } else {
            format!(
                "the order needs {needed} nodes with {shape}; the cluster has {hosts} {}",
                request.where_()
            )
        },
    ))
}
