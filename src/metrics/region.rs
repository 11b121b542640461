//! One region's metric handles ([`RegionMetrics`]): the requests it answered by route kind
//! and status class, its upstreams' latency and errors, its shed requests, each looked up
//! once and then a few atomic adds per request.

use super::*;

/// How many values [`REQUESTS`]' `route` label takes: the route kinds, in [`RegionMetrics`]
/// index order (`RouteKind::ALL`'s), then `none`.
const ROUTES: usize = RouteKind::ALL.len() + 1;

fn route_label(route: Option<RouteKind>) -> &'static str {
    route.map_or("none", RouteKind::as_str)
}
/// The protocol a client spoke ([`REQUESTS`]' `protocol` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.0 and HTTP/1.1, plain or TLS.
    H1,
    /// HTTP/2: h2c, TLS h2, gRPC.
    H2,
    /// HTTP/3 over QUIC (docs/http3.md).
    H3,
}

impl Protocol {
    /// The protocol of a request whose version is `version` (`RequestView::version`'s
    /// text: `1.0`, `1.1`, `2`, `3`).
    pub fn of(version: &str) -> Protocol {
        match version {
            "2" => Protocol::H2,
            "3" => Protocol::H3,
            _ => Protocol::H1,
        }
    }

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::H1 => "h1",
            Protocol::H2 => "h2",
            Protocol::H3 => "h3",
        }
    }
}

/// Status classes, `1xx` … `5xx`.
const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// Index of a status code's class in [`CLASSES`].
fn class_index(status: u16) -> usize {
    match status {
        100..=199 => 0,
        200..=299 => 1,
        300..=399 => 2,
        400..=499 => 3,
        _ => 4,
    }
}

/// The metric handles of one region (or of `none`, for requests refused before a region was
/// chosen).
///
/// Looking a labelled metric up in the registry hashes its key and takes a shard lock: more
/// than the rest of the routing decision. Each handle is looked up once, on first use (so
/// series appear only when they have counts, as before), then reused: a request costs a few
/// atomic adds.
#[derive(Debug)]
pub struct RegionMetrics {
    /// The region name: a metric label and log field, shared rather than copied.
    pub label: Arc<str>,
    requests: [[[OnceLock<Counter>; 5]; ROUTES]; 3],
    upstream_duration: OnceLock<Histogram>,
    upstream_errors: [OnceLock<Counter>; ErrorKind::UPSTREAM.len()],
    shed: [OnceLock<Counter>; ShedReason::ALL.len()],
    /// Answered requests and those answered 5xx, readable (Prometheus handles are not) for
    /// the console's per-region rates (`crate::admin::rates`).
    answered: AtomicU64,
    answered_5xx: AtomicU64,
}

impl RegionMetrics {
    /// Handles for the region `label`.
    pub fn new(label: &str) -> RegionMetrics {
        RegionMetrics {
            label: label.into(),
            requests: Default::default(),
            upstream_duration: OnceLock::new(),
            upstream_errors: Default::default(),
            shed: Default::default(),
            answered: AtomicU64::new(0),
            answered_5xx: AtomicU64::new(0),
        }
    }

    /// `(answered, answered 5xx)` since the region first appeared.
    pub fn totals(&self) -> (u64, u64) {
        (
            self.answered.load(Ordering::Relaxed),
            self.answered_5xx.load(Ordering::Relaxed),
        )
    }

    fn shared_label(&self) -> SharedString {
        SharedString::from_shared(self.label.clone())
    }

    /// Counts one answered request, by the protocol it came in, the kind of route that
    /// found its id (`None`: no route matched) and its status class.
    pub fn request(&self, protocol: Protocol, route: Option<RouteKind>, status: u16) {
        // A kind's index in `RouteKind::ALL` is its discriminant (tested there).
        let r = route.map_or(ROUTES - 1, |kind| kind as usize);
        let c = class_index(status);
        self.answered.fetch_add(1, Ordering::Relaxed);
        if c == 4 {
            self.answered_5xx.fetch_add(1, Ordering::Relaxed);
        }
        self.requests[protocol as usize][r][c]
            .get_or_init(|| {
                handle();
                ::metrics::counter!(REQUESTS, "route" => route_label(route), "region" => self.shared_label(), "status" => CLASSES[c], "protocol" => protocol.as_str())
            })
            .increment(1);
    }

    /// Records one upstream exchange's time to response headers.
    pub fn upstream_duration(&self, seconds: f64) {
        self.upstream_duration
            .get_or_init(|| {
                handle();
                ::metrics::histogram!(UPSTREAM_DURATION, "region" => self.shared_label())
            })
            .record(seconds);
    }

    /// Counts one request shed for `reason` (docs/overload.md).
    pub fn shed(&self, reason: ShedReason) {
        let i = reason as usize;
        self.shed[i]
            .get_or_init(|| {
                handle();
                ::metrics::counter!(SHED, "region" => self.shared_label(), "reason" => reason.as_str())
            })
            .increment(1);
    }

    /// Counts one upstream-blamed failure; a client-blamed kind is counted by
    /// [`client_error`] instead, so it can never show against an upstream.
    pub fn upstream_error(&self, kind: ErrorKind) {
        let Some(k) = ErrorKind::UPSTREAM.iter().position(|e| *e == kind) else {
            return client_error(kind);
        };
        self.upstream_errors[k]
            .get_or_init(|| {
                handle();
                ::metrics::counter!(UPSTREAM_ERRORS, "region" => self.shared_label(), "kind" => kind.as_str())
            })
            .increment(1);
    }
}

/// The routing-decision counters of one scheme ([`DECISIONS`] with `scheme` and `rule`),
/// each looked up on first use and then reused, as [`RegionMetrics`]' are.
#[derive(Debug)]
pub struct DecisionCounters {
    scheme: SharedString,
    handles: [OnceLock<Counter>; RuleLabel::ALL.len()],
}

impl DecisionCounters {
    /// The counters of the scheme called `scheme` (`none` for requests without an id).
    pub fn new(scheme: &str) -> DecisionCounters {
        DecisionCounters {
            scheme: SharedString::from(scheme.to_owned()),
            handles: Default::default(),
        }
    }

    /// The counters of the built-in `iuid` scheme, shared process-wide.
    pub fn iuid() -> &'static DecisionCounters {
        static IUID: OnceLock<DecisionCounters> = OnceLock::new();
        IUID.get_or_init(|| DecisionCounters::new("iuid"))
    }

    /// The counters of requests without an id (`scheme="none"`), shared process-wide.
    pub fn none() -> &'static DecisionCounters {
        static NONE: OnceLock<DecisionCounters> = OnceLock::new();
        NONE.get_or_init(|| DecisionCounters::new("none"))
    }

    /// Counts one decision made by a rule of this kind.
    pub fn count(&self, rule: RuleLabel) {
        self.handles[rule as usize]
            .get_or_init(|| {
                handle();
                ::metrics::counter!(DECISIONS, "rule" => rule.as_str(), "scheme" => self.scheme.clone())
            })
            .increment(1);
    }
}
