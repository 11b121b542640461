//! What the in-process router leaves in `tracing`: a layer, installed as the process's global
//! subscriber (the router's worker threads have no scoped one), that keeps every span with its
//! fields and ancestry and every access log event, for tests to read back by request id.
//!
//! Span ids are reused once a span closes, so each span is given a sequence number of its own
//! (kept in its extensions) and its ancestry is written down as those numbers when it is
//! created: a request span that has long closed still names its attempt spans.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, Once, PoisonError};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// The access log's target (docs/config.md `access_log`).
pub const ACCESS: &str = "iuid_router::access";

/// One span as it was created, with the fields recorded on it since.
#[derive(Debug, Clone)]
pub struct Captured {
    pub seq: u64,
    pub name: &'static str,
    pub target: String,
    pub level: Level,
    /// The sequence numbers of its ancestors, nearest first (explicit or contextual parents,
    /// as the registry resolved them).
    pub ancestors: Vec<u64>,
    pub fields: BTreeMap<String, String>,
}

impl Captured {
    /// The field's value as text (`""` when absent), without the quotes a `?` field adds.
    pub fn field(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", |v| v.trim_matches('"'))
    }
}

static SPANS: Mutex<BTreeMap<u64, Captured>> = Mutex::new(BTreeMap::new());
static ACCESS_LINES: Mutex<Vec<BTreeMap<String, String>>> = Mutex::new(Vec::new());
static NEXT: AtomicU64 = AtomicU64::new(0);

/// A span's sequence number, in its extensions.
struct Seq(u64);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A test that failed while another held the lock must not fail the rest.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Writes each field as text: strings as they are, anything else as `Debug` shows it.
struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

/// The layer: every span (any level, any target) and every access log event.
pub struct Capture;

impl<S> Layer<S> for Capture
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let seq = NEXT.fetch_add(1, Ordering::Relaxed);
        let ancestors = span
            .scope()
            .skip(1)
            .filter_map(|a| a.extensions().get::<Seq>().map(|s| s.0))
            .collect();
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        span.extensions_mut().insert(Seq(seq));
        let meta = attrs.metadata();
        lock(&SPANS).insert(
            seq,
            Captured {
                seq,
                name: meta.name(),
                target: meta.target().to_owned(),
                level: *meta.level(),
                ancestors,
                fields,
            },
        );
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(seq) = ctx
            .span(id)
            .and_then(|s| s.extensions().get::<Seq>().map(|s| s.0))
        else {
            return;
        };
        if let Some(span) = lock(&SPANS).get_mut(&seq) {
            values.record(&mut Fields(&mut span.fields));
        }
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if event.metadata().target() == ACCESS {
            let mut fields = BTreeMap::new();
            event.record(&mut Fields(&mut fields));
            lock(&ACCESS_LINES).push(fields);
        }
    }
}

/// Installs [`Capture`] as the global subscriber, once per process. With no filter, every
/// level is enabled, so the router's debug spans exist (they are disabled at its default
/// `info`).
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let subscriber = tracing_subscriber::registry().with(Capture);
        // Nothing else in a test binary sets one; were it set, the tests would find no spans.
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
}

/// Every span named `name` whose `request_id` field is `request_id`.
pub fn named_with_id(name: &str, request_id: &str) -> Vec<Captured> {
    lock(&SPANS)
        .values()
        .filter(|s| s.name == name && s.field("request_id") == request_id)
        .cloned()
        .collect()
}

/// Every span named `name` below (at any depth) the span numbered `ancestor`.
pub fn named_under(name: &str, ancestor: u64) -> Vec<Captured> {
    lock(&SPANS)
        .values()
        .filter(|s| s.name == name && s.ancestors.contains(&ancestor))
        .cloned()
        .collect()
}

/// The names of the spans below the span numbered `ancestor`, for a failure's message.
pub fn names_under(ancestor: u64) -> Vec<&'static str> {
    lock(&SPANS)
        .values()
        .filter(|s| s.ancestors.contains(&ancestor))
        .map(|s| s.name)
        .collect()
}

/// The access log lines whose `request_id` is `request_id`, each its fields.
pub fn access_lines(request_id: &str) -> Vec<BTreeMap<String, String>> {
    lock(&ACCESS_LINES)
        .iter()
        .filter(|l| l.get("request_id").map(|v| v.trim_matches('"')) == Some(request_id))
        .cloned()
        .collect()
}
