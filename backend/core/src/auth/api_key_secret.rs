//! Bearer secrets: `<prefix><row id, 32 hex>_<secret, 43 base64url chars>`,
//! with `gk_` for API keys, `gj_` for node join tokens, `gn_` for node
//! credentials and `gr_` for browser sessions' refresh tokens.
//!
//! The id locates the row; only a SHA-256 of the secret is stored. A fast hash
//! is right here, unlike for passwords, because the secret is 256 random
//! bits: there is nothing to brute-force.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use uuid::Uuid;

const PREFIX: &str = "gk_";
/// Join tokens, with which an agent registers its node.
pub const JOIN_PREFIX: &str = "gj_";
/// Node credentials, with which a registered agent calls the agent API.
pub const NODE_PREFIX: &str = "gn_";
/// Refresh tokens, which renew a browser session.
pub const REFRESH_PREFIX: &str = "gr_";

pub struct NewApiKey {
    pub id: Uuid,
    /// Shown to the creator once, never stored.
    pub token: String,
    pub secret_hash: String,
}

pub fn generate() -> NewApiKey {
    generate_with(PREFIX, Uuid::now_v7())
}

/// A new secret of another kind, for the row `id`.
pub fn generate_with(prefix: &str, id: Uuid) -> NewApiKey {
    let mut secret = [0u8; 32];
    rand::Rng::fill_bytes(&mut rand::rng(), &mut secret);
    let secret = URL_SAFE_NO_PAD.encode(secret);
    NewApiKey {
        id,
        token: format!("{prefix}{}_{secret}", id.simple()),
        secret_hash: hash(&secret),
    }
}

/// Splits a presented token into the key id and the hash of its secret, or
/// `None` when it is not shaped like one of our keys.
pub fn parse(token: &str) -> Option<(Uuid, String)> {
    parse_with(PREFIX, token)
}

/// [`parse`] for a secret of another kind.
pub fn parse_with(prefix: &str, token: &str) -> Option<(Uuid, String)> {
    let rest = token.strip_prefix(prefix)?;
    let (id, secret) = rest.split_once('_')?;
    if id.len() != 32 || secret.len() != 43 {
        return None;
    }
    Some((Uuid::try_parse(id).ok()?, hash(secret)))
}

pub fn looks_like_api_key(token: &str) -> bool {
    token.starts_with(PREFIX)
}

/// Whether the token is one of the agent API's, which its own extractor
/// checks.
pub fn is_agent_secret(token: &str) -> bool {
    token.starts_with(JOIN_PREFIX) || token.starts_with(NODE_PREFIX)
}

fn hash(secret: &str) -> String {
    gantry_types::digest::sha256_hex(&[secret.as_bytes()])
}

/// Compares two hashes without an early exit, so timing says nothing about
/// how much of a guess was right.
pub fn hashes_match(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_key_parses_back() {
        let key = generate();
        let (id, hash) = parse(&key.token).expect("parses");
        assert_eq!(id, key.id);
        assert!(hashes_match(&hash, &key.secret_hash));
        assert!(!key.token.contains(&key.secret_hash));
    }

    #[test]
    fn malformed_keys_are_refused() {
        assert!(parse("gk_abc_def").is_none());
        assert!(parse("eyJhbGciOi.x.y").is_none());
        let key = generate();
        assert!(parse(&key.token[..key.token.len() - 1]).is_none());
        assert!(!hashes_match("ab", "abc"));
    }
}
