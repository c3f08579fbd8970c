//! The scheduling read model: the rows the scheduler plans with, kept in
//! memory and current from the change log (`world`), the engine's snapshot
//! built from them (`load`, kept between cycles in `input`, with quota
//! holds in `scoped` and job dependencies in `gate`), the leases that pick one replica for a loop
//! (`lease`), and the change notifications that wake it (`notify`).

pub mod gate;
pub mod input;
pub mod lease;
pub mod load;
pub mod notify;
pub mod scoped;
pub mod world;
