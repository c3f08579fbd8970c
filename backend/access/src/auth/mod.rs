//! Accounts: sign-up and sign-in with a password or an OpenID provider,
//! refresh tokens, and changing or resetting passwords.

pub mod accounts;
pub mod oidc;
pub mod refresh;
