//! Phase 3, resolve (ARCHITECTURE.md "Phases"): the id a route found, parsed by the live
//! table with the route's scheme, names the region and the rule; no id, the `unrouted`
//! policy. Both drivers call [`Proxy::resolve`] (the head path and `Proxy::handle`).

use opentelemetry::KeyValue;

use super::life::Life;
use super::route::{self, Extraction};
use super::Proxy;
use crate::config::{Legacy, Unrouted};
use crate::problem::Problem;
use crate::table::{Decision, RoutingTable, Rule};

impl Proxy {
    /// Phase 3: the live table parses the id(s) with the route's scheme and names the region
    /// that owns them, or the `unrouted` policy applies when there is none. With
    /// `legacy: probe`, an id without routing bits comes back as canonical text too.
    pub(super) fn resolve(
        &self,
        table: &RoutingTable,
        found: Extraction,
        life: &Life,
    ) -> Result<(Decision, Option<String>), Problem> {
        let resolved = self.decide(table, found, &life.span);
        if let (Some(trace), Ok((decision, _))) = (&life.trace, &resolved) {
            trace.record(|| {
                vec![
                    KeyValue::new(
                        "iuid_router.scheme",
                        table.scheme_name(decision.scheme).to_owned(),
                    ),
                    KeyValue::new("iuid_router.rule", decision.rule.label().as_str()),
                ]
            });
        }
        resolved
    }

    /// [`Proxy::resolve`]'s decision; the id recorded on `span` when it is on.
    fn decide(
        &self,
        table: &RoutingTable,
        found: Extraction,
        span: &tracing::Span,
    ) -> Result<(Decision, Option<String>), Problem> {
        match found {
            Extraction::Id(token, kind) => {
                let (key, mut decision) = table
                    .resolve_text(token.scheme, &token.text)
                    .map_err(|e| Problem::unresolved(e, Some(kind), &token.text))?;
                decision.id = key.fingerprint();
                // A field is looked up by name even on a disabled span.
                if !span.is_disabled() {
                    span.record("id", tracing::field::display(&key));
                }
                let legacy = (decision.rule == Rule::DefaultRegion
                    && self.config.legacy == Legacy::Probe)
                    .then(|| key.to_string());
                Ok((decision, legacy))
            }
            Extraction::Ids(texts, _, route) if !texts.is_empty() => {
                route::resolve_all(table, route.scheme(), &texts).map(|d| (d, None))
            }
            Extraction::Invalid(message, _) => Err(Problem::BadParameter(message)),
            Extraction::NoId
            | Extraction::Ids(..)
            | Extraction::Pending(_)
            | Extraction::Fanout(_) => match self.config.unrouted {
                Unrouted::DefaultRegion => Ok((
                    Decision {
                        region: table.default_region,
                        rule: Rule::Unrouted,
                        scheme: crate::table::SchemeSlot::None,
                        id: 0,
                    },
                    None,
                )),
                Unrouted::Reject => Err(Problem::NoId),
            },
        }
    }
}
