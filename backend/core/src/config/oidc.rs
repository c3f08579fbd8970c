//! The OpenID providers users may sign in with, as the configuration lists
//! them, and the checks that refuse unworkable or unsafe ones at start.

use std::fmt;

use anyhow::Context as _;
use gantry_types::roles::OrgRole;
use serde::Deserialize;
use uuid::Uuid;

/// An OpenID provider users may sign in with.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provider {
    /// In URLs: lowercase letters, digits and hyphens.
    pub name: String,
    /// On the console's button: "Sign in with {display_name}".
    pub display_name: String,
    /// The issuer, whose `/.well-known/openid-configuration` describes it.
    pub issuer_url: String,
    pub client_id: String,
    pub client_secret: String,
    /// Email domains allowed to sign in; any when empty.
    #[serde(default)]
    pub allowed_domains: Vec<String>,
    /// The ID token claim (a string or a list of strings, such as
    /// `groups`) whose values `memberships` map to organizations.
    #[serde(default)]
    pub org_claim: Option<String>,
    #[serde(default)]
    pub memberships: Vec<ClaimMembership>,
}

/// A user whose `org_claim` holds `claim_value` is made a member of
/// `org_id` with `role` when they sign in, unless they already are one.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimMembership {
    pub claim_value: String,
    pub org_id: Uuid,
    pub role: OrgRole,
}

impl fmt::Debug for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Provider")
            .field("name", &self.name)
            .field("issuer_url", &self.issuer_url)
            .field("client_id", &self.client_id)
            .field("client_secret", &"<set>")
            .field("allowed_domains", &self.allowed_domains)
            .field("org_claim", &self.org_claim)
            .field("memberships", &self.memberships)
            .finish()
    }
}

impl Provider {
    /// Whether `email`'s domain may sign in through this provider.
    pub fn allows(&self, email: &str) -> bool {
        let domain = email.rsplit_once('@').map_or("", |(_, d)| d);
        self.allowed_domains.is_empty()
            || self
                .allowed_domains
                .iter()
                .any(|allowed| allowed.eq_ignore_ascii_case(domain))
    }
}

/// Refuses a configuration whose providers could not work or would be
/// unsafe: bad names, an issuer over plain HTTP anywhere but loopback,
/// owners made by a claim.
pub fn check_providers(providers: &[Provider]) -> anyhow::Result<()> {
    let mut names = std::collections::HashSet::new();
    for provider in providers {
        let name = &provider.name;
        anyhow::ensure!(
            !name.is_empty()
                && name.len() <= 64
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "oidc_providers: {name:?} must be lowercase letters, digits and hyphens"
        );
        anyhow::ensure!(
            names.insert(name),
            "oidc_providers: {name:?} is listed twice"
        );
        let issuer = url::Url::parse(&provider.issuer_url)
            .with_context(|| format!("oidc_providers.{name}.issuer_url"))?;
        let loopback = matches!(issuer.host(), Some(url::Host::Domain("localhost")))
            || matches!(issuer.host(), Some(url::Host::Ipv4(ip)) if ip.is_loopback())
            || matches!(issuer.host(), Some(url::Host::Ipv6(ip)) if ip.is_loopback());
        anyhow::ensure!(
            issuer.scheme() == "https" || (issuer.scheme() == "http" && loopback),
            "oidc_providers.{name}.issuer_url must be https:// (http:// only on loopback)"
        );
        anyhow::ensure!(
            !provider.client_id.is_empty() && !provider.display_name.is_empty(),
            "oidc_providers.{name} needs a client_id and a display_name"
        );
        anyhow::ensure!(
            provider
                .memberships
                .iter()
                .all(|m| m.role != OrgRole::Owner),
            "oidc_providers.{name}.memberships may not make owners"
        );
        anyhow::ensure!(
            provider.memberships.is_empty() || provider.org_claim.is_some(),
            "oidc_providers.{name}.memberships needs org_claim"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(name: &str, issuer: &str) -> Provider {
        Provider {
            name: name.into(),
            display_name: "Corp".into(),
            issuer_url: issuer.into(),
            client_id: "gantry".into(),
            client_secret: "secret".into(),
            allowed_domains: vec!["Example.com".into()],
            org_claim: None,
            memberships: Vec::new(),
        }
    }

    #[test]
    fn unsafe_or_unworkable_providers_are_refused_at_start() {
        assert!(check_providers(&[provider("corp", "https://login.example.com")]).is_ok());
        assert!(check_providers(&[provider("dev", "http://127.0.0.1:5556")]).is_ok());
        for (bad, why) in [
            (
                vec![provider("corp", "http://login.example.com")],
                "plain http off loopback",
            ),
            (
                vec![provider("Corp SSO", "https://login.example.com")],
                "a name unfit for URLs",
            ),
            (
                vec![
                    provider("a", "https://x.example"),
                    provider("a", "https://y.example"),
                ],
                "a name twice",
            ),
        ] {
            assert!(check_providers(&bad).is_err(), "{why}");
        }
        let mut owners = provider("corp", "https://login.example.com");
        owners.org_claim = Some("groups".into());
        owners.memberships = vec![ClaimMembership {
            claim_value: "admins".into(),
            org_id: Uuid::nil(),
            role: OrgRole::Owner,
        }];
        assert!(
            check_providers(&[owners]).is_err(),
            "owners made by a claim"
        );
    }

    #[test]
    fn domains_compare_without_case_and_the_secret_is_never_printed() {
        let corp = provider("corp", "https://login.example.com");
        assert!(corp.allows("ada@example.COM"));
        assert!(!corp.allows("ada@example.com.evil.test"));
        assert!(!format!("{corp:?}").contains("secret\""));
        assert!(format!("{corp:?}").contains("<set>"));
    }
}
