//! What the server serves beside the API: the web console and the manual.

pub mod console;
pub mod docs;
