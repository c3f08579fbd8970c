//! The manual: the book built from `docs/` (mdBook), served at `/docs`
//! beside the console, so its help links and an installation without a
//! way out both reach it.

use std::path::Path;

use axum::Router;
use axum::response::Redirect;
use axum::routing::get;
use tower_http::services::ServeDir;

/// The book's routes, or `None` when `dir` holds no built book.
pub fn routes<S: Clone + Send + Sync + 'static>(dir: &Path) -> Option<Router<S>> {
    if !dir.join("index.html").is_file() {
        return None;
    }
    // The book's pages link to each other relatively: `/docs` must be
    // `/docs/` for them to resolve inside it.
    Some(
        Router::new()
            .route("/docs", get(|| async { Redirect::permanent("/docs/") }))
            .nest_service("/docs/", ServeDir::new(dir)),
    )
}
