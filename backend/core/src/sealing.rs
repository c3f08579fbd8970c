//! Values a tenant gives once and never sees again (registry passwords,
//! secret job variables): stored sealed with AES-256-GCM under a key
//! derived from the server's secret for each purpose, bound to what they
//! belong to, and opened only to hand a node what its work needs.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};

/// Seals and opens values with a key of one purpose.
#[derive(Clone)]
pub struct Sealer {
    key: std::sync::Arc<LessSafeKey>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer")
    }
}

impl Sealer {
    /// A key of its own for `purpose`, derived from the server's secret so
    /// replicas sharing the secret open each other's seals, and a seal of
    /// one purpose never opens as another's.
    pub fn new(server_secret: &[u8], purpose: &str) -> anyhow::Result<Self> {
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(server_secret)
            .map_err(|e| anyhow::anyhow!("deriving the key for {purpose}: {e}"))?;
        mac.update(purpose.as_bytes());
        let derived = mac.finalize().into_bytes();
        let key = UnboundKey::new(&AES_256_GCM, &derived)
            .map_err(|_| anyhow::anyhow!("deriving the key for {purpose}"))?;
        Ok(Self {
            key: std::sync::Arc::new(LessSafeKey::new(key)),
        })
    }

    /// `nonce ‖ ciphertext ‖ tag`, base64; `context` (what the value
    /// belongs to) must be given again to open it.
    pub fn seal(&self, plain: &str, context: &str) -> anyhow::Result<String> {
        let mut nonce = [0u8; NONCE_LEN];
        rand::Rng::fill_bytes(&mut rand::rng(), &mut nonce);
        let mut data = plain.as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(context.as_bytes()),
                &mut data,
            )
            .map_err(|_| anyhow::anyhow!("sealing a value"))?;
        let mut all = nonce.to_vec();
        all.extend(data);
        Ok(STANDARD.encode(all))
    }

    /// The value, or None where the seal does not open (another server
    /// secret or purpose, or a seal copied to what it does not belong to).
    pub fn open(&self, sealed: &str, context: &str) -> Option<String> {
        let mut all = STANDARD.decode(sealed).ok()?;
        if all.len() < NONCE_LEN {
            return None;
        }
        let mut data = all.split_off(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(&all).ok()?;
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(context.as_bytes()), &mut data)
            .ok()?;
        String::from_utf8(plain.to_vec()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_opens_only_with_its_purpose() {
        let secret = b"0123456789abcdef0123456789abcdef";
        let one = Sealer::new(secret, "one").expect("key");
        let sealed = one.seal("hunter2", "ctx").expect("sealed");
        assert_eq!(one.open(&sealed, "ctx").as_deref(), Some("hunter2"));
        assert_eq!(
            Sealer::new(secret, "two")
                .expect("key")
                .open(&sealed, "ctx"),
            None
        );
        assert_eq!(one.open("not base64!", "ctx"), None);
        assert_eq!(one.open("AAAA", "ctx"), None);
    }
}
