//! The catalog as this replica holds it in memory: GPU models, instance
//! types, regions, prices, images, quotas and the size of every node, which
//! admitting and showing an order read. Each use reads one number, the
//! catalog version every change to those tables raises in its own
//! transaction (on any replica), and reads the tables again only when it
//! moved, so an order costs one small read instead of a dozen.

pub mod image_policy;
pub mod shares;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use sea_orm::{ConnectionTrait, DbErr, EntityTrait, QuerySelect};
use uuid::Uuid;

use crate::db::by_id;
use crate::error::{ApiError, ApiResult};
use gantry_entities::{
    catalog_version, gpu, gpu_model, image, instance_type, node, price, quota, region,
};

/// One node's size, as admission weighs it.
#[derive(Debug)]
pub struct Host {
    pub node_id: Uuid,
    pub region_id: Uuid,
    pub cpu_milli: i64,
    pub memory_mib: i64,
    /// Whole GPUs (not in MIG mode) per GPU model.
    pub gpus: HashMap<Uuid, i32>,
    /// The instance size, in slices, of each GPU in MIG mode per model.
    pub mig: HashMap<Uuid, Vec<u8>>,
}

/// The catalog at one version.
#[derive(Debug, Default)]
pub struct Catalog {
    version: i64,
    gpu_models: HashMap<Uuid, gpu_model::Model>,
    instance_types: HashMap<Uuid, instance_type::Model>,
    regions: HashMap<Uuid, region::Model>,
    images: HashMap<Uuid, image::Model>,
    /// What the image policy allows beside the catalog's images.
    allowed_image_prefixes: Vec<String>,
    pub prices: Vec<price::Model>,
    pub quotas: Vec<quota::Model>,
    pub hosts: Vec<Host>,
}

impl Catalog {
    async fn read(db: &impl ConnectionTrait, version: i64) -> Result<Self, DbErr> {
        let mut hosts: HashMap<Uuid, Host> = node::Entity::find()
            .select_only()
            .columns([
                node::Column::Id,
                node::Column::RegionId,
                node::Column::CpuMilli,
                node::Column::MemoryMib,
            ])
            .into_tuple::<(Uuid, Uuid, i64, i64)>()
            .all(db)
            .await?
            .into_iter()
            .map(|(id, region_id, cpu_milli, memory_mib)| {
                let host = Host {
                    node_id: id,
                    region_id,
                    cpu_milli,
                    memory_mib,
                    gpus: HashMap::new(),
                    mig: HashMap::new(),
                };
                (id, host)
            })
            .collect();
        let gpus: Vec<(Uuid, Uuid, bool, Option<String>)> = gpu::Entity::find()
            .select_only()
            .columns([
                gpu::Column::NodeId,
                gpu::Column::GpuModelId,
                gpu::Column::MigEnabled,
                gpu::Column::MigDevices,
            ])
            .into_tuple()
            .all(db)
            .await?;
        for (node_id, model_id, mig_enabled, devices) in gpus {
            let Some(host) = hosts.get_mut(&node_id) else {
                continue;
            };
            if !mig_enabled {
                *host.gpus.entry(model_id).or_default() += 1;
            } else if let Some((size, _)) =
                shares::mig_layout(&shares::mig_devices(devices.as_deref()))
            {
                host.mig.entry(model_id).or_default().push(size);
            }
        }
        Ok(Self {
            version,
            gpu_models: by_id(gpu_model::Entity::find().all(db).await?, |m| m.id),
            instance_types: by_id(instance_type::Entity::find().all(db).await?, |t| t.id),
            regions: by_id(region::Entity::find().all(db).await?, |r| r.id),
            images: by_id(image::Entity::find().all(db).await?, |i| i.id),
            allowed_image_prefixes: image_policy::allowed(db).await?,
            prices: price::Entity::find().all(db).await?,
            quotas: quota::Entity::find().all(db).await?,
            hosts: hosts.into_values().collect(),
        })
    }

    /// The instance type a request body names by id or name.
    pub fn instance_type(&self, reference: &str) -> ApiResult<&instance_type::Model> {
        by_reference(&self.instance_types, reference, |t| &t.name, |t| t.id).ok_or_else(|| {
            ApiError::unprocessable(
                "unknown_instance_type",
                format!("no instance type {reference:?}"),
            )
        })
    }

    /// The region a request body names by id or name.
    pub fn region(&self, reference: &str) -> ApiResult<&region::Model> {
        by_reference(&self.regions, reference, |r| &r.name, |r| r.id).ok_or_else(|| {
            ApiError::unprocessable("unknown_region", format!("no region {reference:?}"))
        })
    }

    /// The GPU model a request names by id or name.
    pub fn gpu_model_named(&self, reference: &str) -> ApiResult<&gpu_model::Model> {
        by_reference(&self.gpu_models, reference, |m| &m.name, |m| m.id).ok_or_else(|| {
            ApiError::unprocessable("unknown_gpu_model", format!("no GPU model {reference:?}"))
        })
    }

    pub fn gpu_model(&self, id: Uuid) -> Option<&gpu_model::Model> {
        self.gpu_models.get(&id)
    }

    /// The image an order names in `field` (a catalog image's name, or a
    /// reference the image policy allows), or the default image when it
    /// names none (which may be no image at all).
    pub fn image_for_order(&self, field: &str, name: Option<&str>) -> ApiResult<OrderImage<'_>> {
        let Some(name) = name else {
            return Ok(self
                .images
                .values()
                .find(|i| i.is_default)
                .map_or(OrderImage::Default, OrderImage::Catalog));
        };
        if let Some(image) = self.images.values().find(|i| i.name == name) {
            return Ok(OrderImage::Catalog(image));
        }
        if !name.contains('/') {
            return Err(ApiError::unprocessable(
                "unknown_image",
                format!(
                    "the image catalog has no image {name:?}; name a catalog image or a whole \
                     reference (registry.example/team/train:v3)"
                ),
            ));
        }
        image_policy::check(field, name, &self.allowed_image_prefixes)
            .map(|r| OrderImage::Reference(r.whole()))
    }

    pub fn instance_type_name(&self, id: Uuid) -> Option<&str> {
        self.instance_types.get(&id).map(|t| t.name.as_str())
    }

    pub fn gpu_model_name(&self, id: Uuid) -> Option<&str> {
        self.gpu_models.get(&id).map(|m| m.name.as_str())
    }

    pub fn region_name(&self, id: Uuid) -> Option<&str> {
        self.regions.get(&id).map(|r| r.name.as_str())
    }

    pub fn image_name(&self, id: Uuid) -> Option<&str> {
        self.images.get(&id).map(|i| i.name.as_str())
    }
}

/// The image an order runs.
#[derive(Debug)]
pub enum OrderImage<'a> {
    /// None named and no catalog default: the node's own default.
    Default,
    Catalog(&'a image::Model),
    /// A reference the policy allows, whole.
    Reference(String),
}

impl OrderImage<'_> {
    /// What the order says it runs.
    pub fn describe(&self) -> Option<String> {
        match self {
            Self::Default => None,
            Self::Catalog(image) => Some(image.name.clone()),
            Self::Reference(reference) => Some(reference.clone()),
        }
    }
}

/// A row by id, or by its unique name when `reference` is not a UUID.
fn by_reference<'a, T>(
    rows: &'a HashMap<Uuid, T>,
    reference: &str,
    name: impl Fn(&T) -> &String,
    id: impl Fn(&T) -> Uuid,
) -> Option<&'a T> {
    match Uuid::try_parse(reference) {
        Ok(wanted) => rows.get(&wanted).filter(|row| id(row) == wanted),
        Err(_) => rows.values().find(|row| name(row) == reference),
    }
}

/// The replica's copy, replaced whole when the version moves.
#[derive(Default)]
pub struct CatalogCache {
    held: RwLock<Arc<Catalog>>,
    /// Lets one caller read the tables while the others wait for its copy.
    reading: tokio::sync::Mutex<()>,
}

impl CatalogCache {
    /// The catalog as of now.
    pub async fn current(&self, db: &impl ConnectionTrait) -> Result<Arc<Catalog>, DbErr> {
        let version = Self::version(db).await?;
        if let Some(held) = self.held_since(version) {
            return Ok(held);
        }
        let _reading = self.reading.lock().await;
        if let Some(held) = self.held_since(version) {
            return Ok(held);
        }
        // Read the number again: a change committed while this caller
        // waited is then in what it reads, or raises the number after it.
        let version = Self::version(db).await?;
        let fresh = Arc::new(Catalog::read(db, version).await?);
        *self
            .held
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::clone(&fresh);
        Ok(fresh)
    }

    fn held_since(&self, version: i64) -> Option<Arc<Catalog>> {
        let held = self
            .held
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        (held.version >= version).then(|| Arc::clone(&held))
    }

    async fn version(db: &impl ConnectionTrait) -> Result<i64, DbErr> {
        Ok(catalog_version::Entity::find()
            .one(db)
            .await?
            .map_or(0, |row| row.version))
    }
}
