//! What nodes are told of their volumes, and what their reports change.

use chrono::{Duration, Utc};
use sea_orm::EntityTrait;

use gantry_entities::{node, volume};
use gantry_test_support::{Engine, TestDatabase, on_both_engines};
use gantry_types::classes::{VolumeKind, VolumeState};
use gantry_volumes::nodes::{VolumeAction, VolumeReport, apply, of_node};

use crate::{GIB, Made};

on_both_engines!(reports_move_volumes_along_their_life);

async fn reports_move_volumes_along_their_life(engine: Engine) {
    let database = TestDatabase::create(engine).await;
    let db = database.migrated().await;
    let scope = crate::organization(&db, "acme").await;
    let region = crate::region(&db, "r1").await;
    let node_id = crate::node(&db, region, "n1", 100).await;
    let made = |state, size_gib, provisioned_gib| Made {
        kind: VolumeKind::Local,
        state,
        size_gib,
        provisioned_gib,
        node_id: Some(node_id),
        region_id: region,
    };
    let before = Utc::now() - Duration::minutes(5);
    let fresh = crate::volume(
        &db,
        &scope,
        "fresh",
        made(VolumeState::Creating, 2, 0),
        before,
    )
    .await;
    let doomed = crate::volume(
        &db,
        &scope,
        "doomed",
        made(VolumeState::Deleting, 1, 1),
        before,
    )
    .await;
    let unmakeable = crate::volume(
        &db,
        &scope,
        "too-big",
        made(VolumeState::Creating, 90, 0),
        before,
    )
    .await;

    let told = of_node(&db, node_id).await.expect("listed");
    let mut actions: Vec<(uuid::Uuid, VolumeAction, i64)> = told
        .iter()
        .map(|v| (v.volume_id, v.action, v.size_gib))
        .collect();
    actions.sort_by_key(|(id, ..)| *id);
    let mut expected = vec![
        (fresh.id, VolumeAction::Keep, 2),
        (doomed.id, VolumeAction::Erase, 1),
        (unmakeable.id, VolumeAction::Keep, 90),
    ];
    expected.sort_by_key(|(id, ..)| *id);
    assert_eq!(actions, expected);

    let now = Utc::now();
    let reports = [
        VolumeReport {
            volume_id: fresh.id,
            size_gib: 2,
            used_bytes: 4096,
            error: None,
        },
        VolumeReport {
            volume_id: unmakeable.id,
            size_gib: 0,
            used_bytes: 0,
            error: Some("this node cannot make a 90.0 GiB volume".into()),
        },
    ];
    apply(&db, node_id, &reports, Some(7 * GIB), now)
        .await
        .expect("applied");

    let read = |id| {
        let db = db.clone();
        async move {
            volume::Entity::find_by_id(id)
                .one(&db)
                .await
                .expect("read")
                .expect("row")
        }
    };
    let fresh = read(fresh.id).await;
    assert_eq!(fresh.state, VolumeState::Available);
    assert_eq!((fresh.provisioned_gib, fresh.used_bytes), (2, Some(4096)));
    let unmakeable = read(unmakeable.id).await;
    assert_eq!(unmakeable.state, VolumeState::Failed);
    assert_eq!(
        unmakeable.state_reason.as_deref(),
        Some("this node cannot make a 90.0 GiB volume")
    );
    // Asked to erase it and no longer reporting it: the node erased it.
    let doomed = read(doomed.id).await;
    assert_eq!(doomed.state, VolumeState::Deleted);
    assert!(doomed.deleted_at.is_some());
    let room = node::Entity::find_by_id(node_id)
        .one(&db)
        .await
        .expect("node")
        .expect("row")
        .volume_free_bytes;
    assert_eq!(room, Some(7 * GIB));

    // Only the volume that is made is left to keep; the same report again
    // writes nothing.
    let told = of_node(&db, node_id).await.expect("listed");
    assert_eq!(told.len(), 1);
    assert_eq!(told[0].volume_id, fresh.id);
    apply(
        &db,
        node_id,
        &reports[..1],
        Some(7 * GIB),
        now + Duration::seconds(5),
    )
    .await
    .expect("applied again");
    assert_eq!(read(fresh.id).await.updated_at, fresh.updated_at);

    // A grow reaches the row when the node says it has made it.
    let grown = VolumeReport {
        volume_id: fresh.id,
        size_gib: 5,
        used_bytes: 8192,
        error: None,
    };
    apply(
        &db,
        node_id,
        &[grown],
        Some(4 * GIB),
        now + Duration::seconds(10),
    )
    .await
    .expect("applied the grow");
    let fresh = read(fresh.id).await;
    assert_eq!((fresh.provisioned_gib, fresh.used_bytes), (5, Some(8192)));
}
