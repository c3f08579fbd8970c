use sea_orm::entity::prelude::*;

/// An organization's login to one container registry, for its nodes'
/// pulls. The password is sealed (see `catalog::registry_credentials`).
#[derive(Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "registry_credentials")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    /// `host` or `host:port`, as references name it.
    pub registry: String,
    pub username: String,
    /// The password, sealed with the server's key.
    pub secret: String,
    pub created_by: Option<Uuid>,
    pub created_at: DateTimeUtc,
}

// The sealed secret stays out of logs.
impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryCredential")
            .field("id", &self.id)
            .field("org_id", &self.org_id)
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
