//! Session tokens: short-lived HS256 JWTs naming a user.

use std::path::Path;

use anyhow::Context;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::Utc;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

const ISSUER: &str = "gantry";
const SECRET_FILE: &str = "jwt-secret";

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: Uuid,
    iss: String,
    iat: i64,
    exp: i64,
}

#[derive(Clone)]
pub struct SessionKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    ttl_seconds: u64,
}

#[derive(Debug, PartialEq, Eq)]
pub enum TokenError {
    Expired,
    Invalid,
}

impl SessionKeys {
    pub fn new(secret: &[u8], ttl_seconds: u64) -> anyhow::Result<Self> {
        // Only HS256 is accepted: a token announcing `none` or any other
        // algorithm fails, and expiry has no leeway.
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 0;
        validation.set_issuer(&[ISSUER]);
        validation.set_required_spec_claims(&["exp", "sub", "iss"]);
        Ok(Self {
            encoding: EncodingKey::from_secret(secret)
                .context("loading the session signing key")?,
            decoding: DecodingKey::from_secret(secret)
                .context("loading the session signing key")?,
            validation,
            ttl_seconds,
        })
    }

    pub fn ttl_seconds(&self) -> u64 {
        self.ttl_seconds
    }

    pub fn issue(&self, user_id: Uuid) -> anyhow::Result<String> {
        let now = Utc::now().timestamp();
        let ttl = i64::try_from(self.ttl_seconds).unwrap_or(i64::MAX);
        let claims = Claims {
            sub: user_id,
            iss: ISSUER.to_owned(),
            iat: now,
            exp: now.saturating_add(ttl),
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .context("signing a session token")
    }

    pub fn verify(&self, token: &str) -> Result<Uuid, TokenError> {
        match jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation) {
            Ok(data) => Ok(data.claims.sub),
            Err(e) if matches!(e.kind(), ErrorKind::ExpiredSignature) => Err(TokenError::Expired),
            Err(_) => Err(TokenError::Invalid),
        }
    }
}

/// The configured secret, or the one persisted in the data directory,
/// generated on first start. Never a built-in default.
pub fn load_or_create_secret(configured: Option<&str>, data_dir: &Path) -> anyhow::Result<Vec<u8>> {
    if let Some(secret) = configured {
        return Ok(secret.as_bytes().to_vec());
    }
    let path = data_dir.join(SECRET_FILE);
    match std::fs::read_to_string(&path) {
        Ok(secret) if secret.trim().len() >= 32 => return Ok(secret.trim().as_bytes().to_vec()),
        Ok(_) => anyhow::bail!("{} is shorter than 32 bytes", path.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    }
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let mut bytes = [0u8; 48];
    rand::Rng::fill_bytes(&mut rand::rng(), &mut bytes);
    let secret = URL_SAFE_NO_PAD.encode(bytes);
    write_private(&path, &secret)?;
    tracing::info!(path = %path.display(), "generated a new session signing secret");
    Ok(secret.into_bytes())
}

fn write_private(path: &Path, contents: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(contents.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_round_trips_and_a_forged_one_fails() {
        let keys = SessionKeys::new(b"0123456789abcdef0123456789abcdef", 60).expect("keys");
        let user = Uuid::now_v7();
        let token = keys.issue(user).expect("token");
        assert_eq!(keys.verify(&token), Ok(user));

        let other = SessionKeys::new(b"fedcba9876543210fedcba9876543210", 60).expect("keys");
        assert_eq!(other.verify(&token), Err(TokenError::Invalid));
        assert_eq!(keys.verify("not.a.token"), Err(TokenError::Invalid));
    }

    #[test]
    fn the_secret_is_generated_once_and_kept() {
        let dir = std::env::temp_dir().join(format!("gantry-secret-{}", Uuid::new_v4()));
        let first = load_or_create_secret(None, &dir).expect("generated");
        let second = load_or_create_secret(None, &dir).expect("read back");
        assert_eq!(first, second);
        assert!(first.len() >= 32);
        assert_eq!(
            load_or_create_secret(Some("x".repeat(40).as_str()), &dir)
                .expect("configured")
                .len(),
            40
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
