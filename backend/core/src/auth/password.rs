//! Password hashing with argon2id.
//!
//! Hashing is deliberately slow and memory-hungry, so it runs on the blocking
//! pool (never on the async workers) and a semaphore bounds how many hashes
//! run at once: a burst of logins queues instead of exhausting memory.

use std::sync::Arc;

use argon2::{Algorithm, Argon2, Params, PasswordHasher as _, PasswordVerifier as _, Version};
use tokio::sync::Semaphore;

/// OWASP's recommended minimum for argon2id: 19 MiB of memory, two passes,
/// one lane. A hash takes about 25 ms of one core on a current x86 server.
pub const MEMORY_KIB: u32 = 19 * 1024;
pub const ITERATIONS: u32 = 2;
pub const PARALLELISM: u32 = 1;

pub const MIN_LENGTH: usize = 10;

/// A password hash no password matches: users made by an identity provider
/// sign in through it, and have no password here.
pub const NO_PASSWORD: &str = "!oidc";
pub const MAX_LENGTH: usize = 128;

#[derive(Clone)]
pub struct PasswordHasher {
    permits: Arc<Semaphore>,
    /// A real hash of a random password, verified against when a login names
    /// an unknown email so both cases take the same time.
    decoy_hash: Arc<str>,
}

impl PasswordHasher {
    pub fn new() -> anyhow::Result<Self> {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let mut decoy = [0u8; 24];
        rand::Rng::fill_bytes(&mut rand::rng(), &mut decoy);
        let decoy_hash = hash_blocking(&decoy)?;
        Ok(Self {
            permits: Arc::new(Semaphore::new(cores * 2)),
            decoy_hash: decoy_hash.into(),
        })
    }

    pub async fn hash(&self, password: String) -> anyhow::Result<String> {
        let _permit = self.permits.acquire().await?;
        tokio::task::spawn_blocking(move || hash_blocking(password.as_bytes())).await?
    }

    /// Verifies `password` against `hash`, or against the decoy when there is
    /// no account, so the answer takes as long either way.
    pub async fn verify(&self, password: String, hash: Option<String>) -> anyhow::Result<bool> {
        let _permit = self.permits.acquire().await?;
        let known = hash.is_some();
        let hash = hash.unwrap_or_else(|| self.decoy_hash.to_string());
        let matches = tokio::task::spawn_blocking(move || {
            argon2()
                .verify_password(password.as_bytes(), hash.as_str())
                .is_ok()
        })
        .await?;
        Ok(known && matches)
    }
}

fn argon2() -> Argon2<'static> {
    // The constants are valid parameters; `Params::DEFAULT` is the fallback
    // only to keep this infallible.
    let params = Params::new(MEMORY_KIB, ITERATIONS, PARALLELISM, None).unwrap_or(Params::DEFAULT);
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
}

fn hash_blocking(password: &[u8]) -> anyhow::Result<String> {
    argon2()
        .hash_password(password)
        .map(|hash| hash.to_string())
        .map_err(|e| anyhow::anyhow!("hashing a password: {e}"))
}

/// Why a password is refused, or `None` when it is acceptable. Length is what
/// makes a password strong (NIST SP 800-63B); the other rules catch the
/// obviously guessable.
pub fn weakness(password: &str, email: &str) -> Option<String> {
    let length = password.chars().count();
    if length < MIN_LENGTH {
        return Some(format!("must be at least {MIN_LENGTH} characters long"));
    }
    if length > MAX_LENGTH {
        return Some(format!("must be at most {MAX_LENGTH} characters long"));
    }
    let mut distinct: Vec<char> = password.chars().collect();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() < 5 {
        return Some("must use at least 5 different characters".into());
    }
    let lower = password.to_lowercase();
    let local_part = email.split('@').next().unwrap_or_default().to_lowercase();
    if lower == email.to_lowercase() || (local_part.len() >= 4 && lower.contains(&local_part)) {
        return Some("must not contain the email address".into());
    }
    if COMMON.iter().any(|common| lower.contains(common)) {
        return Some("is too common".into());
    }
    None
}

/// Fragments of the most used passwords in public breach corpora.
const COMMON: &[&str] = &[
    "password", "passw0rd", "123456", "qwerty", "letmein", "welcome", "iloveyou", "admin",
    "abc123", "111111", "dragon", "monkey",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weak_passwords_are_refused_with_a_reason() {
        assert!(weakness("short", "a@b.io").is_some());
        assert!(weakness("aaaaaaaaaaaa", "a@b.io").is_some());
        assert!(weakness("MyPassword2024", "a@b.io").is_some());
        assert!(weakness("alice.smith-gpu", "alice.smith@example.com").is_some());
        assert!(weakness(&"x1y2z3".repeat(30), "a@b.io").is_some());
        assert_eq!(weakness("correct horse battery", "a@b.io"), None);
    }

    #[tokio::test]
    async fn hashes_are_argon2id_and_verify() {
        let hasher = PasswordHasher::new().expect("hasher");
        let hash = hasher
            .hash("correct horse battery".into())
            .await
            .expect("hash");
        assert!(hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"));
        assert!(
            hasher
                .verify("correct horse battery".into(), Some(hash.clone()))
                .await
                .expect("verify")
        );
        assert!(
            !hasher
                .verify("wrong horse battery".into(), Some(hash))
                .await
                .expect("verify")
        );
        assert!(
            !hasher
                .verify("correct horse battery".into(), None)
                .await
                .expect("verify")
        );
    }
}
