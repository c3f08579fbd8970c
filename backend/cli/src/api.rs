//! The signed-in client: requests with the stored credential, a session
//! refreshed before or when its access token runs out, problem documents
//! turned into errors, and the organization commands act in.

use std::path::PathBuf;

use chrono::{TimeDelta, Utc};
use http::StatusCode;
use http::header::{COOKIE, SET_COOKIE};
use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

use crate::config::{self, Config, Credential};
use crate::error::{CliError, CliResult};
use crate::http::{Http, Reply};
use crate::routes::{self, Route};
use crate::views::{Me, Problem, TokenResponse};

/// The cookie the server keeps a session's refresh token in.
pub const REFRESH_COOKIE: &str = "gantry_refresh";

pub struct Api {
    http: Http,
    config: Config,
    /// Where `config` is saved after a refresh; `None` when it came from
    /// the environment.
    path: Option<PathBuf>,
    org: Option<String>,
}

/// Where the server and credential come from: `GANTRY_API_KEY` (with
/// `GANTRY_SERVER`) for pipelines, else the config file `login` wrote.
pub struct Source {
    pub config_path: PathBuf,
    pub server: Option<String>,
    pub api_key: Option<String>,
    pub org: Option<String>,
}

impl Api {
    pub fn open(source: Source) -> CliResult<Self> {
        let stored = config::load(&source.config_path)?;
        let (config, path) = match (source.api_key, stored) {
            (Some(secret), stored) => {
                let server = source
                    .server
                    .or_else(|| stored.as_ref().map(|c| c.server.clone()))
                    .ok_or_else(|| {
                        CliError::Usage("GANTRY_API_KEY needs GANTRY_SERVER (or --server)".into())
                    })?;
                let config = Config {
                    server,
                    credential: Credential::ApiKey { secret },
                    org_id: None,
                    org_name: None,
                };
                (config, None)
            }
            (None, Some(mut stored)) => {
                if let Some(server) = source.server {
                    stored.server = server;
                }
                (stored, Some(source.config_path))
            }
            (None, None) => return Err(CliError::NotSignedIn),
        };
        Ok(Self {
            http: Http::new(&config.server)?,
            config,
            path,
            org: source.org,
        })
    }

    /// A client for `config` that saves it to `path` after each refresh.
    pub fn signed_in(config: Config, path: PathBuf) -> CliResult<Self> {
        Ok(Self {
            http: Http::new(&config.server)?,
            config,
            path: Some(path),
            org: None,
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn http(&self) -> &Http {
        &self.http
    }

    /// The bearer token to send now, refreshed first when it is about to
    /// expire.
    pub async fn bearer(&mut self) -> CliResult<String> {
        if self.config.credential.expiring() {
            self.refresh().await?;
        }
        Ok(self.config.credential.bearer().to_owned())
    }

    pub async fn call(
        &mut self,
        route: Route,
        path: &str,
        body: Option<&Value>,
    ) -> CliResult<Value> {
        let bearer = self.bearer().await?;
        let mut reply = self
            .http
            .send(route.method(), path, Some(&bearer), body, &[])
            .await?;
        if reply.status == StatusCode::UNAUTHORIZED
            && matches!(self.config.credential, Credential::Session { .. })
        {
            self.refresh().await?;
            let bearer = self.config.credential.bearer().to_owned();
            reply = self
                .http
                .send(route.method(), path, Some(&bearer), body, &[])
                .await?;
        }
        json_of(reply)
    }

    pub async fn get(&mut self, route: Route, path: &str) -> CliResult<Value> {
        self.call(route, path, None).await
    }

    /// Every item of the list at `path` (ending in `?` or `&`, after any
    /// filters of its own), page by page.
    pub async fn every_page(&mut self, route: Route, path: &str) -> CliResult<Vec<Value>> {
        let mut items = Vec::new();
        let mut cursor = String::new();
        loop {
            let page = self
                .get(route, &format!("{path}limit=200&cursor={cursor}"))
                .await?;
            if let Value::Array(found) = &page["items"] {
                items.extend(found.iter().cloned());
            }
            match page["next_cursor"].as_str() {
                Some(next) if !next.is_empty() => cursor = next.to_owned(),
                _ => return Ok(items),
            }
        }
    }

    pub async fn typed<T: DeserializeOwned>(&mut self, route: Route, path: &str) -> CliResult<T> {
        let value = self.get(route, path).await?;
        read(value)
    }

    /// Exchanges the session's refresh token for a new pair, holding the
    /// config's lock: a command that waited for it finds the pair another
    /// one got and uses that instead.
    async fn refresh(&mut self) -> CliResult<()> {
        let Some(path) = self.path.clone() else {
            return Ok(());
        };
        let _lock = config::lock(&path)?;
        // Another command may have refreshed while this one waited.
        if let Some(Config {
            credential: stored @ Credential::Session { .. },
            ..
        }) = config::load(&path)?
        {
            let same = stored.bearer() == self.config.credential.bearer();
            self.config.credential = stored;
            if !same && !self.config.credential.expiring() {
                return Ok(());
            }
        }
        let Credential::Session {
            email,
            refresh_token,
            ..
        } = &self.config.credential
        else {
            return Ok(());
        };
        let reply = self
            .http
            .send(
                routes::REFRESH.method(),
                routes::REFRESH.template,
                None,
                None,
                &[(COOKIE, format!("{REFRESH_COOKIE}={refresh_token}"))],
            )
            .await?;
        if reply.status == StatusCode::UNAUTHORIZED {
            return Err(CliError::Local(format!(
                "the sign-in of {email} has ended: run `gantry-cli login` again"
            )));
        }
        let email = email.clone();
        self.config.credential = session_from(email, reply)?;
        config::save(&path, &self.config)
    }

    /// The organization commands act in: `--org` (a name or id), else the
    /// one chosen at login, else an API key's own.
    pub async fn org_id(&mut self) -> CliResult<Uuid> {
        let Some(wanted) = self.org.clone() else {
            if let Some(id) = self.config.org_id {
                return Ok(id);
            }
            let me: Me = self.typed(routes::ME, routes::ME.template).await?;
            return me
                .api_key
                .map(|key| key.org_id)
                .or_else(|| me.memberships.first().map(|m| m.organization.id))
                .ok_or_else(|| CliError::Local("you belong to no organization".into()));
        };
        if let Ok(id) = wanted.parse() {
            return Ok(id);
        }
        let me: Me = self.typed(routes::ME, routes::ME.template).await?;
        me.memberships
            .iter()
            .find(|m| m.organization.name.eq_ignore_ascii_case(&wanted))
            .map(|m| m.organization.id)
            .ok_or_else(|| {
                let names: Vec<&str> = me
                    .memberships
                    .iter()
                    .map(|m| m.organization.name.as_str())
                    .collect();
                CliError::Usage(format!(
                    "you are not a member of an organization called {wanted:?}; yours: {}",
                    names.join(", ")
                ))
            })
    }
}

/// The session a login or refresh answered: its access token and the
/// refresh token from its `Set-Cookie`.
pub fn session_from(email: String, reply: Reply) -> CliResult<Credential> {
    let refresh_token = reply
        .headers
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find_map(|cookie| {
            let (pair, _) = cookie.split_once(';').unwrap_or((cookie, ""));
            pair.trim()
                .strip_prefix(REFRESH_COOKIE)
                .and_then(|rest| rest.strip_prefix('='))
                .map(str::to_owned)
        });
    let token: TokenResponse = read(json_of(reply)?)?;
    let refresh_token = refresh_token.ok_or_else(|| {
        CliError::Transport("the server answered a sign-in without a refresh token".into())
    })?;
    Ok(Credential::Session {
        email,
        access_token: token.access_token,
        expires_at: Utc::now() + TimeDelta::seconds(token.expires_in),
        refresh_token,
    })
}

/// The JSON of a successful answer (`null` for an empty one), or the
/// problem it reports as an error.
pub fn json_of(reply: Reply) -> CliResult<Value> {
    if reply.status.is_success() {
        if reply.body.is_empty() {
            return Ok(Value::Null);
        }
        return serde_json::from_slice(&reply.body)
            .map_err(|e| CliError::Transport(format!("the server's answer is not JSON: {e}")));
    }
    let status = reply.status.as_u16();
    match serde_json::from_slice::<Problem>(&reply.body) {
        Ok(problem) => Err(CliError::Api {
            status,
            title: problem.title,
            detail: problem.detail,
            fields: problem
                .errors
                .into_iter()
                .map(|e| (e.field, e.message))
                .collect(),
        }),
        Err(_) => Err(CliError::Api {
            status,
            title: reply
                .status
                .canonical_reason()
                .unwrap_or("Error")
                .to_owned(),
            detail: String::from_utf8_lossy(&reply.body)
                .chars()
                .take(200)
                .collect(),
            fields: Vec::new(),
        }),
    }
}

pub fn read<T: DeserializeOwned>(value: Value) -> CliResult<T> {
    serde_json::from_value(value).map_err(|e| {
        CliError::Transport(format!(
            "the server's answer is not what this client reads: {e}"
        ))
    })
}
