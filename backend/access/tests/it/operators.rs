//! What the command line's operator command writes.

use gantry_access::operators::{Outcome, create_or_promote};
use gantry_entities::{audit_log, user};
use gantry_test_support::{Engine, TestDatabase, on_both_engines};
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder};

on_both_engines!(
    an_operator_is_created_then_promoted_in_place,
    a_refused_operator_writes_nothing
);

async fn an_operator_is_created_then_promoted_in_place(engine: Engine) {
    let database = TestDatabase::create(engine).await;
    let db = database.migrated().await;

    let created = create_or_promote(&db, "Ops@Example.com", "a strong operator passphrase")
        .await
        .expect("create");
    let Outcome::Created(id) = created else {
        panic!("a new address creates an account");
    };
    let account = user::Entity::find_by_id(id)
        .one(&db)
        .await
        .expect("read")
        .expect("the account");
    assert_eq!(account.email, "ops@example.com", "stored normalized");
    assert!(account.is_operator);
    let hash = account.password_hash.clone();

    // The same address in another case promotes the same account and
    // leaves its password alone.
    let again = create_or_promote(&db, "OPS@example.com", "ignored for existing users")
        .await
        .expect("promote");
    assert!(matches!(again, Outcome::Promoted(same) if same == id));
    let account = user::Entity::find_by_id(id)
        .one(&db)
        .await
        .expect("read")
        .expect("the account");
    assert_eq!(account.password_hash, hash);
    assert_eq!(user::Entity::find().count(&db).await.expect("count"), 1);

    let actions: Vec<(String, Option<String>)> = audit_log::Entity::find()
        .order_by_asc(audit_log::Column::CreatedAt)
        .order_by_asc(audit_log::Column::Id)
        .all(&db)
        .await
        .expect("audit")
        .into_iter()
        .map(|row| (row.action, row.target_id))
        .collect();
    assert_eq!(
        actions,
        [
            ("operator.create".to_owned(), Some(id.to_string())),
            ("operator.promote".to_owned(), Some(id.to_string())),
        ]
    );
}

async fn a_refused_operator_writes_nothing(engine: Engine) {
    let database = TestDatabase::create(engine).await;
    let db = database.migrated().await;

    let weak = create_or_promote(&db, "ops@example.com", "ops")
        .await
        .err()
        .expect("a weak password is refused");
    assert!(weak.to_string().starts_with("the password"), "{weak}");
    let invalid = create_or_promote(&db, "not an address", "a strong operator passphrase")
        .await
        .err()
        .expect("an invalid address is refused");
    assert!(
        invalid.to_string().contains("not a valid email"),
        "{invalid}"
    );

    assert_eq!(user::Entity::find().count(&db).await.expect("count"), 0);
    let audited = audit_log::Entity::find()
        .filter(audit_log::Column::Action.starts_with("operator."))
        .count(&db)
        .await
        .expect("count");
    assert_eq!(audited, 0);
}
