//! The volumes crate's database tests, each on a fresh SQLite file and a
//! fresh PostgreSQL database, without a server.

mod attach;
mod nodes;

use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, DatabaseConnection, Set};
use uuid::Uuid;

use gantry_access::tenancy::access::OrgScope;
use gantry_core::auth::principal::Principal;
use gantry_entities::{node, organization, region, volume};
use gantry_types::classes::{DriverKind, NodeState, VolumeKind, VolumeState};
use gantry_types::roles::OrgRole;

pub const GIB: i64 = 1024 * 1024 * 1024;

/// An organization as its owner acts in it.
pub async fn organization(db: &DatabaseConnection, name: &str) -> OrgScope {
    let now = Utc::now();
    let org = organization::ActiveModel {
        id: Set(Uuid::now_v7()),
        name: Set(name.to_owned()),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(db)
    .await
    .expect("organization");
    OrgScope {
        org_id: org.id,
        role: OrgRole::Owner,
        principal: Principal::User {
            user_id: Uuid::now_v7(),
        },
        operator_view: false,
    }
}

pub async fn region(db: &DatabaseConnection, name: &str) -> Uuid {
    let now = Utc::now();
    region::ActiveModel {
        id: Set(Uuid::now_v7()),
        name: Set(name.to_owned()),
        display_name: Set(name.to_owned()),
        time_zone: Set("UTC".to_owned()),
        compliance_tags: Set("[]".to_owned()),
        off_peak_start_hour: Set(None),
        off_peak_end_hour: Set(None),
        off_peak_multiplier_permille: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(db)
    .await
    .expect("region")
    .id
}

/// A ready agent node of `region` with `free_gib` of room for volumes.
pub async fn node(
    db: &DatabaseConnection,
    region_id: Uuid,
    name: &str,
    free_gib: i64,
) -> node::Model {
    let now = Utc::now();
    node::ActiveModel {
        id: Set(Uuid::now_v7()),
        name: Set(name.to_owned()),
        region_id: Set(region_id),
        rack: Set(String::new()),
        instance_type_id: Set(None),
        cpu_milli: Set(32_000),
        memory_mib: Set(262_144),
        labels: Set("[]".to_owned()),
        state: Set(NodeState::Ready),
        state_reason: Set(None),
        driver: Set(DriverKind::Agent),
        credential_hash: Set(None),
        last_heartbeat_at: Set(Some(now)),
        runtime: Set(Some("sandbox".to_owned())),
        credential_next_hash: Set(None),
        credential_rotate: Set(false),
        fabric_address: Set(None),
        volume_free_bytes: Set(Some(free_gib * GIB)),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(db)
    .await
    .expect("node")
}

pub struct Made {
    pub kind: VolumeKind,
    pub state: VolumeState,
    pub size_gib: i64,
    pub provisioned_gib: i64,
    pub node_id: Option<Uuid>,
    pub region_id: Uuid,
}

pub async fn volume(
    db: &DatabaseConnection,
    scope: &OrgScope,
    name: &str,
    made: Made,
    now: DateTime<Utc>,
) -> volume::Model {
    volume::ActiveModel {
        id: Set(Uuid::now_v7()),
        org_id: Set(scope.org_id),
        project_id: Set(None),
        name: Set(name.to_owned()),
        region_id: Set(made.region_id),
        kind: Set(made.kind),
        size_gib: Set(made.size_gib),
        state: Set(made.state),
        state_reason: Set(None),
        node_id: Set(made.node_id),
        used_bytes: Set(None),
        provisioned_gib: Set(made.provisioned_gib),
        created_at: Set(now),
        updated_at: Set(now),
        deleted_at: Set(None),
    }
    .insert(db)
    .await
    .expect("volume")
}
