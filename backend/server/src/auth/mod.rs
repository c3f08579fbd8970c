//! Authentication: accounts, passwords, session tokens, API key secrets and
//! the request principal.

pub mod accounts;
pub mod api_key_secret;
pub mod identity;
pub mod login_throttle;
pub mod oidc;
pub mod password;
pub mod principal;
pub mod refresh;
pub mod session;
