//! What the console needs to read well: every order gets a name (given, or
//! generated like `h100x8-swift-otter`) so that orders can be told apart; a
//! waiting order keeps its reasons as structured JSON beside the text, with
//! times, counts and the orders it waits for, for clients to show in their
//! reader's language; and each user keeps the language and time zone they
//! read in. Orders made before this have no stored name; they are shown
//! under one made from their id.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // SQLite adds one column per statement.
        let columns: [(DynIden, ColumnDef); 4] = [
            (Orders::Table.into_iden(), string_len_null(Orders::Name, 63)),
            (Orders::Table.into_iden(), text_null(Orders::PendingDetails)),
            (Users::Table.into_iden(), string_len_null(Users::Locale, 16)),
            (
                Users::Table.into_iden(),
                string_len_null(Users::TimeZone, 64),
            ),
        ];
        for (table, mut column) in columns {
            manager
                .alter_table(
                    Table::alter()
                        .table(table)
                        .add_column(&mut column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let columns: [(DynIden, DynIden); 4] = [
            (Orders::Table.into_iden(), Orders::Name.into_iden()),
            (
                Orders::Table.into_iden(),
                Orders::PendingDetails.into_iden(),
            ),
            (Users::Table.into_iden(), Users::Locale.into_iden()),
            (Users::Table.into_iden(), Users::TimeZone.into_iden()),
        ];
        for (table, column) in columns {
            manager
                .alter_table(Table::alter().table(table).drop_column(column).to_owned())
                .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum Orders {
    Table,
    Name,
    PendingDetails,
}

#[derive(DeriveIden)]
enum Users {
    Table,
    Locale,
    TimeZone,
}
