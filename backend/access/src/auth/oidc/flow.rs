//! The authorization code flow: the redirect to the provider, and the way
//! back that checks everything before anyone is signed in.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::header::{HOST, LOCATION, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use bytes::Bytes;
use chrono::TimeDelta;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use openidconnect::core::{CoreAuthenticationFlow, CoreClient, CoreProviderMetadata};
use openidconnect::{
    AuthorizationCode, ClientId, ClientSecret, CsrfToken, IssuerUrl, Nonce, PkceCodeChallenge,
    PkceCodeVerifier, RedirectUrl, Scope, TokenResponse as _,
};
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, Set};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{Provider, link};
use crate::auth::refresh;
use gantry_core::auth::principal::Actor;
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::state::AppState;
use gantry_entities::oidc_sign_in;

/// How long a sign-in may take at the provider.
const SIGN_IN_LIFETIME: TimeDelta = TimeDelta::minutes(10);
/// How long one request to a provider may take.
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a provider's answer that is read.
const PROVIDER_ANSWER_LIMIT: usize = 1024 * 1024;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(sign_in_options))
        .routes(routes!(start))
        .routes(routes!(callback))
}

/// How people may sign in here.
#[derive(Debug, Serialize, ToSchema)]
pub struct SignInOptions {
    /// Whether email and password work (sign-up too).
    pub password: bool,
    pub providers: Vec<SignInProvider>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SignInProvider {
    pub name: String,
    pub display_name: String,
    /// Where the browser goes to sign in (add `?next=/path` to come back
    /// there).
    pub start_url: String,
}

/// The ways to sign in: password, and each OpenID provider.
#[utoipa::path(
    get,
    path = "/auth/sign-in-options",
    tag = "auth",
    responses((status = 200, description = "How people may sign in", body = SignInOptions), ProblemResponses)
)]
async fn sign_in_options(State(state): State<AppState>) -> Json<SignInOptions> {
    Json(SignInOptions {
        password: state.config.password_sign_in,
        providers: state
            .config
            .oidc_providers
            .iter()
            .map(|p| SignInProvider {
                name: p.name.clone(),
                display_name: p.display_name.clone(),
                start_url: format!("/api/v1/auth/oidc/{}/start", p.name),
            })
            .collect(),
    })
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StartQuery {
    /// The console path to return to; the overview when absent.
    #[param(max_length = 2048)]
    pub next: Option<String>,
}

/// Sends the browser to the provider to sign in.
#[utoipa::path(
    get,
    path = "/auth/oidc/{provider}/start",
    tag = "auth",
    params(("provider" = String, Path, description = "The provider's name"), StartQuery),
    responses((status = 303, description = "To the provider's sign-in page"), ProblemResponses)
)]
async fn start(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<StartQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let provider = find(&state, &name)?;
    let http = Http::new()?;
    let client = discover(
        &http,
        provider,
        state.config.public_url.as_deref(),
        &headers,
    )
    .await?;
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let (url, csrf, nonce) = client
        .authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            CsrfToken::new_random,
            Nonce::new_random,
        )
        .add_scope(Scope::new("email".into()))
        .add_scope(Scope::new("profile".into()))
        .set_pkce_challenge(challenge)
        .url();
    oidc_sign_in::ActiveModel {
        state: Set(csrf.secret().clone()),
        provider: Set(provider.name.clone()),
        pkce_verifier: Set(verifier.secret().clone()),
        nonce: Set(nonce.secret().clone()),
        next: Set(safe_next(query.next.as_deref())),
        expires_at: Set(state.clock.now() + SIGN_IN_LIFETIME),
    }
    .insert(&state.db)
    .await?;
    Ok(see_other(url.as_str(), None))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CallbackQuery {
    #[param(max_length = 4096)]
    pub code: Option<String>,
    #[param(max_length = 256)]
    pub state: Option<String>,
    /// Set by the provider when it refused.
    #[param(max_length = 256)]
    pub error: Option<String>,
}

/// The way back from the provider: checks the state (one use, ten
/// minutes), exchanges the code with the PKCE verifier, verifies the ID
/// token (signature against the provider's keys, issuer, audience, expiry,
/// nonce), requires a verified email of an allowed domain, then signs the
/// user in and returns to the console. A refusal returns to the console's
/// sign-in page with `sso_error` saying why.
#[utoipa::path(
    get,
    path = "/auth/oidc/{provider}/callback",
    tag = "auth",
    params(("provider" = String, Path, description = "The provider's name"), CallbackQuery),
    responses((status = 303, description = "Signed in (`Set-Cookie` holds the refresh token), or back to the sign-in page with `sso_error`"), ProblemResponses)
)]
async fn callback(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<CallbackQuery>,
    actor: Actor,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let provider = find(&state, &name)?;
    match sign_in(&state, provider, query, &actor, &headers).await {
        Ok((user_id, next)) => {
            let [(_, cookie)] = refresh::issue(
                &state.db,
                user_id,
                uuid::Uuid::now_v7(),
                state.config.refresh_ttl_seconds,
                refresh::over_https(&headers),
                state.clock.now(),
            )
            .await?;
            Ok(see_other(&next, Some(cookie)))
        }
        Err(Refusal::Api(error)) => Err(error),
        Err(refusal) => {
            tracing::info!(provider = %name, reason = refusal.code(), "single sign-on refused");
            Ok(see_other(
                &format!("/sign-in?sso_error={}&sso_provider={name}", refusal.code()),
                None,
            ))
        }
    }
}

/// Why a sign-in through a provider was refused.
enum Refusal {
    /// Unknown, lapsed or already used.
    State,
    /// The provider said no, or its token endpoint failed.
    Provider,
    /// The ID token failed a check: signature, issuer, audience, expiry or
    /// nonce.
    Token,
    EmailMissing,
    EmailUnverified,
    DomainNotAllowed,
    Api(ApiError),
}

impl Refusal {
    fn code(&self) -> &'static str {
        match self {
            Self::State => "state_invalid",
            Self::Provider => "provider_refused",
            Self::Token => "token_invalid",
            Self::EmailMissing => "email_missing",
            Self::EmailUnverified => "email_unverified",
            Self::DomainNotAllowed => "domain_not_allowed",
            Self::Api(error) => error.code(),
        }
    }
}

impl<E: Into<ApiError>> From<E> for Refusal {
    fn from(error: E) -> Self {
        Self::Api(error.into())
    }
}

async fn sign_in(
    state: &AppState,
    provider: &Provider,
    query: CallbackQuery,
    actor: &Actor,
    headers: &HeaderMap,
) -> Result<(uuid::Uuid, String), Refusal> {
    let Some(state_param) = query.state else {
        return Err(Refusal::State);
    };
    // Taken by deleting it: of two callbacks with one state, one deletes.
    let Some(pending) = oidc_sign_in::Entity::find_by_id(state_param.clone())
        .one(&state.db)
        .await?
    else {
        return Err(Refusal::State);
    };
    let taken = oidc_sign_in::Entity::delete_many()
        .filter(oidc_sign_in::Column::State.eq(&state_param))
        .exec(&state.db)
        .await?;
    if taken.rows_affected != 1
        || pending.provider != provider.name
        || pending.expires_at <= state.clock.now()
    {
        return Err(Refusal::State);
    }
    if query.error.is_some() {
        return Err(Refusal::Provider);
    }
    let code = query.code.ok_or(Refusal::Provider)?;
    let http = Http::new()?;
    let client = discover(&http, provider, state.config.public_url.as_deref(), headers).await?;
    let exchange = client
        .exchange_code(AuthorizationCode::new(code))
        .map_err(|_| Refusal::Provider)?
        .set_pkce_verifier(PkceCodeVerifier::new(pending.pkce_verifier))
        .request_async(&http)
        .await
        .map_err(|_| Refusal::Provider)?;
    let id_token = exchange.id_token().ok_or(Refusal::Token)?;
    let claims = id_token
        .claims(&client.id_token_verifier(), &Nonce::new(pending.nonce))
        .map_err(|_| Refusal::Token)?;
    let email = claims
        .email()
        .map(|e| e.as_str().to_owned())
        .ok_or(Refusal::EmailMissing)?;
    if claims.email_verified() != Some(true) {
        return Err(Refusal::EmailUnverified);
    }
    let email = crate::auth::accounts::normalize_email(&email).ok_or(Refusal::EmailMissing)?;
    if !provider.allows(&email) {
        return Err(Refusal::DomainNotAllowed);
    }
    let name = claims
        .name()
        .and_then(|n| n.get(None))
        .map(|n| n.as_str().to_owned());
    let payload = verified_payload(&id_token.to_string());
    let groups = provider
        .org_claim
        .as_deref()
        .map(|claim| claim_values(&payload[claim]))
        .unwrap_or_default();
    let user_id = link::user_for(
        state,
        provider,
        link::Identity {
            subject: claims.subject().as_str(),
            email: &email,
            name: name.as_deref(),
            groups: &groups,
        },
        actor,
    )
    .await?;
    Ok((user_id, pending.next))
}

/// The payload of an ID token the verifier has already checked, for the
/// claims the library does not model (such as `groups`).
fn verified_payload(token: &str) -> serde_json::Value {
    token
        .split('.')
        .nth(1)
        .and_then(|part| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(part)
                .ok()
        })
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// A claim's strings: itself, or each string in its list.
fn claim_values(claim: &serde_json::Value) -> Vec<String> {
    match claim {
        serde_json::Value::String(value) => vec![value.clone()],
        serde_json::Value::Array(values) => values
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

fn find<'a>(state: &'a AppState, name: &str) -> ApiResult<&'a Provider> {
    state
        .config
        .oidc_providers
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| ApiError::not_found(Resource::IdentityProvider, name))
}

/// A console path to return to: only a path on this site.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(path)
            if path.starts_with('/')
                && !path.starts_with("//")
                && !path.starts_with("/\\")
                && !path.starts_with("/sign-in")
                && path.len() <= 2048 =>
        {
            path.to_owned()
        }
        _ => "/".to_owned(),
    }
}

fn see_other(location: &str, cookie: Option<HeaderValue>) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(LOCATION, value);
    }
    if let Some(cookie) = cookie {
        response.headers_mut().insert(SET_COOKIE, cookie);
    }
    response
}

/// Where the provider sends the browser back: under `public_url` when the
/// operator set one, else this server as the browser addressed it (`Host`,
/// and `X-Forwarded-Proto` from a proxy).
fn callback_url(
    public_url: Option<&str>,
    headers: &HeaderMap,
    provider: &str,
) -> ApiResult<String> {
    let base = match public_url {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None => {
            let host = headers
                .get(HOST)
                .and_then(|h| h.to_str().ok())
                .ok_or_else(|| {
                    ApiError::bad_request("host_missing", "the request names no Host")
                })?;
            let scheme = if refresh::over_https(headers) {
                "https"
            } else {
                "http"
            };
            format!("{scheme}://{host}")
        }
    };
    Ok(format!("{base}/api/v1/auth/oidc/{provider}/callback"))
}

/// The provider's client, from its discovery document, returning to this
/// server's callback.
async fn discover(
    http: &Http,
    provider: &Provider,
    public_url: Option<&str>,
    headers: &HeaderMap,
) -> ApiResult<CoreClientReady> {
    let unreachable = |detail: String| {
        ApiError::new(
            StatusCode::BAD_GATEWAY,
            "identity_provider_unavailable",
            format!("{} could not be reached: {detail}", provider.display_name),
        )
    };
    let issuer =
        IssuerUrl::new(provider.issuer_url.clone()).map_err(|e| unreachable(e.to_string()))?;
    let metadata = CoreProviderMetadata::discover_async(issuer, http)
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let redirect = RedirectUrl::new(callback_url(public_url, headers, &provider.name)?)
        .map_err(|e| ApiError::bad_request("host_invalid", e.to_string()))?;
    Ok(CoreClient::from_provider_metadata(
        metadata,
        ClientId::new(provider.client_id.clone()),
        Some(ClientSecret::new(provider.client_secret.clone())),
    )
    .set_redirect_uri(redirect))
}

type CoreClientReady = openidconnect::core::CoreClient<
    openidconnect::EndpointSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointMaybeSet,
    openidconnect::EndpointMaybeSet,
>;

/// HTTP to providers: no redirects followed, answers limited in time and
/// size, TLS with the web's roots.
struct Http(Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>);

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct HttpError(String);

impl Http {
    fn new() -> ApiResult<Self> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(PROVIDER_TIMEOUT));
        let https = gantry_core::http::outbound::https(http).map_err(ApiError::internal)?;
        Ok(Self(Client::builder(TokioExecutor::new()).build(https)))
    }

    async fn send(
        &self,
        request: openidconnect::HttpRequest,
    ) -> Result<openidconnect::HttpResponse, HttpError> {
        let (parts, body) = request.into_parts();
        let request = http::Request::from_parts(parts, Full::new(Bytes::from(body)));
        let exchange = async {
            let response = self
                .0
                .request(request)
                .await
                .map_err(|e| HttpError(e.to_string()))?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, PROVIDER_ANSWER_LIMIT)
                .collect()
                .await
                .map_err(|e| HttpError(e.to_string()))?
                .to_bytes();
            Ok(http::Response::from_parts(parts, body.to_vec()))
        };
        tokio::time::timeout(PROVIDER_TIMEOUT, exchange)
            .await
            .map_err(|_| HttpError("no answer in time".into()))?
    }
}

impl<'c> openidconnect::AsyncHttpClient<'c> for Http {
    type Error = HttpError;
    type Future = std::pin::Pin<
        Box<dyn Future<Output = Result<openidconnect::HttpResponse, HttpError>> + Send + 'c>,
    >;

    fn call(&'c self, request: openidconnect::HttpRequest) -> Self::Future {
        Box::pin(self.send(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_path_on_this_site_is_returned_to() {
        assert_eq!(safe_next(Some("/orders/1?tab=logs")), "/orders/1?tab=logs");
        for outside in [
            "//evil.example",
            "https://evil.example",
            "/\\evil",
            "/sign-in?next=/x",
            "orders",
        ] {
            assert_eq!(safe_next(Some(outside)), "/", "{outside}");
        }
        assert_eq!(safe_next(None), "/");
    }

    #[test]
    fn the_way_back_is_the_public_url_or_the_address_the_browser_used() {
        let mut headers = HeaderMap::new();
        headers.insert(HOST, HeaderValue::from_static("gpu.example.com"));
        assert_eq!(
            callback_url(None, &headers, "corp").ok().as_deref(),
            Some("http://gpu.example.com/api/v1/auth/oidc/corp/callback")
        );
        headers.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        assert_eq!(
            callback_url(None, &headers, "corp").ok().as_deref(),
            Some("https://gpu.example.com/api/v1/auth/oidc/corp/callback")
        );
        assert_eq!(
            callback_url(Some("https://console.example.com/"), &headers, "corp")
                .ok()
                .as_deref(),
            Some("https://console.example.com/api/v1/auth/oidc/corp/callback")
        );
        assert!(callback_url(None, &HeaderMap::new(), "corp").is_err());
    }

    #[test]
    fn a_claim_gives_its_strings() {
        assert_eq!(claim_values(&serde_json::json!("ml")), ["ml"]);
        assert_eq!(claim_values(&serde_json::json!(["a", 1, "b"])), ["a", "b"]);
        assert!(claim_values(&serde_json::json!({ "a": 1 })).is_empty());
    }
}
