use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "regions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub name: String,
    pub display_name: String,
    /// An IANA time zone name.
    pub time_zone: String,
    /// A JSON array of tags such as `eu-gdpr`.
    pub compliance_tags: String,
    pub off_peak_start_hour: Option<i16>,
    pub off_peak_end_hour: Option<i16>,
    pub off_peak_multiplier_permille: Option<i32>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
