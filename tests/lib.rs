//! End-to-end tests live in `api/`; this library is empty by design.
