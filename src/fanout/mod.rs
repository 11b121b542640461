//! Asking several regions for one request (SPEC §11): what is done with their answers.
//!
//! Three features send one client request to more than one region; the requests themselves go
//! through the upstream layer like any proxied request (the `fanout:` and `graphql:` route
//! kinds in `crate::proxy::route`, and `crate::proxy::probe`, drive them). This module holds the pure parts
//! they need, each testable without a socket:
//!
//! - [`merge`]: a `fanout:` list route's items, read from each region's JSON answer and merged
//!   into one page by (creation time, canonical id text), each id once. Ids are time-ordered
//!   in every scheme with a time, so one cursor (the last id of a page) serves every region,
//!   as Vitess's `MergeSort` does for shards.
//! - [`page`]: the page's JSON, `{"items", "next_cursor", "partial", "regions"}`.
//! - [`nodes`]: GraphQL `split_nodes`, a `nodes(ids: $var)` split by region and merged back
//!   in request order.
//! - [`budget`]: the bounds on fan-outs in flight and on the bytes of answers they buffer.
//! - [`owners`]: the owners learned for legacy ids (`legacy: probe`), a bounded LRU with a TTL.

pub mod budget;
pub mod merge;
pub mod nodes;
pub mod owners;
pub mod page;
