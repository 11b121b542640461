//! The GraphQL scan and plan (`extract/graphql/`) on arbitrary documents and requests: the
//! scan's literals lie within the document, in order; a document with its literals'
//! contents changed keeps its shape and its hash (what lets it share a cached plan); a
//! request's ids (and whether it writes) are read twice the same, from the plan cache the
//! second time; root-field `id_arguments` only add ids: what a route with `[]` reads is a
//! subsequence of what the default route reads, with the same access; and a request that
//! writes is never split by region.

use std::sync::OnceLock;

use crate::extract::graphql::plan::ParseLimits;
use crate::extract::graphql::scan::{same_shape, scan, shape_of};
use crate::extract::graphql::{ColdParse, GraphqlRoute};
use crate::extract::Access;

/// The first byte picks how the rest is sent: a JSON body, a raw `application/graphql`
/// document, or a `GET` query string; the scan invariants hold on the rest as a document.
pub fn check(data: &[u8]) {
    let Some((&mode, doc)) = data.split_first() else {
        return;
    };
    check_scan(doc);
    let route = route();
    let read = |route: &GraphqlRoute| {
        let mut ids = Vec::new();
        let result = match mode % 3 {
            0 => route.ids_from_body(Some(b"application/json"), doc, ColdParse::Here, &mut ids),
            1 => route.ids_from_body(Some(b"application/graphql"), doc, ColdParse::Here, &mut ids),
            _ => match std::str::from_utf8(doc) {
                Ok(query) => route.ids_from_query(query, ColdParse::Here, &mut ids),
                Err(_) => return None,
            },
        };
        Some(
            result
                .map(|access| (ids, access))
                .map_err(|e| e.to_string()),
        )
    };
    let (first, second) = (read(route), read(route));
    assert_eq!(
        first, second,
        "a request read twice (the second from the plan cache)"
    );
    let nodes_only = read(no_arguments());
    if let (Some(Ok((all, access))), Some(Ok((nodes, nodes_access)))) = (&first, &nodes_only) {
        assert_eq!(
            access, nodes_access,
            "the access does not depend on id_arguments"
        );
        let mut rest = all.iter();
        assert!(
            nodes.iter().all(|id| rest.any(|other| other == id)),
            "ids without arguments {nodes:?} are not within those with them {all:?}"
        );
    }
    if mode % 3 == 0 {
        if let Some(Ok((_, Access::Write))) = first {
            assert!(
                route.split_of(None, doc).is_none(),
                "a write split by region"
            );
        }
    }
}

/// One route for every input, as a server has (the default `id_arguments`, splitting
/// `nodes`): its plan cache warms over the run.
fn route() -> &'static GraphqlRoute {
    static ROUTE: OnceLock<GraphqlRoute> = OnceLock::new();
    ROUTE.get_or_init(|| new_route().with_split_nodes(true))
}

/// The route with `id_arguments: []`.
fn no_arguments() -> &'static GraphqlRoute {
    static ROUTE: OnceLock<GraphqlRoute> = OnceLock::new();
    ROUTE.get_or_init(|| new_route().with_id_arguments(Box::new([])))
}

fn new_route() -> GraphqlRoute {
    GraphqlRoute::new(
        "/graphql".into(),
        Vec::new(),
        "iuid".into(),
        ParseLimits {
            tokens: 1000,
            depth: 32,
        },
    )
}

fn check_scan(doc: &[u8]) {
    let mut literals = Vec::new();
    let hash = scan(doc, &mut literals);
    let mut after = 0u32;
    for l in &literals {
        assert!(
            l.quote >= after && l.quote < l.start && l.start <= l.end,
            "{l:?} after {after}"
        );
        assert!(
            l.end as usize <= doc.len(),
            "{l:?} past the document's {} bytes",
            doc.len()
        );
        after = l.end;
    }
    let shape = shape_of(doc, &literals);
    assert!(same_shape(doc, &literals, &shape));
    // Every literal's content replaced by `a`: same shape, same hash.
    let mut other = Vec::with_capacity(doc.len());
    let mut from = 0usize;
    for l in &literals {
        other.extend_from_slice(&doc[from..l.start as usize]);
        other.push(b'a');
        from = l.end as usize;
    }
    other.extend_from_slice(&doc[from..]);
    let mut other_literals = Vec::new();
    let other_hash = scan(&other, &mut other_literals);
    assert_eq!(other_literals.len(), literals.len(), "{other:?}");
    assert!(same_shape(&other, &other_literals, &shape), "{other:?}");
    assert_eq!(other_hash, hash, "same shape, another hash: {other:?}");
}
