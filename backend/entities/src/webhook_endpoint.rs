use sea_orm::entity::prelude::*;

/// Where an organization wants its events sent, and the secret that signs
/// them.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_endpoints")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    pub url: String,
    pub description: String,
    /// A JSON array of event types; empty for every type.
    pub event_types: String,
    pub enabled: bool,
    /// `whsec_` and the base64 key.
    pub secret: String,
    /// The secret before the last rotation, still signing until
    /// `previous_secret_until`.
    pub previous_secret: Option<String>,
    pub previous_secret_until: Option<DateTimeUtc>,
    /// Since when every delivery failed; none once one succeeds.
    pub failing_since: Option<DateTimeUtc>,
    /// Why the platform turned it off.
    pub disabled_reason: Option<String>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
