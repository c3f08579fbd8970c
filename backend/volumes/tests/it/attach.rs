//! What an order's volumes come to: its organization's own only, in one
//! region, local ones on one node.

use chrono::Utc;
use reqwest::StatusCode;

use gantry_test_support::{Engine, TestDatabase, on_both_engines};
use gantry_types::classes::{VolumeKind, VolumeState};
use gantry_volumes::attach::{VolumeAttachment, resolve};

use crate::Made;

on_both_engines!(
    attachments_resolve_within_the_organization,
    an_order_attaching_a_volume_deleted_since_it_was_checked_is_refused,
);

fn at(volume_id: uuid::Uuid, path: &str) -> VolumeAttachment {
    VolumeAttachment {
        volume_id,
        mount_path: path.to_owned(),
        read_only: false,
    }
}

async fn attachments_resolve_within_the_organization(engine: Engine) {
    let database = TestDatabase::create(engine).await;
    let db = database.migrated().await;
    let acme = crate::organization(&db, "acme").await;
    let rival = crate::organization(&db, "rival").await;
    let (r1, r2) = (
        crate::region(&db, "r1").await,
        crate::region(&db, "r2").await,
    );
    let (n1, n2) = (
        crate::node(&db, r1, "n1", 100).await.id,
        crate::node(&db, r1, "n2", 100).await.id,
    );
    let now = Utc::now();
    let local = |node, state| Made {
        kind: VolumeKind::Local,
        state,
        size_gib: 1,
        provisioned_gib: 1,
        node_id: Some(node),
        region_id: r1,
    };
    let data = crate::volume(&db, &acme, "data", local(n1, VolumeState::Available), now).await;
    let other = crate::volume(&db, &acme, "other", local(n2, VolumeState::Available), now).await;
    let going = crate::volume(&db, &acme, "going", local(n1, VolumeState::Deleting), now).await;
    let theirs = crate::volume(
        &db,
        &rival,
        "theirs",
        local(n1, VolumeState::Available),
        now,
    )
    .await;

    let attached = resolve(&db, &acme, &[at(data.id, "/data")], None, 1)
        .await
        .expect("resolved");
    assert_eq!(attached.node_id, Some(n1), "a local volume pins its node");
    assert_eq!(attached.region_id, Some(r1), "and its region");

    let refused = |result: Result<_, gantry_core::error::ApiError>| {
        let error = result.expect_err("refused");
        (error.status(), error.code())
    };
    assert_eq!(
        refused(resolve(&db, &acme, &[at(theirs.id, "/data")], None, 1).await),
        (StatusCode::NOT_FOUND, "volume_not_found"),
        "another organization's volume is not found"
    );
    assert_eq!(
        refused(resolve(&db, &acme, &[at(going.id, "/data")], None, 1).await),
        (StatusCode::CONFLICT, "volume_unavailable")
    );
    assert_eq!(
        refused(
            resolve(
                &db,
                &acme,
                &[at(data.id, "/a"), at(other.id, "/b")],
                None,
                1
            )
            .await
        ),
        (StatusCode::UNPROCESSABLE_ENTITY, "validation_failed"),
        "local volumes on two nodes"
    );
    assert_eq!(
        refused(resolve(&db, &acme, &[at(data.id, "/data")], None, 2).await),
        (StatusCode::UNPROCESSABLE_ENTITY, "validation_failed"),
        "a local volume on an order of two nodes"
    );
    assert_eq!(
        refused(resolve(&db, &acme, &[at(data.id, "/data")], Some(r2), 1).await),
        (StatusCode::UNPROCESSABLE_ENTITY, "validation_failed"),
        "a volume of another region"
    );
}

/// The intake reads an order's volumes again, locked, in the transaction
/// that stores it: a volume deleted between the order's checks and its
/// insert refuses the order, and nothing is written.
async fn an_order_attaching_a_volume_deleted_since_it_was_checked_is_refused(engine: Engine) {
    use gantry_core::handles::intake::{Intake, Prepared};
    use gantry_entities::{audit_log, order, order_volume};
    use sea_orm::{EntityTrait, PaginatorTrait, Set};

    let database = TestDatabase::create(engine).await;
    let db = database.migrated().await;
    let acme = crate::organization(&db, "acme").await;
    let r1 = crate::region(&db, "r1").await;
    let going = crate::volume(
        &db,
        &acme,
        "going",
        Made {
            kind: VolumeKind::Shared,
            state: VolumeState::Deleting,
            size_gib: 1,
            provisioned_gib: 1,
            node_id: None,
            region_id: r1,
        },
        Utc::now(),
    )
    .await;
    let order_id = uuid::Uuid::now_v7();
    let intake = Intake::start(db.clone(), 100);
    let refused = intake
        .submit(Prepared {
            org_id: acme.org_id,
            project_id: None,
            idempotency_key: None,
            members: vec![order::ActiveModel {
                id: Set(order_id),
                ..Default::default()
            }],
            edges: Vec::new(),
            volumes: vec![order_volume::ActiveModel {
                order_id: Set(order_id),
                volume_id: Set(going.id),
                mount_path: Set("/data".to_owned()),
                read_only: Set(false),
            }],
            audit: audit_log::ActiveModel::default(),
        })
        .await;
    let error = refused.err().expect("refused");
    assert_eq!(
        (error.status(), error.code()),
        (StatusCode::CONFLICT, "volume_unavailable")
    );
    assert_eq!(order::Entity::find().count(&db).await.expect("count"), 0);
}
