//! The transport: HTTP/1.1 over TCP or TLS (the system's trusted roots,
//! ring for the cryptography), JSON in and out.
//!
//! Built on hyper rather than reqwest: reqwest's TLS features are unified
//! across a workspace, and turning them on here would change how the
//! server's and the agent's own clients pick a TLS provider.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue, USER_AGENT};
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::error::{CliError, CliResult};

/// How long one request may take; following a stream has no limit.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
const AGENT: &str = concat!("gantry-cli/", env!("CARGO_PKG_VERSION"));

pub struct Http {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    base: String,
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Http {
    /// A client for the server at `base` (`https://…`, or `http://…`).
    pub fn new(base: &str) -> CliResult<Self> {
        let base = base.trim_end_matches('/').to_owned();
        let uri: http::Uri = base
            .parse()
            .map_err(|e| CliError::Usage(format!("server URL {base:?}: {e}")))?;
        if !matches!(uri.scheme_str(), Some("https" | "http")) || uri.host().is_none() {
            return Err(CliError::Usage(format!(
                "server URL {base:?}: give it as https://host[:port]"
            )));
        }
        let mut roots = rustls::RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        for certificate in native.certs {
            roots.add(certificate).ok();
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| CliError::Local(format!("TLS setup: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        Ok(Self {
            client: Client::builder(TokioExecutor::new()).build(https),
            base,
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        bearer: Option<&str>,
        body: Option<&serde_json::Value>,
        headers: &[(HeaderName, String)],
    ) -> CliResult<Request<Full<Bytes>>> {
        let mut builder = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(USER_AGENT, AGENT)
            .header(ACCEPT, "application/json");
        if let Some(token) = bearer {
            builder = builder.header(AUTHORIZATION, format!("Bearer {token}"));
        }
        for (name, value) in headers {
            builder = builder.header(name, value);
        }
        let bytes = match body {
            Some(body) => {
                builder =
                    builder.header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                Bytes::from(serde_json::to_vec(body).map_err(|e| CliError::Local(e.to_string()))?)
            }
            None => Bytes::new(),
        };
        builder
            .body(Full::new(bytes))
            .map_err(|e| CliError::Usage(format!("request to {path}: {e}")))
    }

    pub async fn send(
        &self,
        method: Method,
        path: &str,
        bearer: Option<&str>,
        body: Option<&serde_json::Value>,
        headers: &[(HeaderName, String)],
    ) -> CliResult<Reply> {
        let request = self.request(method, path, bearer, body, headers)?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| self.unreachable(&e))?;
            let (parts, body) = response.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|e| {
                    CliError::Transport(format!("reading the answer from {}: {e}", self.base))
                })?
                .to_bytes();
            Ok(Reply {
                status: parts.status,
                headers: parts.headers,
                body,
            })
        };
        tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| {
                CliError::Transport(format!(
                    "{} did not answer within {} s",
                    self.base,
                    REQUEST_TIMEOUT.as_secs()
                ))
            })?
    }

    /// A GET whose answer is read as it arrives (server-sent events).
    pub async fn open_stream(
        &self,
        path: &str,
        bearer: &str,
    ) -> CliResult<http::Response<Incoming>> {
        let request = self.request(
            Method::GET,
            path,
            Some(bearer),
            None,
            &[(ACCEPT, "text/event-stream".into())],
        )?;
        self.client
            .request(request)
            .await
            .map_err(|e| self.unreachable(&e))
    }

    fn unreachable(&self, error: &hyper_util::client::legacy::Error) -> CliError {
        let mut cause = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(inner) = source {
            cause = format!("{cause}: {inner}");
            source = inner.source();
        }
        CliError::Transport(format!("could not reach {}: {cause}", self.base))
    }
}
