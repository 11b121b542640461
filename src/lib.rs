//! iuid-router: an HTTP edge router that proxies each request to the region owning the iUID in
//! it (README.md).
//!
//! Where things are (ARCHITECTURE.md has the request's path through them):
//! - the iUID codec is the `iuid` crate (`crates/iuid`); id schemes, which turn an id's text
//!   into what the table routes by, are [`scheme`];
//! - ids are read from requests (scheme-neutral tokens) in [`extract`];
//! - the routing table (model, validation, compiled lookup, reloads) lives in [`table`];
//! - forwarding — the request's life from admission to response — is [`proxy`];
//! - upstream runtime (pools, health, balancing, retries, per-region state) is [`upstream`];
//! - who is to blame for a failure is [`error`]; refusals are rendered by [`problem`];
//! - the listener is [`server`], the threads it hands connections to are [`workers`], and
//!   [`app`] starts it all.

#![warn(missing_docs)]

pub mod admin;
pub mod app;
pub mod checks;
pub mod clock;
pub mod config;
pub mod demo;
pub mod error;
pub mod extract;
pub mod fanout;
pub mod http1;
pub mod inspect;
pub mod memory;
pub mod metrics;
pub mod moves;
pub mod nofile;
pub mod overload;
pub mod problem;
pub mod proxy;
pub mod ratelimit;
pub mod relay;
pub mod scheme;
pub mod send_timeout;
pub mod server;
pub mod source;
pub mod table;
pub mod tls;
pub mod trace;
pub mod upgrade;
pub mod upstream;
pub mod watch;
pub mod workers;
