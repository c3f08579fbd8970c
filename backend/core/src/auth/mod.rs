//! Who is calling: sessions, API keys, passwords and the principal every
//! handler is given.

pub mod api_key_secret;
pub mod identity;
pub mod login_throttle;
pub mod password;
pub mod principal;
pub mod session;
