//! Where deliveries may go. A URL must be `https://` (plain `http://` only
//! towards loopback, and only when the operator allows it), carry no
//! credentials, and resolve to public addresses only: private, loopback,
//! link-local and other special addresses are refused unless an operator
//! lists their network. The check runs at registration and again at every
//! connection, on the addresses the name resolves to then, so a name that
//! later points inside the network (DNS rebinding) reaches nothing.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::dns::Name;

use ipnet::IpNet;
use url::{Host, Url};

/// Longest URL an endpoint may have.
pub const MAX_URL_LENGTH: usize = 2048;

/// What may be reached, from the operator's settings.
#[derive(Debug, Clone, Default)]
pub struct Targets {
    allowed: Arc<Vec<IpNet>>,
    allow_http: bool,
}

/// Why a URL or an address is refused, in words for the caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the URL is not valid: {0}")]
    Malformed(String),
    #[error("the URL is longer than {MAX_URL_LENGTH} characters")]
    TooLong,
    #[error(
        "only https:// URLs are accepted (http:// only towards loopback, where the operator allows it)"
    )]
    Scheme,
    #[error("the URL must not carry a user name or password")]
    Credentials,
    #[error("the URL has no host")]
    NoHost,
    #[error(
        "{0} is a private, loopback, link-local or reserved address, which deliveries may not reach"
    )]
    Address(IpAddr),
}

impl Targets {
    pub fn new(allowed: Vec<IpNet>, allow_http: bool) -> Self {
        Self {
            allowed: Arc::new(allowed),
            allow_http,
        }
    }

    /// Whether a delivery may connect to `address`.
    pub fn permits(&self, address: IpAddr) -> bool {
        let address = address.to_canonical();
        is_public(address) || self.allowed.iter().any(|net| net.contains(&address))
    }

    /// The URL, checked for scheme, credentials and, where the host is an
    /// address, that address.
    pub fn check(&self, raw: &str) -> Result<Url, Refused> {
        if raw.len() > MAX_URL_LENGTH {
            return Err(Refused::TooLong);
        }
        let url = Url::parse(raw).map_err(|e| Refused::Malformed(e.to_string()))?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(Refused::Credentials);
        }
        let address = match url.host() {
            None => return Err(Refused::NoHost),
            Some(Host::Ipv4(v4)) => Some(IpAddr::V4(v4)),
            Some(Host::Ipv6(v6)) => Some(IpAddr::V6(v6)),
            Some(Host::Domain(_)) => None,
        };
        match url.scheme() {
            "https" => {}
            "http" if self.allow_http && address.is_some_and(|a| a.is_loopback()) => {}
            _ => return Err(Refused::Scheme),
        }
        if let Some(address) = address
            && !self.permits(address)
        {
            return Err(Refused::Address(address));
        }
        Ok(url)
    }

    /// The addresses a connection for `url` may use, out of `resolved`:
    /// all of them when every one is permitted, else the refusal (one bad
    /// answer refuses the name, so a mixed answer cannot be raced).
    pub fn filter(&self, resolved: Vec<SocketAddr>) -> Result<Vec<SocketAddr>, Refused> {
        match resolved.iter().find(|a| !self.permits(a.ip())) {
            Some(bad) => Err(Refused::Address(bad.ip())),
            None => Ok(resolved),
        }
    }
}

/// A resolver for the delivery client that refuses names resolving to
/// addresses deliveries may not reach.
#[derive(Clone)]
pub struct CheckedResolver(pub Targets);

type Resolving =
    Pin<Box<dyn Future<Output = std::io::Result<std::vec::IntoIter<SocketAddr>>> + Send>>;

impl tower_service::Service<Name> for CheckedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = Resolving;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let targets = self.0.clone();
        Box::pin(async move {
            let resolved: Vec<SocketAddr> =
                tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            targets
                .filter(resolved)
                .map(Vec::into_iter)
                .map_err(|refused| {
                    std::io::Error::new(std::io::ErrorKind::PermissionDenied, refused)
                })
        })
    }
}

fn is_public(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(v4: Ipv4Addr) -> bool {
    let [a, b, ..] = v4.octets();
    let shared = a == 100 && (64..128).contains(&b);
    let benchmarking = a == 198 && (b == 18 || b == 19);
    !(v4.is_private()
        || v4.is_loopback()
        || v4.is_link_local()
        || v4.is_unspecified()
        || v4.is_broadcast()
        || v4.is_multicast()
        || v4.is_documentation()
        || shared
        || benchmarking
        || a == 0
        || a >= 240)
}

fn is_public_v6(v6: Ipv6Addr) -> bool {
    let first = v6.segments()[0];
    let unique_local = first & 0xfe00 == 0xfc00;
    let link_local = first & 0xffc0 == 0xfe80;
    let documentation = first == 0x2001 && v6.segments()[1] == 0x0db8;
    !(v6.is_loopback()
        || v6.is_unspecified()
        || v6.is_multicast()
        || unique_local
        || link_local
        || documentation)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(allowed: &[&str], allow_http: bool) -> Targets {
        Targets::new(
            allowed
                .iter()
                .map(|n| n.parse().expect("network"))
                .collect(),
            allow_http,
        )
    }

    #[test]
    fn only_public_https_urls_pass_by_default() {
        let t = targets(&[], false);
        assert!(t.check("https://hooks.example.com/gantry").is_ok());
        assert!(t.check("https://203.0.113.9/x").is_err());
        for (url, refused) in [
            ("http://hooks.example.com/", Refused::Scheme),
            ("ftp://hooks.example.com/", Refused::Scheme),
            ("https://user:pw@hooks.example.com/", Refused::Credentials),
            (
                "https://127.0.0.1/",
                Refused::Address("127.0.0.1".parse().unwrap()),
            ),
            (
                "https://10.1.2.3/",
                Refused::Address("10.1.2.3".parse().unwrap()),
            ),
            (
                "https://169.254.169.254/latest",
                Refused::Address("169.254.169.254".parse().unwrap()),
            ),
            ("https://[::1]/", Refused::Address("::1".parse().unwrap())),
            (
                "https://[fd00::1]/",
                Refused::Address("fd00::1".parse().unwrap()),
            ),
            (
                "https://[::ffff:10.0.0.1]/",
                Refused::Address("::ffff:10.0.0.1".parse().unwrap()),
            ),
            (
                "https://100.64.0.1/",
                Refused::Address("100.64.0.1".parse().unwrap()),
            ),
        ] {
            assert_eq!(t.check(url).err(), Some(refused), "{url}");
        }
        assert!(matches!(t.check("not a url"), Err(Refused::Malformed(_))));
        assert_eq!(
            t.check(&format!("https://a.example/{}", "x".repeat(2048)))
                .err(),
            Some(Refused::TooLong)
        );
    }

    #[test]
    fn operators_open_networks_and_plain_http_to_loopback() {
        let t = targets(&["127.0.0.0/8"], true);
        assert!(t.check("http://127.0.0.1:9000/hook").is_ok());
        assert!(t.check("https://127.0.0.1:9000/hook").is_ok());
        assert_eq!(
            t.check("http://hooks.example.com/").err(),
            Some(Refused::Scheme)
        );
        assert_eq!(
            t.check("https://10.0.0.1/").err(),
            Some(Refused::Address("10.0.0.1".parse().unwrap()))
        );
        let closed = targets(&[], true);
        assert_eq!(
            closed.check("http://127.0.0.1:9000/").err(),
            Some(Refused::Address("127.0.0.1".parse().unwrap()))
        );
    }

    #[test]
    fn a_name_resolving_to_any_refused_address_is_refused() {
        let t = targets(&[], false);
        let public: SocketAddr = "93.184.215.14:443".parse().unwrap();
        let inside: SocketAddr = "192.168.1.5:443".parse().unwrap();
        assert_eq!(t.filter(vec![public]), Ok(vec![public]));
        assert_eq!(
            t.filter(vec![public, inside]),
            Err(Refused::Address(inside.ip()))
        );
    }
}
