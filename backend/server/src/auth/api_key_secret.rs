//! API key tokens: `gk_<key id, 32 hex>_<secret, 43 base64url chars>`.
//!
//! The id locates the row; only a SHA-256 of the secret is stored. A fast hash
//! is right here, unlike for passwords, because the secret is 256 random
//! bits: there is nothing to brute-force.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use uuid::Uuid;

const PREFIX: &str = "gk_";

pub struct NewApiKey {
    pub id: Uuid,
    /// Shown to the creator once, never stored.
    pub token: String,
    pub secret_hash: String,
}

pub fn generate() -> NewApiKey {
    let id = Uuid::now_v7();
    let mut secret = [0u8; 32];
    rand::Rng::fill_bytes(&mut rand::rng(), &mut secret);
    let secret = URL_SAFE_NO_PAD.encode(secret);
    NewApiKey {
        id,
        token: format!("{PREFIX}{}_{secret}", id.simple()),
        secret_hash: hash(&secret),
    }
}

/// Splits a presented token into the key id and the hash of its secret, or
/// `None` when it is not shaped like one of our keys.
pub fn parse(token: &str) -> Option<(Uuid, String)> {
    let rest = token.strip_prefix(PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    if id.len() != 32 || secret.len() != 43 {
        return None;
    }
    Some((Uuid::try_parse(id).ok()?, hash(secret)))
}

pub fn looks_like_api_key(token: &str) -> bool {
    token.starts_with(PREFIX)
}

fn hash(secret: &str) -> String {
    crate::digest::sha256_hex(&[secret.as_bytes()])
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
