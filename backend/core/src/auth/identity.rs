//! Who a caller is, kept in memory for a few seconds.
//!
//! Every authenticated request needs the caller's user or API key and its
//! memberships; reading them from the database each time would make the
//! database the ceiling of every route. Entries live for
//! `auth_cache_seconds` and are dropped at once when this replica changes
//! them, so a change made through one replica is seen there immediately and
//! on other replicas within that bound.

use std::sync::Arc;
use std::time::Duration;

use moka::sync::Cache;
use sea_orm::{ColumnTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QueryOrder};
use uuid::Uuid;

use gantry_entities::{api_key, membership, organization, user};
use gantry_types::roles::OrgRole;

const CAPACITY: u64 = 100_000;

/// A user and the organizations they belong to.
#[derive(Debug)]
pub struct UserIdentity {
    pub user: user::Model,
    pub memberships: Vec<(organization::Model, OrgRole)>,
}

impl UserIdentity {
    pub fn role_in(&self, org_id: Uuid) -> Option<OrgRole> {
        self.memberships
            .iter()
            .find(|(org, _)| org.id == org_id)
            .map(|(_, role)| *role)
    }
}

/// An API key with the organization it acts in.
#[derive(Debug)]
pub struct KeyIdentity {
    pub key: api_key::Model,
    pub organization: organization::Model,
}

pub struct IdentityCache {
    users: Option<Cache<Uuid, Arc<UserIdentity>>>,
    keys: Option<Cache<Uuid, Arc<KeyIdentity>>>,
}

impl IdentityCache {
    /// A cache whose entries live `ttl_seconds`; zero turns caching off.
    pub fn new(ttl_seconds: u64) -> Self {
        Self {
            users: build_cache(ttl_seconds),
            keys: build_cache(ttl_seconds),
        }
    }

    pub async fn user(
        &self,
        db: &DatabaseConnection,
        user_id: Uuid,
    ) -> Result<Option<Arc<UserIdentity>>, DbErr> {
        if let Some(hit) = self.users.as_ref().and_then(|c| c.get(&user_id)) {
            return Ok(Some(hit));
        }
        let Some(user) = user::Entity::find_by_id(user_id).one(db).await? else {
            return Ok(None);
        };
        let memberships = membership::Entity::find()
            .filter(membership::Column::UserId.eq(user_id))
            .find_also_related(organization::Entity)
            .order_by_asc(membership::Column::OrgId)
            .all(db)
            .await?
            .into_iter()
            .filter_map(|(m, org)| org.map(|org| (org, m.role)))
            .collect();
        let identity = Arc::new(UserIdentity { user, memberships });
        if let Some(cache) = &self.users {
            cache.insert(user_id, Arc::clone(&identity));
        }
        Ok(Some(identity))
    }

    pub async fn api_key(
        &self,
        db: &DatabaseConnection,
        key_id: Uuid,
    ) -> Result<Option<Arc<KeyIdentity>>, DbErr> {
        if let Some(hit) = self.keys.as_ref().and_then(|c| c.get(&key_id)) {
            return Ok(Some(hit));
        }
        let Some((key, Some(organization))) = api_key::Entity::find_by_id(key_id)
            .find_also_related(organization::Entity)
            .one(db)
            .await?
        else {
            return Ok(None);
        };
        let identity = Arc::new(KeyIdentity { key, organization });
        self.remember_key(Arc::clone(&identity));
        Ok(Some(identity))
    }

    pub fn remember_key(&self, identity: Arc<KeyIdentity>) {
        if let Some(cache) = &self.keys {
            cache.insert(identity.key.id, identity);
        }
    }

    pub fn forget_user(&self, user_id: Uuid) {
        if let Some(cache) = &self.users {
            cache.invalidate(&user_id);
        }
    }

    /// After a change seen by every member of an organization, such as its name.
    pub fn forget_all_users(&self) {
        if let Some(cache) = &self.users {
            cache.invalidate_all();
        }
    }

    pub fn forget_key(&self, key_id: Uuid) {
        if let Some(cache) = &self.keys {
            cache.invalidate(&key_id);
        }
    }
}

fn build_cache<V: Clone + Send + Sync + 'static>(ttl_seconds: u64) -> Option<Cache<Uuid, V>> {
    (ttl_seconds > 0).then(|| {
        Cache::builder()
            .max_capacity(CAPACITY)
            .time_to_live(Duration::from_secs(ttl_seconds))
            .build()
    })
}
