//! The agent API's callers: a join token (to register) or a node
//! credential (for everything after), each `Authorization: Bearer …`.

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use chrono::Utc;
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};

use gantry_core::auth::api_key_secret::{self, JOIN_PREFIX, NODE_PREFIX};
use gantry_core::error::ApiError;
use gantry_core::state::AppState;
use gantry_entities::{join_token, node};
use gantry_types::classes::DriverKind;

fn bearer(parts: &Parts) -> Option<&str> {
    parts
        .headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .split_once(' ')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
}

/// A registered node's agent.
pub struct NodeAgent {
    pub node: node::Model,
}

impl FromRequestParts<AppState> for NodeAgent {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let invalid = || {
            ApiError::unauthenticated(
                "invalid_node_credential",
                "this route needs `Authorization: Bearer <node credential>` from registration",
            )
        };
        let (id, hash) = bearer(parts)
            .and_then(|token| api_key_secret::parse_with(NODE_PREFIX, token))
            .ok_or_else(invalid)?;
        let node = node::Entity::find_by_id(id)
            .one(&state.db)
            .await?
            .filter(|n| n.driver == DriverKind::Agent)
            .ok_or_else(invalid)?;
        let matches = |stored: &Option<String>| {
            stored
                .as_deref()
                .is_some_and(|stored| api_key_secret::hashes_match(stored, &hash))
        };
        if matches(&node.credential_hash) {
            return Ok(Self { node });
        }
        if !matches(&node.credential_next_hash) {
            return Err(invalid());
        }
        // The first use of a rotated credential retires the old one; the
        // update is conditional, so a concurrent rotation is not undone.
        node::Entity::update_many()
            .col_expr(
                node::Column::CredentialHash,
                Expr::col(node::Column::CredentialNextHash),
            )
            .col_expr(
                node::Column::CredentialNextHash,
                Expr::value(None::<String>),
            )
            .filter(node::Column::Id.eq(node.id))
            .filter(node::Column::CredentialNextHash.eq(node.credential_next_hash.clone()))
            .exec(&state.db)
            .await?;
        Ok(Self {
            node: node::Model {
                credential_hash: node.credential_next_hash.clone(),
                credential_next_hash: None,
                ..node
            },
        })
    }
}

/// A valid, unexpired, unrevoked join token.
pub struct JoinToken {
    pub token: join_token::Model,
}

impl FromRequestParts<AppState> for JoinToken {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let invalid = || {
            ApiError::unauthenticated(
                "invalid_join_token",
                "registration needs `Authorization: Bearer <join token>` from an operator",
            )
        };
        let (id, hash) = bearer(parts)
            .and_then(|token| api_key_secret::parse_with(JOIN_PREFIX, token))
            .ok_or_else(invalid)?;
        let token = join_token::Entity::find_by_id(id)
            .one(&state.db)
            .await?
            .filter(|t| api_key_secret::hashes_match(&t.secret_hash, &hash))
            .ok_or_else(invalid)?;
        if token.revoked_at.is_some() || token.expires_at <= Utc::now() {
            return Err(ApiError::unauthenticated(
                "join_token_expired",
                "the join token has expired or was revoked; ask an operator for a new one",
            ));
        }
        Ok(Self { token })
    }
}
