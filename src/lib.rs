//! iuid-router: an HTTP edge router that proxies each request to the region owning the iUID in
//! it (SPEC §1).
//!
//! Where things are:
//! - ids are decoded by the `iuid` crate (`crates/iuid`);
//! - ids are read from requests in [`extract`];
//! - the routing table (model, validation, compiled lookup) lives in [`table`];
//! - forwarding — the request's life from loop check to response — is [`proxy`];
//! - who is to blame for a failure on the data path is [`error`];
//! - upstream connections are [`upstream`]; the listener is [`server`], and the threads it
//!   hands connections to are [`workers`].

pub mod admin;
pub mod app;
pub mod config;
pub mod demo;
pub mod error;
pub mod extract;
pub mod inspect;
pub mod metrics;
pub mod problem;
pub mod proxy;
pub mod scheme;
pub mod send_timeout;
pub mod server;
pub mod source;
pub mod table;
pub mod upstream;
pub mod workers;
