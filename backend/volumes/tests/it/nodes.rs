//! What nodes are told of their volumes, and what their reports change.

use chrono::{Duration, Utc};
use sea_orm::EntityTrait;

use gantry_entities::{node, volume};
use gantry_test_support::{Engine, TestDatabase, on_both_engines};
use gantry_types::classes::{VolumeKind, VolumeState};
use gantry_volumes::nodes::{VolumeAction, VolumeReport, apply, of_node};

use crate::{GIB, Made};

on_both_engines!(
    reports_move_volumes_along_their_life,
    shared_volumes_are_tended_by_one_node_and_erased_only_when_it_says,
);

async fn reports_move_volumes_along_their_life(engine: Engine) {
    let database = TestDatabase::create(engine).await;
    let db = database.migrated().await;
    let scope = crate::organization(&db, "acme").await;
    let region = crate::region(&db, "r1").await;
    let n1 = crate::node(&db, region, "n1", 100).await;
    let node_id = n1.id;
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

    let told = of_node(&db, &n1, &[]).await.expect("listed");
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
            erased: false,
        },
        VolumeReport {
            volume_id: unmakeable.id,
            size_gib: 0,
            used_bytes: 0,
            error: Some("this node cannot make a 90.0 GiB volume".into()),
            erased: false,
        },
    ];
    apply(&db, &n1, &reports, Some(7 * GIB), now)
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
    let told = of_node(&db, &n1, &[]).await.expect("listed");
    assert_eq!(told.len(), 1);
    assert_eq!(told[0].volume_id, fresh.id);
    apply(
        &db,
        &n1,
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
        erased: false,
    };
    apply(
        &db,
        &n1,
        &[grown],
        Some(4 * GIB),
        now + Duration::seconds(10),
    )
    .await
    .expect("applied the grow");
    let fresh = read(fresh.id).await;
    assert_eq!((fresh.provisioned_gib, fresh.used_bytes), (5, Some(8192)));
}

/// A region's shared volumes go to the one node that tends them, and to
/// any other node only where its orders attach them; only the tending
/// node's reports move them, a node's failure to make one leaves it to be
/// made, one not mentioned is left be, and a shared volume is gone only
/// when the node says it erased it. Files past the size are told on the
/// volume.
async fn shared_volumes_are_tended_by_one_node_and_erased_only_when_it_says(engine: Engine) {
    use gantry_entities::{shared_file_system, shared_owner};
    use gantry_types::classes::SharedFsKind;
    use sea_orm::{ActiveModelTrait, Set};

    let database = TestDatabase::create(engine).await;
    let db = database.migrated().await;
    let scope = crate::organization(&db, "acme").await;
    let region = crate::region(&db, "r1").await;
    let first = crate::node(&db, region, "n1", 100).await;
    let second = crate::node(&db, region, "n2", 100).await;
    let now = Utc::now();
    shared_file_system::ActiveModel {
        region_id: Set(region),
        kind: Set(SharedFsKind::Glusterfs),
        mount_path: Set("/mnt/shared/".to_owned()),
        first_id: Set(3_000_000_000),
        free_bytes: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(&db)
    .await
    .expect("file system");
    shared_owner::ActiveModel {
        region_id: Set(region),
        org_id: Set(scope.org_id),
        slot: Set(2),
    }
    .insert(&db)
    .await
    .expect("owner");
    let made = |state| Made {
        kind: VolumeKind::Shared,
        state,
        size_gib: 1,
        provisioned_gib: 0,
        node_id: None,
        region_id: region,
    };
    let data = crate::volume(&db, &scope, "data", made(VolumeState::Creating), now).await;
    let old = crate::volume(&db, &scope, "old", made(VolumeState::Deleting), now).await;

    let tended = of_node(&db, &first, &[]).await.expect("listed");
    assert_eq!(tended.len(), 2, "the first node tends every shared volume");
    let place = tended
        .iter()
        .find(|v| v.volume_id == data.id)
        .and_then(|v| v.shared.clone())
        .expect("a shared place");
    assert_eq!(
        place.path,
        format!("/mnt/shared/gantry-volumes/{}", data.id)
    );
    assert_eq!(place.owner_id, 3_000_000_000 + 2 * 65_536);
    assert!(
        of_node(&db, &second, &[]).await.expect("listed").is_empty(),
        "another node is told of none it does not attach"
    );
    let attached = of_node(&db, &second, &[data.id]).await.expect("listed");
    assert_eq!(attached.len(), 1);
    assert_eq!(attached[0].action, VolumeAction::Keep);

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
    // Another node's trouble with its own mount is not the volume's; the
    // tending node's is said, and the volume stays to be made.
    let unmounted = VolumeReport {
        volume_id: data.id,
        size_gib: 0,
        used_bytes: 0,
        error: Some("the region's shared file system is not mounted".into()),
        erased: false,
    };
    apply(&db, &second, std::slice::from_ref(&unmounted), None, now)
        .await
        .expect("applied");
    let untouched = read(data.id).await;
    assert_eq!(
        (untouched.state, untouched.state_reason),
        (VolumeState::Creating, None)
    );
    apply(&db, &first, &[unmounted], None, now)
        .await
        .expect("applied");
    let waiting = read(data.id).await;
    assert_eq!(
        waiting.state,
        VolumeState::Creating,
        "not failed: another node may make it"
    );
    assert!(
        waiting
            .state_reason
            .is_some_and(|r| r.contains("not mounted"))
    );

    // The tending node reports it made, past its size; it does not mention
    // the one being erased, which stays.
    let over = VolumeReport {
        volume_id: data.id,
        size_gib: 1,
        used_bytes: 2 * GIB,
        error: None,
        erased: false,
    };
    apply(&db, &first, &[over], None, now)
        .await
        .expect("applied");
    let data = read(data.id).await;
    assert_eq!(data.state, VolumeState::Available);
    assert_eq!(data.used_bytes, Some(2 * GIB));
    assert!(
        data.state_reason
            .as_deref()
            .is_some_and(|r| r.contains("more than its 1 GiB")),
        "{:?}",
        data.state_reason
    );
    assert_eq!(read(old.id).await.state, VolumeState::Deleting);

    let erased = VolumeReport {
        volume_id: old.id,
        size_gib: 0,
        used_bytes: 0,
        error: None,
        erased: true,
    };
    apply(&db, &first, &[erased], None, now)
        .await
        .expect("applied");
    let old = read(old.id).await;
    assert_eq!(old.state, VolumeState::Deleted);
    assert!(old.deleted_at.is_some());
}
