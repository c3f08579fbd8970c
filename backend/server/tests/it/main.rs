//! The `gantry` binary tested as its users run it, in one test binary:
//! an operator's commands (`cli`), what `deploy/` ships (`deploy`), several
//! processes on one database killed and replaced (`processes`), and a real
//! Prometheus scraping it (`prometheus`).

mod cli;
mod deploy;
mod processes;
mod prometheus;
