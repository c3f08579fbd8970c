//! The web console: the built single-page app served at `/`. A path that
//! names no file gets the app's `index.html`, so a reload or a shared link
//! of a console page opens that page; API paths never do.

use std::path::Path;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tower::ServiceExt as _;
use tower_http::services::{ServeDir, ServeFile};

use gantry_core::state::API_PREFIX;

/// The console loads nothing from elsewhere; the policy says so, which also
/// keeps injected scripts and frames out.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; img-src 'self' data:; \
     style-src 'self' 'unsafe-inline'; connect-src 'self'; object-src 'none'; \
     base-uri 'self'; form-action 'self'; frame-ancestors 'none'";

/// Vite names every file under `assets/` after its content hash.
const HASHED_PREFIX: &str = "/assets/";

#[derive(Clone)]
pub struct Console {
    files: ServeDir<ServeFile>,
}

impl Console {
    /// The console built into `dir`, or `None` when it holds no
    /// `index.html` (the console was not built).
    pub fn open(dir: &Path) -> Option<Self> {
        let index = dir.join("index.html");
        if !index.is_file() {
            return None;
        }
        Some(Self {
            files: ServeDir::new(dir)
                .precompressed_gzip()
                .fallback(ServeFile::new(index).precompressed_gzip()),
        })
    }

    pub async fn serve(self, request: Request) -> Response {
        let path = request.uri().path();
        if path == API_PREFIX || path.starts_with(&format!("{API_PREFIX}/")) {
            // Unknown API routes keep their problem+json 404.
            return StatusCode::NOT_FOUND.into_response();
        }
        let hashed = path.starts_with(HASHED_PREFIX);
        let response = match self.files.oneshot(request).await {
            Ok(response) => response.map(Body::new),
            Err(never) => match never {},
        };
        let mut response = response.into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static(if hashed {
                "public, max-age=31536000, immutable"
            } else {
                "no-cache"
            }),
        );
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        );
        headers.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        response
    }
}
