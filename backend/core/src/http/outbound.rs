//! Requests this server makes to others (webhook receivers, identity
//! providers): one TLS setup for all of them.

use std::sync::Arc;

use hyper_util::client::legacy::connect::HttpConnector;

/// TLS 1.2 and 1.3 with ring, trusting the web's roots (webpki-roots), so
/// that what is trusted does not depend on the host's certificate store.
fn tls() -> Result<rustls::ClientConfig, rustls::Error> {
    Ok(rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    })
    .with_no_client_auth())
}

/// `http` with TLS for `https://` URLs, speaking HTTP/1.1.
pub fn https<R>(
    http: HttpConnector<R>,
) -> Result<hyper_rustls::HttpsConnector<HttpConnector<R>>, rustls::Error> {
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls()?)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http))
}
