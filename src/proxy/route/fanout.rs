//! `fanout:` routes (docs/fanout.md): a list endpoint's path, matched exactly, asked of every
//! region; the answers are merged by the items' id creation time.
//!
//! The route's phases: read the page asked for, send the request to one upstream of every
//! region in parallel, merge the answers into one page. Each region's request goes through
//! `upstream::forward` like any proxied request (health, ejection, pools, retries, the header
//! rules of docs/data-path.md) and is bounded as a whole — response headers and body — by the
//! route's `timeout_ms`, and its body by `limits.fanout_region_bytes`. [`Proxy::ask`] is that
//! one bounded exchange; the split GraphQL `nodes` request uses it too. The bytes it buffers are
//! held against the router-wide `limits.fanout_buffer_bytes` (`crate::fanout::budget`) until
//! the answer is merged or dropped; a request whose answers do not fit is refused whole
//! (503). The page a query asks for, and the merge, are pure (`crate::extract::fanout`,
//! `crate::fanout`).

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
use http::request::Parts;
use http::{HeaderValue, Method, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use serde::Deserialize;

use super::{scheme_or_default, Kind, Route, RouteError};
use crate::error::ErrorKind;
use crate::extract::fanout::{CursorSpec, FanoutRoute, LimitSpec, OnRegionError, Order};
use crate::extract::graphql::plan::ParseLimits;
use crate::fanout::budget::{Permit, Refusal, Reservation};
use crate::fanout::leg::LegError;
use crate::fanout::merge::{self, Cursor};
use crate::fanout::page::{self, RegionReport};
use crate::metrics;
use crate::metrics::{FanoutKind, FanoutResult};
use crate::problem::Problem;
use crate::proxy::headers::ClientAddr;
use crate::proxy::Proxy;
use crate::trace::Traced;
use crate::upstream::attempts::{Detour, ForwardError};
use crate::upstream::body::IdleTimeout;
use crate::upstream::forward::{self, Outgoing};
use crate::upstream::regions::{RegionRuntime, Routing};

/// A `fanout:` route's keys.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Spec {
    /// The list endpoint's path, matched exactly.
    fanout: String,
    /// The scheme of the items' ids (docs/schemes.md), which must carry a time; default `iuid`.
    #[serde(default)]
    scheme: Option<String>,
    /// JSON pointer to the items array in each region's answer (default `/items`).
    #[serde(default)]
    items: Option<String>,
    /// The member of each item holding its id (default `id`).
    #[serde(default)]
    id_field: Option<String>,
    /// `desc` (default) or `asc`.
    #[serde(default)]
    order: Option<Order>,
    /// The page size parameter, its default and maximum.
    #[serde(default)]
    limit: Option<LimitSpec>,
    /// The cursor parameter.
    #[serde(default)]
    cursor: Option<CursorSpec>,
    /// Bound on each region's whole answer, in ms (default 2000).
    #[serde(default)]
    timeout_ms: Option<u64>,
    /// `partial` (default) or `fail`.
    #[serde(default)]
    on_region_error: Option<OnRegionError>,
}

impl Kind for Spec {
    const NEEDS_TIME: bool = true;

    fn scheme(&self) -> Option<&str> {
        self.scheme.as_deref()
    }

    fn compile(self, routes: &mut Vec<Route>, _: ParseLimits) -> Result<(), RouteError> {
        let path = self.fanout;
        let order = self.order.unwrap_or_default();
        let limit = self.limit.unwrap_or_default();
        let items = self.items.unwrap_or_else(|| "/items".to_owned());
        let id_field = self.id_field.unwrap_or_else(|| "id".to_owned());
        let timeout_ms = self.timeout_ms.unwrap_or(2000);
        let scheme = scheme_or_default(self.scheme)?;
        if !path.starts_with('/') {
            return Err(RouteError::new(
                "fanout",
                format!("fanout path `{path}` must start with /"),
            ));
        }
        crate::extract::normalize::check_template(&path)
            .map_err(|e| RouteError::new("fanout", e))?;
        if !items.is_empty() && !items.starts_with('/') {
            return Err(RouteError::new(
                "items",
                format!("`{items}` is not a JSON pointer (RFC 6901): it starts with /"),
            ));
        }
        if id_field.is_empty() {
            return Err(RouteError::new("id_field", "the id member's name is empty"));
        }
        if limit.max == 0 || limit.default > limit.max || limit.param.is_empty() {
            return Err(RouteError::new(
                "limit",
                format!(
                    "limit needs a param name and 1 <= default <= max (here default {} and max {})",
                    limit.default, limit.max
                ),
            ));
        }
        if timeout_ms == 0 {
            return Err(RouteError::new(
                "timeout_ms",
                "timeout_ms must be above 0 ms",
            ));
        }
        let cursor_param = self
            .cursor
            .and_then(|c| c.param)
            .unwrap_or_else(|| order.default_cursor_param().to_owned());
        if cursor_param == limit.param {
            return Err(RouteError::new(
                "cursor",
                "the cursor and limit parameters must differ",
            ));
        }
        routes.push(Route::Fanout(std::sync::Arc::new(FanoutRoute {
            path,
            scheme,
            items,
            id_field,
            order,
            limit_param: limit.param,
            limit_default: limit.default.max(1),
            limit_max: limit.max,
            cursor_param,
            timeout: Duration::from_millis(timeout_ms),
            on_region_error: self.on_region_error.unwrap_or_default(),
        })));
        Ok(())
    }
}

/// One region's whole answer.
#[derive(Debug)]
pub(super) struct Leg<'a> {
    /// Its 2xx status.
    pub status: StatusCode,
    /// Its body, read whole (at most `limits.fanout_region_bytes`).
    pub body: Bytes,
    /// The failover region that answered in the region's place (docs/failover.md).
    pub served_by: Option<String>,
    /// The body's bytes, held against `limits.fanout_buffer_bytes` while the leg lives.
    _held: Reservation<'a>,
}

/// Most bytes read of a region's non-2xx answer to find its problem `type`.
const PROBLEM_BYTES: usize = 4096;

/// Why a region gave no usable answer: the name `regions` and the leg metric give it (see
/// [`RegionReport::Failed`]), what explains it (the region's status and problem type, the bad
/// item's index and id), and a sentence.
#[derive(Debug, Clone)]
pub(super) struct LegFailure {
    pub error: LegError,
    pub status: Option<u16>,
    pub problem_type: Option<String>,
    pub index: Option<usize>,
    pub id: Option<String>,
    pub detail: String,
}

impl LegFailure {
    pub(super) fn new(error: LegError, detail: impl Into<String>) -> LegFailure {
        LegFailure {
            error,
            status: None,
            problem_type: None,
            index: None,
            id: None,
            detail: detail.into(),
        }
    }

    /// As a page's `regions` entry.
    pub fn report(self) -> RegionReport {
        RegionReport::Failed {
            error: self.error,
            status: self.status,
            problem_type: self.problem_type,
            index: self.index,
            id: self.id,
            detail: self.detail,
        }
    }

    /// What the regions-failed problem says of the region: its name and detail, with the
    /// problem type when the region gave one.
    fn summary(&self) -> String {
        match &self.problem_type {
            Some(t) => format!("{}: {} ({t})", self.error, self.detail),
            None => format!("{}: {}", self.error, self.detail),
        }
    }
}

/// A non-2xx answer's problem `type` and `title` (RFC 9457), if its body is JSON with them:
/// at most [`PROBLEM_BYTES`] are read, each value cut to 200 characters.
async fn problem_of(
    headers: &http::HeaderMap,
    body: crate::upstream::body::Inbound,
    idle: Duration,
) -> (Option<String>, Option<String>) {
    let json = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("json"));
    if !json {
        return (None, None);
    }
    let Ok(collected) = Limited::new(IdleTimeout::new(body, idle), PROBLEM_BYTES)
        .collect()
        .await
    else {
        return (None, None);
    };
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(&collected.to_bytes()) else {
        return (None, None);
    };
    let text = |name: &str| {
        value
            .get(name)
            .and_then(serde_json::Value::as_str)
            .map(|s| s.chars().take(200).collect::<String>())
    };
    (text("type"), text("title"))
}

impl Proxy {
    /// Starts a request to several regions (a list or split `nodes`) within
    /// `crate::fanout::budget`'s bounds.
    ///
    /// Errors: the bound reached (counted); the caller answers 503 `Retry-After: 1` at once.
    pub(in crate::proxy) fn admit_fanout<'a>(
        &'a self,
        client: &'a ClientAddr,
    ) -> Result<Permit<'a>, Refusal> {
        self.fanouts.admit(&client.fanouts).inspect_err(|refusal| {
            metrics::fanout_refused(refusal.as_str());
        })
    }

    /// Sends `head` + `body` to `region` and reads its whole answer within `timeout`. A
    /// non-2xx answer is a failure (at most [`PROBLEM_BYTES`] of it read, for its problem
    /// type). The body is held against `limits.fanout_buffer_bytes` while the returned leg
    /// lives; one that does not fit fails as [`LegError::BufferFull`]. The caller counts the outcome
    /// ([`metrics::fanout_leg`]) once it has judged the body too.
    ///
    /// `said`: whether it reads, over its method (a `nodes` split reads, whatever it is sent
    /// with): a read may be answered by the region's failover region (docs/failover.md).
    pub(super) async fn ask(
        &self,
        (routing, region): (&Routing, &RegionRuntime),
        head: Parts,
        (body, said): (Bytes, Option<crate::extract::Access>),
        timeout: Duration,
        trace: Option<&Traced>,
    ) -> Result<Leg<'_>, LegFailure> {
        let max = self.config.limits.fanout_region_bytes;
        let idle = self.config.timeouts.idle();
        let exchange = async {
            let answered = match self
                .send(
                    (routing, region),
                    head,
                    Outgoing::Held(body),
                    trace,
                    (said, false),
                )
                .await
            {
                Ok(answered) => answered,
                Err(ForwardError::Overloaded(reason)) => {
                    return Err(LegFailure::new(
                        LegError::Overloaded,
                        format!("shed: the limit of {} was reached", reason.setting()),
                    ))
                }
                Err(ForwardError::Limited(limited)) => {
                    return Err(LegFailure::new(
                        LegError::RateLimited,
                        format!("over the rate limit `{}`", limited.rule),
                    ))
                }
                Err(ForwardError::Misdirected { .. }) => {
                    return Err(LegFailure::new(
                        LegError::Status,
                        "the region answered 421 Misdirected Request",
                    ))
                }
                Err(ForwardError::Unavailable { .. }) => {
                    return Err(LegFailure::new(
                        LegError::Unavailable,
                        "every upstream of the region is ejected",
                    ))
                }
                Err(ForwardError::Failed { error, .. }) => {
                    let name = match error.kind {
                        ErrorKind::Connect => LegError::Connect,
                        ErrorKind::Timeout => LegError::Timeout,
                        _ => LegError::Reset,
                    };
                    return Err(LegFailure::new(name, error.detail));
                }
            };
            let (parts, body) = answered.response.into_parts();
            if !parts.status.is_success() {
                let (problem_type, title) = problem_of(&parts.headers, body, idle).await;
                let detail = match title {
                    Some(title) => format!("the region answered {}: {title}", parts.status),
                    None => format!("the region answered {}", parts.status),
                };
                return Err(LegFailure {
                    status: Some(parts.status.as_u16()),
                    problem_type,
                    ..LegFailure::new(LegError::Status, detail)
                });
            }
            let declared = parts
                .headers
                .get(CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            let too_large = || {
                LegFailure::new(
                    LegError::TooLarge,
                    format!("the answer is over the {max}-byte limit (limits.fanout_region_bytes)"),
                )
            };
            if declared.is_some_and(|n| n > max as u64) {
                return Err(too_large());
            }
            let buffer_full = || {
                LegFailure::new(
                    LegError::BufferFull,
                    "the answers buffered by all fan-outs reached limits.fanout_buffer_bytes",
                )
            };
            // The declared length is held at once; otherwise each growth of the buffer is,
            // before it is made (doubling, as a Vec grows, up to the limit).
            let first = declared.map_or(0, |n| n as usize);
            let mut held = self.fanouts.reserve(first).ok_or_else(buffer_full)?;
            let mut buf: Vec<u8> = Vec::with_capacity(first);
            let mut body = std::pin::pin!(IdleTimeout::new(body, idle));
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| {
                    LegFailure::new(LegError::Reset, format!("reading the answer failed: {e}"))
                })?;
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                let len = buf.len() + data.len();
                if len > max {
                    return Err(too_large());
                }
                if len > buf.capacity() {
                    let capacity = len.max(buf.capacity() * 2).min(max);
                    if capacity > held.bytes() && !held.grow(capacity - held.bytes()) {
                        return Err(buffer_full());
                    }
                    buf.reserve_exact(capacity - buf.len());
                }
                buf.extend_from_slice(&data);
            }
            drop(answered.in_flight);
            let served_by = match answered.detour {
                Detour::FailedOver(to) => Some(routing.region(to).name.clone()),
                _ => None,
            };
            Ok(Leg {
                status: parts.status,
                body: Bytes::from(buf),
                served_by,
                _held: held,
            })
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(LegFailure::new(
                LegError::Timeout,
                format!("no whole answer within {} ms", timeout.as_millis()),
            )),
        }
    }

    /// A `fanout:` request, end to end: the page asked for, every region asked in parallel,
    /// their items merged (docs/fanout.md). `parts` has had the header rules of
    /// docs/data-path.md applied.
    pub(in crate::proxy) async fn fanout(
        &self,
        route: &FanoutRoute,
        mut parts: Parts,
        regions_seen: &mut Option<String>,
        trace: Option<&Traced>,
    ) -> Result<Response<Full<Bytes>>, Problem> {
        let routing = self.regions.current();
        let (_, kind) = routing.table.scheme(&route.scheme).ok_or_else(|| {
            Problem::Unowned(crate::table::ResolveError::UnknownScheme(
                route.scheme.clone(),
            ))
        })?;
        let query = parts.uri.query().map(str::to_owned);
        let page = route
            .page(query.as_deref())
            .map_err(Problem::BadParameter)?;
        let cursor = match &page.cursor {
            None => None,
            Some(text) => Some(Cursor::parse(kind, text).map_err(|e| {
                Problem::BadParameter(format!(
                    "the `{}` cursor `{}` is not an id of scheme {} with a time: {e}",
                    route.cursor_param,
                    text.chars().take(80).collect::<String>(),
                    route.scheme
                ))
            })?),
        };
        let query = route.region_query(&page, cursor.as_ref().map(|c| c.id.as_str()));
        let target = format!("{}?{query}", parts.uri.path());
        parts.uri = target
            .parse()
            .map_err(|_| Problem::BadParameter("the query string is not valid".to_owned()))?;
        parts.method = Method::GET;
        parts.headers.remove(CONTENT_LENGTH);
        parts.headers.remove(TRANSFER_ENCODING);
        for_merging(&mut parts.headers);

        let names: Vec<&str> = routing.all().map(|(_, r)| r.name.as_str()).collect();
        *regions_seen = Some(names.join(","));
        let routing = &routing;
        let legs = routing.all().map(|(_, region)| {
            let head = forward::copy_head(&parts);
            async move {
                let started = Instant::now();
                let answer = self
                    .ask(
                        (routing, region),
                        head,
                        (Bytes::new(), None),
                        route.timeout,
                        trace,
                    )
                    .await;
                (region, started, answer)
            }
        });
        let answers = futures_util::future::join_all(legs).await;
        if answers
            .iter()
            .any(|(_, _, a)| a.as_ref().is_err_and(|f| f.error == LegError::BufferFull))
        {
            metrics::fanout_refused(Refusal::Memory.as_str());
            return Err(Problem::FanoutBusy(Refusal::Memory));
        }

        let mut reports: Vec<(&str, RegionReport)> = Vec::with_capacity(answers.len());
        let mut lists = Vec::with_capacity(answers.len());
        for (region, started, answer) in &answers {
            let judged = answer.as_ref().map_err(Clone::clone).and_then(|leg| {
                let text = std::str::from_utf8(&leg.body).map_err(|e| {
                    LegFailure::new(LegError::NotJson, format!("the answer is not UTF-8: {e}"))
                })?;
                merge::items(
                    text,
                    &route.items,
                    &route.id_field,
                    kind,
                    route.order,
                    page.limit,
                )
                .map(|items| (leg.status, leg.served_by.clone(), items))
                .map_err(|e| {
                    let (index, id) = match &e {
                        merge::ItemsError::BadId { index, id, .. } => (Some(*index), id.clone()),
                        _ => (None, None),
                    };
                    LegFailure {
                        index,
                        id,
                        ..LegFailure::new(e.leg_error(), e.to_string())
                    }
                })
            });
            let outcome = judged.as_ref().map_or_else(|f| f.error.as_str(), |_| "ok");
            metrics::fanout_leg(
                &region.state.metrics.label,
                outcome,
                started.elapsed().as_secs_f64(),
            );
            match judged {
                Ok((status, served_by, items)) => {
                    reports.push((
                        &region.name,
                        RegionReport::Answered {
                            status: status.as_u16(),
                            items: items.len(),
                            failover: served_by.is_some(),
                            served_by,
                        },
                    ));
                    lists.push(items);
                }
                Err(failure) => {
                    tracing::debug!(region = %region.name, error = failure.error.as_str(), detail = %failure.detail, "fan-out region failed");
                    reports.push((&region.name, failure.report()));
                }
            }
        }
        let failed: Vec<(String, String)> = reports
            .iter()
            .filter_map(|(name, r)| match r {
                RegionReport::Failed {
                    error,
                    detail,
                    problem_type,
                    ..
                } => {
                    let failure = LegFailure {
                        problem_type: problem_type.clone(),
                        ..LegFailure::new(*error, detail.clone())
                    };
                    Some((name.to_string(), failure.summary()))
                }
                RegionReport::Answered { .. } => None,
            })
            .collect();
        let all_failed = lists.is_empty() && !reports.is_empty();
        if !failed.is_empty() && (route.on_region_error == OnRegionError::Fail || all_failed) {
            metrics::fanout_request(FanoutKind::List, FanoutResult::Failed);
            return Err(Problem::RegionsFailed { regions: failed });
        }
        let result = if failed.is_empty() {
            FanoutResult::Complete
        } else {
            FanoutResult::Partial
        };
        metrics::fanout_request(FanoutKind::List, result);
        let merged = merge::merge(lists, route.order, cursor.as_ref(), page.limit);
        let body = page::render(&merged.items, merged.more, &reports);
        Ok(json_response(StatusCode::OK, body))
    }
}

/// Request headers for a region whose answer the router reads and merges: the page is the
/// router's own, so conditions and ranges of the client's (which would get a region's 304 or
/// 206) are not passed on, and the answer must come uncompressed to be parsed.
pub(super) fn for_merging(headers: &mut http::HeaderMap) {
    use http::header::{
        ACCEPT_ENCODING, IF_MATCH, IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_RANGE, IF_UNMODIFIED_SINCE,
        RANGE,
    };
    for name in [
        RANGE,
        IF_RANGE,
        IF_MATCH,
        IF_NONE_MATCH,
        IF_MODIFIED_SINCE,
        IF_UNMODIFIED_SINCE,
    ] {
        headers.remove(name);
    }
    headers.insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
}

/// A JSON answer of the router's own, never cached (it is one moment of several regions).
pub(super) fn json_response(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}
