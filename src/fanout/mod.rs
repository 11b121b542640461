//! Asking several regions for one request (docs/fanout.md): what is done with their answers.
//!
//! Two route kinds send one client request to every region that holds part of its answer: a
//! `fanout:` list and a GraphQL `nodes` split (`crate::proxy::route`, which sends them through
//! the upstream layer like any proxied request). This module holds the pure parts they need,
//! each testable without a socket. (Legacy probing asks other regions too, one id at a time,
//! with its own owner cache: `crate::proxy::legacy`.)
//!
//! - [`merge`]: a `fanout:` list route's items, read from each region's JSON answer and merged
//!   into one page by (creation time, canonical id text), each id once. Ids are time-ordered
//!   in every scheme with a time, so one cursor (the last id of a page) serves every region,
//!   as Vitess's `MergeSort` does for shards.
//! - [`page`]: the page's JSON, `{"items", "next_cursor", "partial", "regions"}`.
//! - [`nodes`]: GraphQL `split_nodes`, a `nodes(ids: $var)` split by region and merged back
//!   in request order.
//! - [`budget`]: the bounds on fan-outs in flight and on the bytes of answers they buffer.
//! - [`leg`]: why a region's part failed (`LegError`).

pub mod budget;
pub mod leg;
pub mod merge;
pub mod nodes;
pub mod page;
