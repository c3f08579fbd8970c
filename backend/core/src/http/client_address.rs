//! The address a request came from. Behind a load balancer or reverse proxy
//! every connection comes from the proxy and the client is named in
//! `X-Forwarded-For`, which anyone can write. The header is believed only
//! on a connection from a configured proxy, and read from the right: the
//! first address that is not itself a trusted proxy is the client's. Rate
//! limits, sign-in throttling and audit rows all use this one address.

use std::net::{IpAddr, SocketAddr};

use anyhow::Context;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use ipnet::IpNet;

use crate::state::AppState;

/// The client's address, as resolved for this request.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddress(pub IpAddr);

/// The proxies whose `X-Forwarded-For` is believed.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Vec<IpNet>);

/// Networks from a configuration list of addresses (`10.0.0.7`) and
/// networks (`10.0.0.0/8`); `what` names an entry in the error.
pub fn networks(entries: &[String], what: &str) -> anyhow::Result<Vec<IpNet>> {
    entries
        .iter()
        .map(|entry| {
            let entry = entry.trim();
            entry
                .parse::<IpNet>()
                .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
                .with_context(|| format!("{what} {entry:?} is neither an address nor a network"))
        })
        .collect()
}

impl TrustedProxies {
    /// From addresses (`10.0.0.7`) and networks (`10.0.0.0/8`).
    pub fn parse(entries: &[String]) -> anyhow::Result<Self> {
        networks(entries, "trusted proxy").map(Self)
    }

    fn trusts(&self, address: IpAddr) -> bool {
        let address = address.to_canonical();
        self.0.iter().any(|net| net.contains(&address))
    }

    /// The client behind `peer`.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        if !self.trusts(peer) {
            return peer;
        }
        let mut hops = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .collect::<Vec<_>>()
            .into_iter()
            .rev();
        let mut client = peer;
        for hop in hops.by_ref() {
            // Anything unreadable ends the chain: what lies left of it
            // cannot be told from a forgery.
            let Ok(address) = hop.parse::<IpAddr>() else {
                break;
            };
            client = address;
            if !self.trusts(address) {
                break;
            }
        }
        client
    }
}

/// Resolves the client's address once, for every layer and handler after.
pub async fn resolve(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    if let Some(ConnectInfo(peer)) = request.extensions().get::<ConnectInfo<SocketAddr>>() {
        let client = state.trusted_proxies.client(peer.ip(), request.headers());
        request.extensions_mut().insert(ClientAddress(client));
    }
    next.run(request).await
}

/// The request's client address, once [`resolve`] has run.
pub fn of(request: &Request) -> Option<IpAddr> {
    request.extensions().get::<ClientAddress>().map(|c| c.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(forwarded: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in forwarded {
            headers.append("x-forwarded-for", value.parse().expect("header"));
        }
        headers
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("address")
    }

    #[test]
    fn the_header_counts_only_from_a_trusted_proxy() {
        let trusted =
            TrustedProxies::parse(&["10.0.0.0/8".into(), "192.0.2.1".into()]).expect("valid");
        let forged = headers(&["203.0.113.9"]);
        assert_eq!(
            trusted.client(ip("198.51.100.4"), &forged),
            ip("198.51.100.4")
        );
        assert_eq!(trusted.client(ip("192.0.2.1"), &forged), ip("203.0.113.9"));
        assert_eq!(
            TrustedProxies::default().client(ip("10.1.2.3"), &forged),
            ip("10.1.2.3")
        );
    }

    #[test]
    fn the_client_is_the_rightmost_address_no_proxy_of_ours_added() {
        let trusted = TrustedProxies::parse(&["10.0.0.0/8".into()]).expect("valid");
        // A client that writes its own header cannot hide behind it.
        let chain = headers(&["1.1.1.1, 203.0.113.9", "10.0.0.5"]);
        assert_eq!(trusted.client(ip("10.0.0.1"), &chain), ip("203.0.113.9"));
        // Only proxies: the leftmost is the best there is.
        let internal = headers(&["10.0.0.9, 10.0.0.5"]);
        assert_eq!(trusted.client(ip("10.0.0.1"), &internal), ip("10.0.0.9"));
        // Garbage stops the walk at the last address read.
        let garbage = headers(&["203.0.113.9, not-an-address, 10.0.0.5"]);
        assert_eq!(trusted.client(ip("10.0.0.1"), &garbage), ip("10.0.0.5"));
        assert_eq!(
            trusted.client(ip("10.0.0.1"), &headers(&[])),
            ip("10.0.0.1")
        );
        // IPv4 connections over an IPv6 socket match IPv4 networks.
        assert_eq!(
            trusted.client(ip("::ffff:10.0.0.1"), &chain),
            ip("203.0.113.9")
        );
    }

    #[test]
    fn bad_entries_are_refused_by_name() {
        let error = TrustedProxies::parse(&["10.0.0.0/33".into()]).expect_err("invalid");
        assert!(error.to_string().contains("10.0.0.0/33"), "{error}");
    }
}
