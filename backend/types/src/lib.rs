//! The vocabulary every Gantry domain shares: the classes and states stored
//! in rows and spoken by the engine, organization roles, the clock the
//! domain runs on, and the digest form of stored fingerprints.

pub mod classes;
pub mod clock;
pub mod digest;
pub mod image_refs;
pub mod job_spec;
pub mod reasons;
pub mod roles;
