//! Single sign-on against a real, certified OpenID provider (the
//! `oidc-provider` package in its own Node.js process): the authorization
//! code flow with PKCE and a nonce end to end, accounts linked by verified
//! email or made just in time with the memberships their claims map to,
//! and each refusal (a wrong audience, a replayed, unknown or lapsed
//! state, an unverified email, a disallowed domain) sending the browser back to the
//! sign-in page with its reason and signing no one in.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use gantry_core::config::oidc::{ClaimMembership, Provider};
use gantry_types::roles::OrgRole;
use reqwest::StatusCode;
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use serde_json::{Value, json};

use crate::support::{Engine, PASSWORD, TestServer};

crate::on_both_engines!(
    a_provider_signs_people_in_and_every_bad_way_back_is_refused,
    with_password_sign_in_off_only_providers_let_anyone_in,
);

const CLIENT_ID: &str = "gantry";
const CLIENT_SECRET: &str = "a client secret for tests";

/// The provider's script and its packages, installed once from npm.
fn provider_dir() -> &'static Path {
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("oidc");
        if !dir.join("node_modules/oidc-provider").exists() {
            let installed = Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--silent"])
                .current_dir(&dir)
                .status()
                .expect("npm");
            assert!(
                installed.success(),
                "could not install the OpenID provider from npm"
            );
        }
        dir
    })
}

struct Idp {
    child: Child,
    /// Kept open: the provider writes to its standard output later, and a
    /// closed pipe would end it.
    _output: BufReader<std::process::ChildStdout>,
    issuer: String,
}

impl Drop for Idp {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

impl Idp {
    fn start() -> Self {
        let dir = provider_dir();
        let mut child = Command::new("node")
            .arg(dir.join("provider.mjs"))
            .args([CLIENT_ID, CLIENT_SECRET])
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the OpenID provider");
        let mut output = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        output.read_line(&mut line).expect("its port");
        let port: u16 = line.trim().parse().expect("a port");
        Self {
            child,
            _output: output,
            issuer: format!("http://127.0.0.1:{port}"),
        }
    }

    /// Who signs in next.
    async fn next(&self, account: Value) {
        let answer = reqwest::Client::new()
            .post(format!("{}/control/next", self.issuer))
            .json(&account)
            .send()
            .await
            .expect("control");
        assert_eq!(answer.status(), StatusCode::NO_CONTENT);
    }

    async fn wrong_audience(&self, on: bool) {
        reqwest::Client::new()
            .post(format!("{}/control/wrong-audience", self.issuer))
            .json(&json!({ "on": on }))
            .send()
            .await
            .expect("control");
    }

    fn provider(&self, memberships: Vec<ClaimMembership>) -> Provider {
        Provider {
            name: "corp".into(),
            display_name: "Corp SSO".into(),
            issuer_url: self.issuer.clone(),
            client_id: CLIENT_ID.into(),
            client_secret: CLIENT_SECRET.into(),
            allowed_domains: vec!["example.com".into()],
            org_claim: Some("groups".into()),
            memberships,
        }
    }
}

/// A browser without JavaScript: follows redirects by hand, keeping each
/// site's cookies and sending each only to its path.
struct Browser {
    http: reqwest::Client,
    /// Per site, per (path, name): the value.
    cookies: BTreeMap<String, BTreeMap<(String, String), String>>,
}

impl Browser {
    fn new() -> Self {
        Self {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
            cookies: BTreeMap::new(),
        }
    }

    fn site(url: &str) -> String {
        url.splitn(4, '/').take(3).collect::<Vec<_>>().join("/")
    }

    async fn get(&mut self, url: &str) -> reqwest::Response {
        let site = Self::site(url);
        let path = url[site.len()..]
            .split('?')
            .next()
            .unwrap_or("/")
            .to_owned();
        let jar = self.cookies.entry(site).or_default();
        let cookie = jar
            .iter()
            .filter(|((scope, _), _)| path.starts_with(scope.as_str()))
            .map(|((_, name), value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join("; ");
        let mut request = self.http.get(url);
        if !cookie.is_empty() {
            request = request.header(COOKIE, cookie);
        }
        let answer = request.send().await.expect("GET");
        for value in answer.headers().get_all(SET_COOKIE) {
            let text = value.to_str().unwrap_or_default();
            let mut parts = text.split(';').map(str::trim);
            let pair = parts.next().unwrap_or_default();
            let scope = parts
                .find_map(|a| a.strip_prefix("path=").or_else(|| a.strip_prefix("Path=")))
                .unwrap_or("/")
                .to_owned();
            if let Some((name, value)) = pair.split_once('=') {
                jar.insert((scope, name.to_owned()), value.to_owned());
            }
        }
        answer
    }

    /// Starts at `url` and follows redirects until one leads back to
    /// `server`'s callback: answers that callback URL.
    async fn follow_to_callback(&mut self, server: &TestServer, url: &str) -> String {
        let mut url = url.to_owned();
        for _ in 0..12 {
            let answer = self.get(&url).await;
            assert_eq!(
                answer.status(),
                StatusCode::SEE_OTHER,
                "{url}: {}",
                answer.status()
            );
            let location = answer.headers()[LOCATION]
                .to_str()
                .expect("location")
                .to_owned();
            let next = if location.starts_with('/') {
                format!("{}{location}", Self::site(&url))
            } else {
                location
            };
            if next.starts_with(&server.base) && next.contains("/callback") {
                return next;
            }
            url = next;
        }
        panic!("the provider never sent the browser back");
    }

    /// The way back: where the server sends the browser, and the refresh
    /// cookie it set, if any.
    async fn back(&mut self, callback: &str) -> (String, Option<String>) {
        let answer = self.get(callback).await;
        assert_eq!(answer.status(), StatusCode::SEE_OTHER);
        let location = answer.headers()[LOCATION]
            .to_str()
            .expect("location")
            .to_owned();
        let refresh = answer
            .headers()
            .get_all(SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(|v| v.strip_prefix("gantry_refresh="))
            .map(|v| v.split(';').next().unwrap_or_default().to_owned())
            .filter(|v| !v.is_empty());
        (location, refresh)
    }
}

/// A whole sign-in from the console's button: where it ends and the
/// session's refresh token.
async fn sign_in(server: &TestServer, next: &str) -> (String, Option<String>, String) {
    let mut browser = Browser::new();
    let callback = browser
        .follow_to_callback(
            server,
            &server.url(&format!("/api/v1/auth/oidc/corp/start?next={next}")),
        )
        .await;
    let (location, refresh) = browser.back(&callback).await;
    (location, refresh, callback)
}

async fn sign_in_options(server: &TestServer) -> crate::support::Reply {
    server
        .call(
            reqwest::Method::GET,
            "/api/v1/auth/sign-in-options",
            None,
            None,
        )
        .await
}

/// An access token for the session behind a refresh token.
async fn access(server: &TestServer, refresh: &str) -> String {
    let token: Value = server
        .http
        .post(server.url("/api/v1/auth/refresh"))
        .header(COOKIE, format!("gantry_refresh={refresh}"))
        .send()
        .await
        .expect("refresh")
        .json()
        .await
        .expect("token");
    token["access_token"]
        .as_str()
        .expect("access token")
        .to_owned()
}

/// The signed-in user behind a refresh token, through `/auth/refresh`.
async fn me(server: &TestServer, refresh: &str) -> Value {
    let me = server
        .get("/api/v1/me", &access(server, refresh).await)
        .await;
    me.expect(StatusCode::OK);
    me.body.clone()
}

async fn a_provider_signs_people_in_and_every_bad_way_back_is_refused(engine: Engine) {
    let idp = Idp::start();
    let first = TestServer::start(engine).await;
    let team = first.signup("team").await;
    let existing = first.signup("existing").await;
    let server = first
        .replica(|config| {
            config.oidc_providers = vec![idp.provider(vec![ClaimMembership {
                claim_value: "ml-team".into(),
                org_id: team.org_id,
                role: OrgRole::Member,
            }])];
        })
        .await;

    // The console learns how people may sign in.
    let options = sign_in_options(&server).await;
    options.expect(StatusCode::OK);
    assert_eq!(options.body["password"], true);
    assert_eq!(options.body["providers"][0]["display_name"], "Corp SSO");
    assert_eq!(
        options.body["providers"][0]["start_url"],
        "/api/v1/auth/oidc/corp/start"
    );

    // A new person: made just in time, a member of the team their claim
    // names, back on the page they started from.
    idp.next(
        json!({ "sub": "ada-1", "email": "Ada@Example.com", "email_verified": true,
                     "name": "Ada Lovelace", "groups": ["ml-team", "unmapped"] }),
    )
    .await;
    let users_before = server.count("SELECT COUNT(*) AS n FROM users").await;
    let (location, refresh, callback) = sign_in(&server, "/orders").await;
    assert_eq!(location, "/orders");
    let token = access(&server, &refresh.expect("a session")).await;
    let ada = server.get("/api/v1/me", &token).await;
    ada.expect(StatusCode::OK);
    let ada = ada.body.clone();
    assert_eq!(ada["user"]["email"], "ada@example.com");
    // No password to change either: the console offers none.
    assert_eq!(ada["user"]["has_password"], false);
    server
        .post(
            "/api/v1/me/password",
            &token,
            json!({ "current_password": "", "new_password": "copper meadow falcon 58" }),
        )
        .await
        .expect_problem(StatusCode::CONFLICT, "no_password");
    assert_eq!(ada["user"]["name"], "Ada Lovelace");
    assert_eq!(
        ada["memberships"].as_array().map(Vec::len),
        Some(1),
        "{ada:#}"
    );
    assert_eq!(
        ada["memberships"][0]["organization"]["id"],
        json!(team.org_id)
    );
    assert_eq!(ada["memberships"][0]["role"], "member");
    assert_eq!(
        server.count("SELECT COUNT(*) AS n FROM users").await,
        users_before + 1
    );
    // Such a user has no password to sign in with.
    server
        .login("ada@example.com", "")
        .await
        .expect(StatusCode::UNAUTHORIZED);

    // The same way back twice: the state was used.
    let mut replay = Browser::new();
    let (location, refresh) = replay.back(&callback).await;
    assert_eq!(
        location,
        "/sign-in?sso_error=state_invalid&sso_provider=corp"
    );
    assert!(refresh.is_none());
    let (location, _) = replay
        .back(&server.url("/api/v1/auth/oidc/corp/callback?code=x&state=never-issued"))
        .await;
    assert!(location.contains("sso_error=state_invalid"), "{location}");

    // Someone who signed up with a password is linked by verified email,
    // and is the same user the next time whatever their email says.
    idp.next(json!({ "sub": "existing-1", "email": existing.email, "email_verified": true }))
        .await;
    let (_, refresh, _) = sign_in(&server, "/").await;
    let linked = me(&server, &refresh.expect("a session")).await;
    assert_eq!(linked["user"]["id"], json!(existing.user_id));

    // Each refusal: back to the sign-in page with why, no one signed in,
    // no user made.
    let users = server.count("SELECT COUNT(*) AS n FROM users").await;
    let refusals = [
        (
            json!({ "sub": "eve-1", "email": "eve@example.com", "email_verified": false }),
            false,
            "email_unverified",
        ),
        (
            json!({ "sub": "eve-2", "email": "eve@elsewhere.test", "email_verified": true }),
            false,
            "domain_not_allowed",
        ),
        (
            json!({ "sub": "eve-3", "email": "eve3@example.com", "email_verified": true }),
            true,
            "token_invalid",
        ),
    ];
    for (account, wrong_audience, reason) in refusals {
        idp.next(account).await;
        idp.wrong_audience(wrong_audience).await;
        let (location, refresh, _) = sign_in(&server, "/").await;
        assert_eq!(
            location,
            format!("/sign-in?sso_error={reason}&sso_provider=corp")
        );
        assert!(refresh.is_none(), "{reason}: no session");
    }
    idp.wrong_audience(false).await;
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM users").await, users);

    // An unknown provider is a problem, and the way out goes nowhere else.
    server
        .call(
            reqwest::Method::GET,
            "/api/v1/auth/oidc/nobody/start",
            None,
            None,
        )
        .await
        .expect_problem(StatusCode::NOT_FOUND, "identity_provider_not_found");
    idp.next(json!({ "sub": "ada-1", "email": "ada@example.com", "email_verified": true }))
        .await;
    let (location, _, _) = sign_in(&server, "//evil.example/steal").await;
    assert_eq!(location, "/");

    // Back after the ten minutes a sign-in may take: lapsed.
    let mut late = Browser::new();
    let callback = late
        .follow_to_callback(&server, &server.url("/api/v1/auth/oidc/corp/start"))
        .await;
    server.state.clock.advance(chrono::TimeDelta::minutes(11));
    let (location, refresh) = late.back(&callback).await;
    assert_eq!(
        location,
        "/sign-in?sso_error=state_invalid&sso_provider=corp"
    );
    assert!(refresh.is_none());
}

async fn with_password_sign_in_off_only_providers_let_anyone_in(engine: Engine) {
    let idp = Idp::start();
    let server = TestServer::start_with(engine, |config| {
        config.password_sign_in = false;
        config.oidc_providers = vec![idp.provider(Vec::new())];
    })
    .await;
    let options = sign_in_options(&server).await;
    assert_eq!(options.body["password"], false);
    server
        .call(
            reqwest::Method::POST,
            "/api/v1/auth/signup",
            None,
            Some(json!({ "email": "x@example.com", "password": PASSWORD, "name": "X", "organization": "X" })),
        )
        .await
        .expect_problem(StatusCode::FORBIDDEN, "password_sign_in_disabled");
    server
        .login("x@example.com", PASSWORD)
        .await
        .expect_problem(StatusCode::FORBIDDEN, "password_sign_in_disabled");
    idp.next(json!({ "sub": "grace-1", "email": "grace@example.com", "email_verified": true }))
        .await;
    let (location, refresh, _) = sign_in(&server, "/").await;
    assert_eq!(location, "/");
    let grace = me(&server, &refresh.expect("a session")).await;
    assert_eq!(grace["user"]["email"], "grace@example.com");
    assert_eq!(grace["memberships"], json!([]));
}
