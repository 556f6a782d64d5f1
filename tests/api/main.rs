//! End-to-end tests of the HTTP API: the real server on loopback, real databases, real files.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod files;
mod openapi;
mod operations;
mod service;
mod write_codebase;
