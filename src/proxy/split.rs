//! GraphQL `split_nodes` (SPEC §11): a `nodes(ids: $var)` request whose ids live in several
//! regions, sent to each region with only its ids, in parallel, and answered as one.
//!
//! Without `split_nodes` (or with ids in literals, several fields, a batch) SPEC §6's 400
//! stands; `crate::extract::graphql::GraphqlRoute::split_of` decides which requests qualify.

use std::time::Instant;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use http::request::Parts;
use http::{HeaderValue, Response, StatusCode};
use http_body_util::Full;
use serde_json::Value;

use super::fanout::{json_response, LegFailure, BUFFER_FULL};
use super::Proxy;
use crate::extract::graphql::plan::SplitNodes;
use crate::extract::RouteKind;
use crate::fanout::budget::Refusal;
use crate::fanout::nodes::{self, Part};
use crate::metrics;
use crate::problem::Problem;
use crate::table::RegionId;
use crate::upstream::forward;

impl Proxy {
    /// Splits `body` (one JSON operation whose `variables.<split.variable>` lists the ids) by
    /// region, asks each region for its ids, and merges the answers. `parts` has had SPEC §6's
    /// header rules applied.
    pub(super) async fn split_nodes(
        &self,
        scheme: &str,
        split: &SplitNodes,
        parts: Parts,
        body: Bytes,
        regions_seen: &mut Option<String>,
    ) -> Result<Response<Full<Bytes>>, Problem> {
        let routing = self.regions.current();
        let op: Value = serde_json::from_slice(&body)
            .map_err(|e| Problem::GraphqlInvalid(format!("invalid JSON body: {e}")))?;
        let list = op
            .pointer(&format!("/variables/{}", split.variable))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        // Regions in order of their first id, each with the positions and ids it gets.
        let mut groups: Vec<(RegionId, Vec<usize>, Vec<Value>)> = Vec::new();
        for (at, id) in list.iter().enumerate() {
            let text = match id {
                Value::String(s) => s.trim().to_owned(),
                Value::Number(n) => n.to_string(),
                _ => continue,
            };
            let (_, decision) = routing
                .table
                .resolve_text(scheme, text.as_bytes())
                .map_err(|e| Problem::unresolved(e, Some(RouteKind::Graphql), text.as_bytes()))?;
            match groups.iter_mut().find(|(r, ..)| *r == decision.region) {
                Some((_, positions, ids)) => {
                    positions.push(at);
                    ids.push(id.clone());
                }
                None => groups.push((decision.region, vec![at], vec![id.clone()])),
            }
        }
        let names: Vec<&str> = groups
            .iter()
            .map(|(r, ..)| routing.region(*r).name.as_str())
            .collect();
        *regions_seen = Some(names.join(","));
        let timeout = self.config.timeouts.response_headers();
        let legs = groups.into_iter().map(|(region_id, positions, ids)| {
            let region = routing.region(region_id);
            let mut head = forward::copy_head(&parts);
            let body = nodes::region_body(&body, &split.variable, ids);
            async move {
                let started = Instant::now();
                let body = match body {
                    Ok(b) => Bytes::from(b),
                    Err(e) => {
                        return Part {
                            region: region.name.clone(),
                            positions,
                            answer: Err(e),
                        }
                    }
                };
                head.headers.remove(TRANSFER_ENCODING);
                super::fanout::for_merging(&mut head.headers);
                head.headers
                    .insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
                let judged = self.ask(region, head, body, timeout).await.and_then(|leg| {
                    serde_json::from_slice::<Value>(&leg.body).map_err(|e| {
                        LegFailure::new("not_json", format!("the answer is not JSON: {e}"))
                    })
                });
                let outcome = judged.as_ref().map_or_else(|f| f.error, |_| "ok");
                let answer = judged.map_err(|f| format!("{}: {}", f.error, f.detail));
                metrics::fanout_leg(
                    &region.state.metrics.label,
                    outcome,
                    started.elapsed().as_secs_f64(),
                );
                Part {
                    region: region.name.clone(),
                    positions,
                    answer,
                }
            }
        });
        let parts = futures_util::future::join_all(legs).await;
        let full = |p: &Part| p.answer.as_ref().is_err_and(|e| e.starts_with(BUFFER_FULL));
        if parts.iter().any(full) {
            metrics::fanout_refused(Refusal::Memory.as_str());
            return Err(Problem::FanoutBusy(Refusal::Memory));
        }
        let failed = parts.iter().filter(|p| p.answer.is_err()).count();
        let result = match failed {
            0 => "complete",
            n if n == parts.len() => "failed",
            _ => "partial",
        };
        metrics::fanout_request("split_nodes", result);
        let merged = nodes::merge(list.len(), &split.response_key, parts);
        let bytes = serde_json::to_vec(&merged).unwrap_or_default();
        Ok(json_response(StatusCode::OK, bytes))
    }
}
