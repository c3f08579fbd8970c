//! Authentication: accounts, passwords, session tokens, API key secrets and
//! the request principal.

pub use gantry_access::auth::{accounts, oidc, refresh};
pub use gantry_core::auth::{
    api_key_secret, identity, login_throttle, password, principal, session,
};
