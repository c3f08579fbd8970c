//! Access's database tests, each on a fresh SQLite file and a fresh
//! PostgreSQL database, without a server.

mod operators;
