//! The gateway's, the client's and the command line's integration tests, in one test binary:
//! each module below was a test file of its own, and names its tests (`routes::...`,
//! `cluster_chaos::...`). One binary is linked once, instead of once per file; cargo-nextest
//! still runs each test in a process of its own.

// What several test modules share, declared once (the cluster harness, which only
// `cluster_chaos` uses, is its module `cluster_chaos::chaos`).
mod common;
mod fresh_database;

mod alarm_args;
mod audit;
mod auth;
mod cli;
mod cli_fsm;
mod client;
mod cluster_admin;
mod cluster_chaos;
mod cluster_forward;
mod console;
mod errors;
mod fsm;
mod fsm_control;
mod idempotency;
mod routes;
mod storage;
