//! Signatures as the Standard Webhooks specification defines them: the
//! secret is `whsec_` and a base64 key; each signature is `v1,` and the
//! base64 HMAC-SHA256 of `{id}.{timestamp}.{body}` under that key; several
//! signatures (while a rotated secret overlaps its successor) are separated
//! by spaces.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

const PREFIX: &str = "whsec_";

/// Bytes of a generated key (the specification asks for 24 to 64).
const KEY_BYTES: usize = 32;

/// A new secret, `whsec_` and 32 random bytes in base64.
pub fn generate() -> String {
    let mut key = [0u8; KEY_BYTES];
    rand::Rng::fill_bytes(&mut rand::rng(), &mut key);
    format!("{PREFIX}{}", STANDARD.encode(key))
}

/// The key inside a secret; `None` when it is not `whsec_` and base64.
fn key(secret: &str) -> Option<Vec<u8>> {
    STANDARD.decode(secret.strip_prefix(PREFIX)?).ok()
}

/// `v1,` and the signature of one message under `secret`.
pub fn sign(secret: &str, id: &str, timestamp: i64, body: &str) -> Option<String> {
    let mut mac = Hmac::<Sha256>::new_from_slice(&key(secret)?).ok()?;
    mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
    Some(format!(
        "v1,{}",
        STANDARD.encode(mac.finalize().into_bytes())
    ))
}

/// The `webhook-signature` header: one signature per secret.
pub fn header<'s>(
    secrets: impl IntoIterator<Item = &'s str>,
    id: &str,
    timestamp: i64,
    body: &str,
) -> String {
    secrets
        .into_iter()
        .filter_map(|secret| sign(secret, id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test vector of the specification and its reference libraries.
    #[test]
    fn signs_the_specifications_test_vector() {
        let signature = sign(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            r#"{"test": 2432232314}"#,
        );
        assert_eq!(
            signature.as_deref(),
            Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        );
    }

    #[test]
    fn a_generated_secret_signs_and_a_malformed_one_does_not() {
        let secret = generate();
        assert!(secret.starts_with("whsec_"));
        assert_eq!(key(&secret).map(|k| k.len()), Some(KEY_BYTES));
        assert!(sign(&secret, "msg_1", 1, "{}").is_some());
        assert_eq!(sign("whsec_not base64!", "msg_1", 1, "{}"), None);
        assert_eq!(sign("secret", "msg_1", 1, "{}"), None);
    }

    #[test]
    fn an_overlapping_rotation_signs_with_both_secrets() {
        let (old, new) = (generate(), generate());
        let both = header([old.as_str(), new.as_str()], "msg_1", 7, "{}");
        let parts: Vec<&str> = both.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(Some(parts[0].to_owned()), sign(&old, "msg_1", 7, "{}"));
        assert_eq!(Some(parts[1].to_owned()), sign(&new, "msg_1", 7, "{}"));
    }
}
