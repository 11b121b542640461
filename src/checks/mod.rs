//! The invariants the fuzz targets assert on arbitrary input (`fuzz/`, README "Fuzzing"),
//! beyond "no panic": round trips where a parser has a printer, and "a routed id maps to a
//! declared region" where it routes. `tests/fuzz_corpus.rs` replays every committed corpus
//! through them on the stable toolchain, so a crash kept in a corpus stays a regression
//! test. Nothing here is on the data path: each check drives the parsers as the data path
//! does, from the outside.
//!
//! Each `check(data)` panics when an invariant breaks, with the input's reading in the
//! message.

pub mod config;
pub mod cursor;
pub mod graphql;
pub mod grpc;
pub mod headers;
pub mod iuid;
pub mod reading;
pub mod route;
pub mod schemes;

use std::sync::OnceLock;

use crate::config::RouterConfig;
use crate::proxy::route::Routes;
use crate::source::Source;
use crate::table::{load_source, RoutingTable};

/// The shipped `config/router.yaml` and `routing-table.yaml` (every route kind and scheme),
/// compiled once: what the routing checks route with.
pub fn shipped() -> &'static (Routes, RoutingTable) {
    static SHIPPED: OnceLock<(Routes, RoutingTable)> = OnceLock::new();
    SHIPPED.get_or_init(|| {
        let config = RouterConfig::validate(&Source {
            path: "config/router.yaml".into(),
            text: include_str!("../../config/router.yaml").to_owned(),
        })
        .unwrap_or_else(|e| panic!("the shipped config: {e}"));
        let routes = Routes::for_config(&config).unwrap_or_else(|e| panic!("its routes: {e}"));
        let table = load_source(&Source {
            path: "routing-table.yaml".into(),
            text: include_str!("../../routing-table.yaml").to_owned(),
        })
        .unwrap_or_else(|e| panic!("the shipped table: {e}"));
        (routes, table)
    })
}

/// Asserts a decision names a region the table declares.
fn declared(table: &RoutingTable, region: crate::table::RegionId, what: &dyn std::fmt::Debug) {
    assert!(
        usize::from(region.0) < table.regions.len(),
        "{what:?} routed to region #{} of {}",
        region.0,
        table.regions.len()
    );
}
