//! The demo installation: on an empty database, a catalog with prices
//! (storage's too: the simulated nodes keep volumes), a
//! simulated cluster of two regions and 28 nodes (H100×8, H200×8, L40S×4,
//! three of them with their GPUs in MIG mode), GPU fractions and MIG
//! instances for sale beside whole GPUs, an operator and a tenant with a
//! quota, so that a first start shows queueing, gangs, shared GPUs and
//! fragmentation at once.

use chrono::Utc;
use sea_orm::{
    ActiveModelTrait, DatabaseConnection, DatabaseTransaction, EntityTrait, PaginatorTrait, Set,
};
use uuid::Uuid;

use gantry_core::auth::password::PasswordHasher;
use gantry_core::auth::principal::Actor;
use gantry_entities::{gpu_model, instance_type, price, quota, region, storage_price, user};
use gantry_inventory::nodes;
use gantry_types::classes::{PricingClass, VolumeKind};

pub const OPERATOR_EMAIL: &str = "operator@demo.gantry.dev";
pub const OPERATOR_PASSWORD: &str = "gantry operator demo";
pub const TENANT_EMAIL: &str = "tenant@demo.gantry.dev";
pub const TENANT_PASSWORD: &str = "gantry tenant demo";

struct Model {
    name: &'static str,
    memory_gib: i32,
    interconnect: &'static str,
    mig: bool,
    /// On-demand micro-units per GPU-hour.
    gpu_hour: i64,
    /// GPUs per node, vCPU and GiB of memory of a whole node.
    node: (i32, i32, i32),
}

const MODELS: [Model; 3] = [
    Model {
        name: "H100-SXM-80GB",
        memory_gib: 80,
        interconnect: "nvlink",
        mig: true,
        gpu_hour: 2_490_000,
        node: (8, 192, 2048),
    },
    Model {
        name: "H200-SXM-141GB",
        memory_gib: 141,
        interconnect: "nvlink",
        mig: true,
        gpu_hour: 3_590_000,
        node: (8, 192, 2048),
    },
    Model {
        name: "L40S-48GB",
        memory_gib: 48,
        interconnect: "pcie",
        mig: false,
        gpu_hour: 990_000,
        node: (4, 64, 512),
    },
];

/// Shared-GPU types: a model (index into `MODELS`), a name suffix, and a
/// fraction of a GPU or a MIG profile. Priced at their share of the whole
/// GPU's hour.
const SHARED: [(usize, &str, Option<i32>, Option<&str>); 7] = [
    (0, "quarter", Some(250), None),
    (0, "half", Some(500), None),
    (0, "mig-1g10gb", None, Some("1g.10gb")),
    (0, "mig-3g40gb", None, Some("3g.40gb")),
    (1, "mig-1g18gb", None, Some("1g.18gb")),
    (2, "quarter", Some(250), None),
    (2, "half", Some(500), None),
];

/// Nodes whose GPUs run in MIG mode: region, model index, node number,
/// and each GPU's instances (profile, count).
const MIG_NODES: [(&str, usize, usize, &str, usize); 3] = [
    ("us-east", 0, 8, "1g.10gb", 7),
    ("eu-central", 0, 6, "3g.40gb", 2),
    ("us-east", 1, 4, "1g.18gb", 7),
];

struct Region {
    name: &'static str,
    display_name: &'static str,
    time_zone: &'static str,
    tags: &'static [&'static str],
    /// Nodes per model, in the order of `MODELS`.
    nodes: [usize; 3],
}

const REGIONS: [Region; 2] = [
    Region {
        name: "us-east",
        display_name: "US East (Virginia)",
        time_zone: "America/New_York",
        tags: &[],
        nodes: [8, 4, 4],
    },
    Region {
        name: "eu-central",
        display_name: "EU Central (Frankfurt)",
        time_zone: "Europe/Berlin",
        tags: &["eu-gdpr"],
        nodes: [6, 2, 4],
    },
];

/// Pricing classes with their share of the on-demand price, in thousandths.
const CLASSES: [(PricingClass, i64); 3] = [
    (PricingClass::OnDemand, 1000),
    (PricingClass::Spot, 400),
    (PricingClass::Reserved, 700),
];

/// `H100-SXM-80GB` is `h100` in instance type and node names.
fn short(model: &str) -> String {
    model.split('-').next().unwrap_or(model).to_lowercase()
}

/// Storage prices per GiB-month, as GPU clouds sell disk beside GPUs.
const STORAGE_PRICES: [(VolumeKind, i64); 2] =
    [(VolumeKind::Local, 100_000), (VolumeKind::Shared, 70_000)];

/// An instance type's prices everywhere: `on_demand` per hour, the other
/// classes at their share of it.
async fn prices(
    txn: &DatabaseTransaction,
    instance_type_id: Uuid,
    on_demand: i64,
    classes: &[(PricingClass, i64)],
    now: chrono::DateTime<Utc>,
) -> Result<(), sea_orm::DbErr> {
    for (class, permille) in classes {
        price::ActiveModel {
            id: Set(Uuid::now_v7()),
            instance_type_id: Set(instance_type_id),
            region_id: Set(None),
            pricing_class: Set(*class),
            hourly_micros: Set(on_demand * permille / 1000),
            effective_from: Set(now),
            created_at: Set(now),
        }
        .insert(txn)
        .await?;
    }
    Ok(())
}

/// Seeds the demo when the database has no catalog yet; `false` when it
/// already had one.
pub async fn seed(db: &DatabaseConnection, passwords: &PasswordHasher) -> anyhow::Result<bool> {
    if region::Entity::find().count(db).await? > 0 {
        return Ok(false);
    }
    let operator_hash = passwords.hash(OPERATOR_PASSWORD.to_owned()).await?;
    let tenant_hash = passwords.hash(TENANT_PASSWORD.to_owned()).await?;
    let now = Utc::now();
    let actor = Actor {
        kind: "system",
        id: None,
        request_id: String::new(),
        source_address: "local".into(),
    };
    let txn = gantry_core::db::write(db).await?;
    let mut regions = Vec::new();
    for spec in &REGIONS {
        regions.push(
            region::ActiveModel {
                id: Set(Uuid::now_v7()),
                name: Set(spec.name.to_owned()),
                display_name: Set(spec.display_name.to_owned()),
                time_zone: Set(spec.time_zone.to_owned()),
                compliance_tags: Set(serde_json::to_string(spec.tags)?),
                off_peak_start_hour: Set(Some(22)),
                off_peak_end_hour: Set(Some(6)),
                off_peak_multiplier_permille: Set(Some(700)),
                created_at: Set(now),
                updated_at: Set(now),
            }
            .insert(&txn)
            .await?,
        );
    }
    let mut whole_nodes = Vec::new();
    for model in &MODELS {
        let row = gpu_model::ActiveModel {
            id: Set(Uuid::now_v7()),
            name: Set(model.name.to_owned()),
            vendor: Set("NVIDIA".to_owned()),
            memory_gib: Set(model.memory_gib),
            interconnect: Set(model.interconnect.to_owned()),
            mig_capable: Set(model.mig),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&txn)
        .await?;
        let (gpus, vcpus, memory) = model.node;
        let short = short(model.name);
        // Shapes of 1, 2, 4 and 8 GPUs (up to a whole node), with vCPU and
        // memory in proportion.
        let mut count = 1;
        while count <= gpus {
            let instance = instance_type::ActiveModel {
                id: Set(Uuid::now_v7()),
                name: Set(format!("{short}x{count}")),
                gpu_model_id: Set(row.id),
                gpus_per_node: Set(count),
                vcpus: Set(vcpus * count / gpus),
                memory_gib: Set(memory * count / gpus),
                disk_gib: Set(1000 * count),
                gpu_milli: Set(None),
                mig_profile: Set(None),
                created_at: Set(now),
                updated_at: Set(now),
            }
            .insert(&txn)
            .await?;
            let on_demand = model.gpu_hour * i64::from(count);
            prices(&txn, instance.id, on_demand, &CLASSES, now).await?;
            if count == gpus {
                whole_nodes.push((instance, row.clone()));
            }
            count *= 2;
        }
    }
    for (model_index, suffix, gpu_milli, mig_profile) in SHARED {
        let (_, model) = &whole_nodes[model_index];
        let spec = &MODELS[model_index];
        let shape = gantry_core::catalog::shares::GpuShape::new(1, gpu_milli, mig_profile);
        let milli = shape.milli();
        let (gpus, vcpus, memory) = spec.node;
        let short = short(spec.name);
        let instance = instance_type::ActiveModel {
            id: Set(Uuid::now_v7()),
            name: Set(format!("{short}-{suffix}")),
            gpu_model_id: Set(model.id),
            gpus_per_node: Set(1),
            vcpus: Set((vcpus * milli / gpus / 1000).max(1)),
            memory_gib: Set((memory * milli / gpus / 1000).max(1)),
            disk_gib: Set((1000 * milli / 1000).max(1)),
            gpu_milli: Set(gpu_milli),
            mig_profile: Set(mig_profile.map(str::to_owned)),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&txn)
        .await?;
        // Reservations hold whole GPUs: shares have no reserved price.
        let on_demand = spec.gpu_hour * i64::from(milli) / 1000;
        prices(&txn, instance.id, on_demand, &CLASSES[..2], now).await?;
    }
    // Storage per GiB-month: local disks, and the shared file systems
    // operators declare per region.
    for (kind, micros) in STORAGE_PRICES {
        storage_price::ActiveModel {
            id: Set(Uuid::now_v7()),
            region_id: Set(None),
            kind: Set(kind),
            gib_month_micros: Set(micros),
            effective_from: Set(now),
            created_at: Set(now),
        }
        .insert(&txn)
        .await?;
    }
    for (spec, region) in REGIONS.iter().zip(&regions) {
        let name = spec.name;
        for ((instance, model), count) in whole_nodes.iter().zip(&spec.nodes) {
            for index in 0..*count {
                let mut spec = nodes::simulated_spec(
                    format!("{name}-{}-{:02}", short(&model.name), index + 1),
                    region.id,
                    format!("{name}-rack-{}", index / 4 + 1),
                    Vec::new(),
                    instance,
                    model,
                );
                let model_index = MODELS.iter().position(|m| m.name == model.name);
                if let Some((_, _, _, profile, count)) = MIG_NODES
                    .iter()
                    .find(|m| m.0 == name && Some(m.1) == model_index && m.2 == index + 1)
                {
                    for gpu in &mut spec.gpus {
                        nodes::simulate_mig(gpu, profile, *count);
                    }
                }
                nodes::insert(&txn, spec).await?;
            }
        }
    }
    user::ActiveModel {
        id: Set(Uuid::now_v7()),
        email: Set(OPERATOR_EMAIL.to_owned()),
        name: Set("Demo Operator".to_owned()),
        password_hash: Set(operator_hash),
        is_operator: Set(true),
        locale: Set(None),
        time_zone: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(&txn)
    .await?;
    let tenant = user::ActiveModel {
        id: Set(Uuid::now_v7()),
        email: Set(TENANT_EMAIL.to_owned()),
        name: Set("Demo Tenant".to_owned()),
        password_hash: Set(tenant_hash),
        is_operator: Set(false),
        locale: Set(None),
        time_zone: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(&txn)
    .await?;
    let org =
        gantry_access::tenancy::orgs::create_in(&txn, &actor, tenant.id, "Demo Lab".to_owned())
            .await
            .map_err(|e| anyhow::anyhow!("creating the demo organization: {e:?}"))?;
    for (_, model) in &whole_nodes {
        quota::ActiveModel {
            id: Set(Uuid::now_v7()),
            org_id: Set(org.id),
            project_id: Set(None),
            gpu_model_id: Set(model.id),
            region_id: Set(None),
            guaranteed_gpus: Set(16),
            max_gpus: Set(Some(64)),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&txn)
        .await?;
    }
    txn.commit().await?;
    Ok(true)
}
