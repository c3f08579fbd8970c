//! Gantry's scheduling engine.
//!
//! A pure library: no I/O, no async, no SQL and no clock reads. Time comes in
//! as an argument and the same input always yields the same decisions, so the
//! server's scheduling loop and the trace simulator drive exactly the same
//! code. The cluster model, queues and policies land here as the engine grows.
