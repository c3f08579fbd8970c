//! Sign-up, sign-in and the caller's own identity.

use std::net::{IpAddr, Ipv6Addr};

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::refresh::{self, WithCookie};
use crate::tenancy::orgs::{self, Organization};
use gantry_core::audit::{self, Change};
use gantry_core::auth::login_throttle::{self, Verdict};
use gantry_core::auth::password;
use gantry_core::auth::principal::{Actor, Authenticated, Principal};
use gantry_core::error::{ApiError, ApiResult, FieldError, ProblemResponses};
use gantry_core::http::extract::ApiJson;
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::{organization, user};
use gantry_types::roles::OrgRole;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignupRequest {
    #[schema(format = "email", max_length = 254)]
    pub email: String,
    /// 10 to 128 characters, not a common password, not the email.
    #[schema(min_length = 10, max_length = 128)]
    pub password: String,
    /// The person's name.
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*[^\\s\\x00-\\x1f\\x7f-\\x9f][^\\x00-\\x1f\\x7f-\\x9f]*$"
    )]
    pub name: String,
    /// Name of the organization the new user will own. Left out, the user
    /// owns none and joins the organizations that invited their email
    /// (there must be one).
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*[^\\s\\x00-\\x1f\\x7f-\\x9f][^\\x00-\\x1f\\x7f-\\x9f]*$"
    )]
    #[serde(default)]
    pub organization: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    #[schema(max_length = 254)]
    pub email: String,
    #[schema(max_length = 128)]
    pub password: String,
}

/// A user as others may see them.
#[derive(Debug, Serialize, ToSchema)]
pub struct User {
    pub id: Uuid,
    pub email: String,
    pub name: String,
    /// Whether the user operates the platform.
    pub is_operator: bool,
    /// The language they chose for the console; the browser's when none.
    pub locale: Option<Locale>,
    /// The IANA time zone they chose; the browser's when none.
    pub time_zone: Option<String>,
    /// False for a user made by an identity provider, who signs in through
    /// it and has no password to change.
    pub has_password: bool,
    pub created_at: DateTime<Utc>,
}

/// The languages the console speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Locale {
    En,
    Ko,
}

impl Locale {
    fn as_str(self) -> &'static str {
        match self {
            Self::En => "en",
            Self::Ko => "ko",
        }
    }

    fn parse(stored: &str) -> Option<Self> {
        match stored {
            "en" => Some(Self::En),
            "ko" => Some(Self::Ko),
            _ => None,
        }
    }
}

/// What a user may change about themselves; a field left out stays, one
/// set to null goes back to the browser's.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateMe {
    #[schema(min_length = 1, max_length = 200)]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "gantry_core::validate::present")]
    #[schema(value_type = Option<Locale>)]
    pub locale: Option<Option<Locale>>,
    /// An IANA time zone such as `Asia/Seoul`.
    #[serde(default, deserialize_with = "gantry_core::validate::present")]
    #[schema(value_type = Option<String>, max_length = 64)]
    pub time_zone: Option<Option<String>>,
}

impl From<user::Model> for User {
    fn from(row: user::Model) -> Self {
        Self {
            id: row.id,
            email: row.email,
            name: row.name,
            is_operator: row.is_operator,
            locale: row.locale.as_deref().and_then(Locale::parse),
            time_zone: row.time_zone,
            has_password: row.password_hash != password::NO_PASSWORD,
            created_at: row.created_at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SignupResponse {
    pub user: User,
    /// The organization created, or without one the first that invited
    /// the user.
    pub organization: Organization,
    /// A session token for the new user.
    pub access_token: String,
    pub token_type: String,
    pub expires_in: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TokenResponse {
    pub access_token: String,
    /// Always `Bearer`.
    pub token_type: String,
    /// Seconds until the token expires.
    pub expires_in: u64,
}

/// One organization the caller belongs to, with the caller's role there.
#[derive(Debug, Serialize, ToSchema)]
pub struct Membership {
    pub organization: Organization,
    pub role: OrgRole,
}

/// The API key a request came with.
#[derive(Debug, Serialize, ToSchema)]
pub struct CallingApiKey {
    pub id: Uuid,
    pub org_id: Uuid,
    pub role: OrgRole,
}

/// The caller: a user with their memberships, or an API key with the one
/// organization it acts in.
#[derive(Debug, Serialize, ToSchema)]
pub struct Me {
    /// The signed-in user; absent for an API key.
    pub user: Option<User>,
    /// The API key; absent for a user session.
    pub api_key: Option<CallingApiKey>,
    pub memberships: Vec<Membership>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangePassword {
    #[schema(max_length = 128)]
    pub current_password: String,
    /// 10 to 128 characters, not a common password, not the email.
    #[schema(min_length = 10, max_length = 128)]
    pub new_password: String,
}

/// The longest name a user may go by.
const NAME_MAX: usize = 200;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(signup))
        .routes(routes!(login))
        .routes(routes!(me, update_me))
        .routes(routes!(change_password))
}

/// Starts a browser session for `user_id`: a refresh token of a new family.
async fn new_session(
    state: &AppState,
    headers: &HeaderMap,
    user_id: Uuid,
) -> ApiResult<WithCookie> {
    refresh::issue(
        &state.db,
        user_id,
        Uuid::now_v7(),
        state.config.refresh_ttl_seconds,
        refresh::over_https(headers),
        state.clock.now(),
    )
    .await
}

/// Normalizes and checks an email address; `None` when it is not one.
pub fn normalize_email(email: &str) -> Option<String> {
    let email = email.trim().to_lowercase();
    (email.len() <= 254
        && email_address::EmailAddress::parse_with_options(&email, Default::default()).is_ok()
        && email.contains('.'))
    .then_some(email)
}

/// Creates a user and an organization they own (unless they only join);
/// the user joins every organization whose pending invitation names this
/// email.
#[utoipa::path(
    post,
    path = "/auth/signup",
    tag = "auth",
    request_body = SignupRequest,
    responses(
        (status = 201, description = "The user, their organization and a session token; `Set-Cookie` carries the refresh token", body = SignupResponse),
        ProblemResponses,
    )
)]
async fn signup(
    State(state): State<AppState>,
    actor: Actor,
    headers: HeaderMap,
    ApiJson(request): ApiJson<SignupRequest>,
) -> ApiResult<(StatusCode, WithCookie, Json<SignupResponse>)> {
    passwords_allowed(&state)?;
    let mut fields = Fields::default();
    let email = normalize_email(&request.email);
    if email.is_none() {
        fields.push("email", "must be a valid email address");
    }
    if let Some(weakness) = password::weakness(&request.password, &request.email) {
        fields.push("password", weakness);
    }
    let name = fields.name("name", &request.name, NAME_MAX);
    let org_name = request
        .organization
        .as_deref()
        .map(|org| fields.name("organization", org, 200));
    fields.finish()?;
    let email = email.unwrap_or_default();

    if user::Entity::find()
        .filter(user::Column::Email.eq(&email))
        .one(&state.db)
        .await?
        .is_some()
    {
        return Err(email_taken());
    }
    let password_hash = state
        .passwords
        .hash(request.password)
        .await
        .map_err(ApiError::internal)?;

    let user_id = Uuid::now_v7();
    let actor = actor.as_user(user_id);
    let txn = gantry_core::db::write(&state.db).await?;
    let user = add_user(
        &txn,
        &actor,
        NewUser {
            id: user_id,
            email,
            name,
            password_hash,
        },
        serde_json::Value::Null,
    )
    .await?;
    let created = match org_name {
        Some(name) => Some(orgs::create_in(&txn, &actor, user_id, name).await?),
        None => None,
    };
    let joined =
        crate::tenancy::invitations::accept(&txn, &actor, user_id, &user.email, state.clock.now())
            .await?;
    let organization = match (created, joined.first()) {
        (Some(created), _) => created,
        (None, Some(first)) => organization::Entity::find_by_id(*first)
            .one(&txn)
            .await?
            .map(Organization::from)
            .ok_or_else(|| {
                ApiError::internal(anyhow::anyhow!("an invitation without its organization"))
            })?,
        // Rolled back with the transaction: no user is left without a home.
        (None, None) => {
            return Err(ApiError::validation(vec![FieldError {
                field: "organization".into(),
                message: "name the organization you will own; without one, sign-up needs an invitation to this email".into(),
            }]));
        }
    };
    txn.commit().await?;

    let access_token = state.sessions.issue(user_id).map_err(ApiError::internal)?;
    Ok((
        StatusCode::CREATED,
        new_session(&state, &headers, user_id).await?,
        Json(SignupResponse {
            user: user.into(),
            organization,
            access_token,
            token_type: "Bearer".into(),
            expires_in: state.sessions.ttl_seconds(),
        }),
    ))
}

/// A user to add.
pub struct NewUser {
    pub id: Uuid,
    /// Normalized.
    pub email: String,
    pub name: String,
    /// A hash no password matches for users who sign in elsewhere.
    pub password_hash: String,
}

/// Adds `new` and audits it as a sign-up, with `details` beside its email;
/// an email already taken is a conflict.
pub async fn add_user(
    txn: &impl sea_orm::ConnectionTrait,
    actor: &Actor,
    new: NewUser,
    details: serde_json::Value,
) -> ApiResult<user::Model> {
    let now = Utc::now();
    let user = sea_orm::ActiveModelTrait::insert(
        user::ActiveModel {
            id: sea_orm::Set(new.id),
            email: sea_orm::Set(new.email),
            name: sea_orm::Set(new.name),
            password_hash: sea_orm::Set(new.password_hash),
            is_operator: sea_orm::Set(false),
            locale: sea_orm::Set(None),
            time_zone: sea_orm::Set(None),
            created_at: sea_orm::Set(now),
            updated_at: sea_orm::Set(now),
        },
        txn,
    )
    .await
    .map_err(|e| match ApiError::from(e) {
        conflict if conflict.status() == StatusCode::CONFLICT => email_taken(),
        other => other,
    })?;
    let mut recorded = serde_json::json!({ "email": user.email });
    if let (Some(recorded), serde_json::Value::Object(more)) = (recorded.as_object_mut(), details) {
        recorded.extend(more);
    }
    audit::record(
        txn,
        Change {
            org_id: None,
            action: "user.signup",
            target_type: "user",
            target_id: Some(new.id.to_string()),
            details: recorded,
            actor,
        },
    )
    .await?;
    Ok(user)
}

/// Refuses password sign-in and sign-up where the operator turned them off.
fn passwords_allowed(state: &AppState) -> ApiResult<()> {
    if state.config.password_sign_in {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        "password_sign_in_disabled",
        "password sign-in is turned off here: sign in with your organization's identity provider",
    ))
}

fn email_taken() -> ApiError {
    ApiError::conflict("email_taken", "an account with this email already exists")
}

/// Exchanges an email and password for a session token.
#[utoipa::path(
    post,
    path = "/auth/login",
    tag = "auth",
    request_body = LoginRequest,
    responses(
        (status = 200, description = "A session token; `Set-Cookie` carries the refresh token that renews it (`POST /auth/refresh`)", body = TokenResponse),
        ProblemResponses,
    )
)]
async fn login(
    State(state): State<AppState>,
    actor: Actor,
    headers: HeaderMap,
    ApiJson(request): ApiJson<LoginRequest>,
) -> ApiResult<(WithCookie, Json<TokenResponse>)> {
    passwords_allowed(&state)?;
    let throttle_key = request.email.trim().to_lowercase();
    if throttle_key.len() > 254 || request.password.chars().count() > password::MAX_LENGTH {
        return Err(bad_credentials());
    }
    let address: IpAddr = actor
        .source_address
        .parse()
        .unwrap_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED));
    let window_minutes = login_throttle::WINDOW.as_secs() / 60;
    match state.login_throttle.check(&throttle_key, address) {
        Verdict::Go { after } => tokio::time::sleep(after).await,
        Verdict::AccountRefused => {
            return Err(too_many_attempts(format!(
                "too many failed sign-ins to this account from your address; try again within \
                 {window_minutes} minutes"
            )));
        }
        Verdict::AddressRefused => {
            return Err(too_many_attempts(format!(
                "too many failed sign-ins from your address; try again within {window_minutes} \
                 minutes"
            )));
        }
    }
    let account = match normalize_email(&request.email) {
        Some(email) => {
            user::Entity::find()
                .filter(user::Column::Email.eq(email))
                .one(&state.db)
                .await?
        }
        None => None,
    };
    let verified = state
        .passwords
        .verify(
            request.password,
            account.as_ref().map(|u| u.password_hash.clone()),
        )
        .await
        .map_err(ApiError::internal)?;
    let target = account.as_ref().map(|u| u.id);
    let Some(account) = account.filter(|_| verified) else {
        state.login_throttle.record_failure(&throttle_key, address);
        audit::record(
            &state.db,
            Change {
                org_id: None,
                action: "user.login_failed",
                target_type: "user",
                target_id: target.map(|id| id.to_string()),
                details: serde_json::json!({
                    "email": throttle_key,
                    "known_account": target.is_some(),
                }),
                actor: &actor,
            },
        )
        .await?;
        return Err(bad_credentials());
    };
    state.login_throttle.record_success(&throttle_key, address);
    audit::record(
        &state.db,
        Change {
            org_id: None,
            action: "user.login",
            target_type: "user",
            target_id: Some(account.id.to_string()),
            details: serde_json::json!({}),
            actor: &actor.as_user(account.id),
        },
    )
    .await?;
    Ok((
        new_session(&state, &headers, account.id).await?,
        Json(TokenResponse {
            access_token: state
                .sessions
                .issue(account.id)
                .map_err(ApiError::internal)?,
            token_type: "Bearer".into(),
            expires_in: state.sessions.ttl_seconds(),
        }),
    ))
}

/// Changes the caller's password; every browser session of the user ends
/// (their refresh tokens are revoked), this one included.
#[utoipa::path(
    post,
    path = "/me/password",
    tag = "auth",
    request_body = ChangePassword,
    responses((status = 204, description = "Changed; sign in again"), ProblemResponses),
    security(("bearer" = []))
)]
async fn change_password(
    State(state): State<AppState>,
    actor: Actor,
    Authenticated(principal): Authenticated,
    ApiJson(request): ApiJson<ChangePassword>,
) -> ApiResult<StatusCode> {
    let Principal::User { user_id } = principal else {
        return Err(ApiError::forbidden("an API key has no password"));
    };
    let account = user::Entity::find_by_id(user_id)
        .one(&state.db)
        .await?
        .ok_or_else(|| {
            ApiError::unauthenticated("invalid_token", "the session token's user no longer exists")
        })?;
    if account.password_hash == password::NO_PASSWORD {
        return Err(ApiError::conflict(
            "no_password",
            "this account signs in through its identity provider and has no password here",
        ));
    }
    let mut fields = Fields::default();
    if let Some(weakness) = password::weakness(&request.new_password, &account.email) {
        fields.push("new_password", weakness);
    }
    fields.finish()?;
    let verified = state
        .passwords
        .verify(
            request.current_password,
            Some(account.password_hash.clone()),
        )
        .await
        .map_err(ApiError::internal)?;
    if !verified {
        return Err(ApiError::unprocessable(
            "wrong_password",
            "the current password is wrong",
        ));
    }
    let hash = state
        .passwords
        .hash(request.new_password)
        .await
        .map_err(ApiError::internal)?;
    let now = Utc::now();
    let txn = gantry_core::db::write(&state.db).await?;
    user::Entity::update_many()
        .col_expr(user::Column::PasswordHash, Expr::value(hash))
        .col_expr(user::Column::UpdatedAt, Expr::value(now))
        .filter(user::Column::Id.eq(user_id))
        .exec(&txn)
        .await?;
    let ended = refresh::revoke_user(&txn, user_id, now).await?;
    audit::record(
        &txn,
        Change {
            org_id: None,
            action: "user.password_change",
            target_type: "user",
            target_id: Some(user_id.to_string()),
            details: serde_json::json!({ "sessions_ended": ended }),
            actor: &actor,
        },
    )
    .await?;
    txn.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Changes the caller's name, console language or time zone.
#[utoipa::path(
    patch,
    path = "/me",
    tag = "auth",
    request_body = UpdateMe,
    responses((status = 200, description = "The user as changed", body = User), ProblemResponses),
    security(("bearer" = []))
)]
async fn update_me(
    State(state): State<AppState>,
    actor: Actor,
    Authenticated(principal): Authenticated,
    ApiJson(request): ApiJson<UpdateMe>,
) -> ApiResult<Json<User>> {
    let Principal::User { user_id } = principal else {
        return Err(ApiError::forbidden("an API key has no profile"));
    };
    let mut fields = Fields::default();
    let name = request
        .name
        .as_deref()
        .map(|name| fields.name("name", name, NAME_MAX));
    if let Some(Some(zone)) = &request.time_zone
        && zone.parse::<chrono_tz::Tz>().is_err()
    {
        fields.push("time_zone", format!("{zone:?} is not an IANA time zone"));
    }
    fields.finish()?;
    let txn = gantry_core::db::write(&state.db).await?;
    let current = user::Entity::find_by_id(user_id)
        .one(&txn)
        .await?
        .ok_or_else(|| {
            ApiError::unauthenticated("invalid_token", "the session token's user no longer exists")
        })?;
    let mut row: user::ActiveModel = current.into();
    if let Some(name) = name {
        row.name = sea_orm::Set(name);
    }
    if let Some(locale) = request.locale {
        row.locale = sea_orm::Set(locale.map(|l| l.as_str().to_owned()));
    }
    if let Some(zone) = request.time_zone {
        row.time_zone = sea_orm::Set(zone);
    }
    row.updated_at = sea_orm::Set(Utc::now());
    let updated = sea_orm::ActiveModelTrait::update(row, &txn).await?;
    audit::record(
        &txn,
        Change {
            org_id: None,
            action: "user.update",
            target_type: "user",
            target_id: Some(user_id.to_string()),
            details: serde_json::json!({
                "locale": updated.locale, "time_zone": updated.time_zone,
            }),
            actor: &actor,
        },
    )
    .await?;
    txn.commit().await?;
    state.identities.forget_user(user_id);
    Ok(Json(updated.into()))
}

fn too_many_attempts(detail: String) -> ApiError {
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_login_attempts",
        detail,
    )
    .with_retry_after(login_throttle::WINDOW.as_secs())
}

fn bad_credentials() -> ApiError {
    ApiError::unauthenticated("invalid_credentials", "the email or password is wrong")
}

/// The caller and the organizations it may act in.
#[utoipa::path(
    get,
    path = "/me",
    tag = "auth",
    responses(
        (status = 200, description = "The caller", body = Me),
        ProblemResponses,
    ),
    security(("bearer" = []))
)]
async fn me(
    State(state): State<AppState>,
    Authenticated(principal): Authenticated,
) -> ApiResult<Json<Me>> {
    match principal {
        Principal::User { user_id } => {
            let identity = state
                .identities
                .user(&state.db, user_id)
                .await?
                .ok_or_else(|| {
                    ApiError::unauthenticated(
                        "invalid_token",
                        "the session token's user no longer exists",
                    )
                })?;
            Ok(Json(Me {
                user: Some(identity.user.clone().into()),
                api_key: None,
                memberships: identity
                    .memberships
                    .iter()
                    .map(|(org, role)| Membership {
                        organization: org.clone().into(),
                        role: *role,
                    })
                    .collect(),
            }))
        }
        Principal::ApiKey {
            key_id,
            org_id,
            role,
        } => {
            let identity = state
                .identities
                .api_key(&state.db, key_id)
                .await?
                .ok_or_else(|| {
                    ApiError::unauthenticated("invalid_api_key", "the API key is not valid")
                })?;
            Ok(Json(Me {
                user: None,
                api_key: Some(CallingApiKey {
                    id: key_id,
                    org_id,
                    role,
                }),
                memberships: vec![Membership {
                    organization: identity.organization.clone().into(),
                    role,
                }],
            }))
        }
    }
}
