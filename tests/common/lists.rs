//! A regional list endpoint for the fan-out tests: a real HTTP server holding a dataset of
//! items with iUIDs, answering `GET <any path>?limit=&before=|after=` the way docs/fanout.md asks of
//! each region (items strictly beyond the cursor, ordered by (creation time, id text), at most
//! `limit`), or failing in a chosen way.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use iuid::Iuid;
use serde_json::{json, Value};

use super::{serve, url};

/// How the region answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// As docs/fanout.md asks.
    Normal,
    /// Never answers within the test (sleeps 30 s).
    Hang,
    /// This status, with a JSON error body.
    Status(u16),
    /// `<html>…`, not JSON.
    NotJson,
    /// JSON without an array at `/items`.
    NoArray,
    /// One item whose id is not an iUID.
    BadId,
    /// A valid answer padded past this many bytes.
    Huge(usize),
    /// This status with an RFC 9457 problem+json body of type
    /// `urn:example:problem:maintenance`, title `Down for maintenance`.
    Problem(u16),
}

/// One item of a region: its creation time, its id text and the region that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub ms: u64,
    pub id: String,
}

impl Item {
    /// An item with an iUID minted at `ms` (country 3, service 1) with random bits `rand`.
    pub fn new(ms: u64, rand: u64) -> Item {
        Item {
            ms,
            id: Iuid::from_fields(ms, 3, 1, rand).to_string(),
        }
    }
}

/// A list endpoint standing for one region.
#[derive(Clone)]
pub struct ListRegion {
    pub name: &'static str,
    pub addr: std::net::SocketAddr,
    pub items: Arc<Mutex<Vec<Item>>>,
    pub mode: Arc<Mutex<Mode>>,
    /// Requests received, and the last one's path and query.
    pub hits: Arc<AtomicUsize>,
    pub last_target: Arc<Mutex<String>>,
    pub last_headers: Arc<Mutex<http::HeaderMap>>,
}

impl ListRegion {
    pub async fn start(name: &'static str) -> ListRegion {
        let region = ListRegion {
            name,
            addr: "127.0.0.1:0".parse().expect("addr"),
            items: Arc::default(),
            mode: Arc::new(Mutex::new(Mode::Normal)),
            hits: Arc::default(),
            last_target: Arc::default(),
            last_headers: Arc::default(),
        };
        let state = region.clone();
        let app = axum::Router::new().fallback(move |req: Request| {
            let state = state.clone();
            async move { state.answer(req).await }
        });
        ListRegion {
            addr: serve(app).await,
            ..region
        }
    }

    pub fn url(&self) -> String {
        url(self.addr)
    }

    pub fn set(&self, items: Vec<Item>) {
        *self.items.lock().expect("items") = items;
    }

    pub fn mode(&self, mode: Mode) {
        *self.mode.lock().expect("mode") = mode;
    }

    async fn answer(&self, req: Request) -> Response {
        self.hits.fetch_add(1, Ordering::SeqCst);
        let target = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_default();
        *self.last_target.lock().expect("target") = target;
        *self.last_headers.lock().expect("headers") = req.headers().clone();
        let mode = self.mode.lock().expect("mode").clone();
        let asc = req.uri().path().ends_with("-asc");
        let query = req.uri().query().unwrap_or("").to_owned();
        drop(req);
        let page = || self.page(&query, asc);
        match mode {
            Mode::Normal => axum::Json(page()).into_response(),
            Mode::Hang => {
                tokio::time::sleep(std::time::Duration::from_secs(30)).await;
                axum::Json(page()).into_response()
            }
            Mode::Status(s) => {
                let status = http::StatusCode::from_u16(s).expect("status");
                (status, axum::Json(json!({"error": "down"}))).into_response()
            }
            Mode::NotJson => "<html>maintenance</html>".into_response(),
            Mode::NoArray => axum::Json(json!({"items": {"not": "a list"}})).into_response(),
            Mode::BadId => axum::Json(json!({"items": [{"id": "order-42"}]})).into_response(),
            Mode::Problem(s) => {
                let status = http::StatusCode::from_u16(s).expect("status");
                let body = json!({
                    "type": "urn:example:problem:maintenance",
                    "title": "Down for maintenance",
                    "status": s,
                });
                (
                    status,
                    [("content-type", "application/problem+json")],
                    body.to_string(),
                )
                    .into_response()
            }
            Mode::Huge(bytes) => {
                let mut value = page();
                value["padding"] = json!("x".repeat(bytes));
                axum::Json(value).into_response()
            }
        }
    }

    /// docs/fanout.md on the region's side; `asc` for an oldest-first list (paths ending `-asc`).
    fn page(&self, query: &str, asc: bool) -> Value {
        let mut limit = 50usize;
        let mut before = None;
        let mut after = None;
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            match &*k {
                "limit" => limit = v.parse().expect("the router sends a numeric limit"),
                "before" => before = Some(key_of(&v)),
                "after" => after = Some(key_of(&v)),
                _ => {}
            }
        }
        let mut items: Vec<(u64, String)> = self
            .items
            .lock()
            .expect("items")
            .iter()
            .map(|i| (i.ms, i.id.clone()))
            .collect();
        if let Some(b) = &before {
            items.retain(|k| k < b);
            items.sort_by(|x, y| y.cmp(x));
        } else if let Some(a) = &after {
            items.retain(|k| k > a);
            items.sort();
        } else if asc {
            items.sort();
        } else {
            items.sort_by(|x, y| y.cmp(x));
        }
        items.truncate(limit);
        let list: Vec<Value> = items
            .iter()
            .map(|(ms, id)| json!({"id": id, "region": self.name, "created_ms": ms}))
            .collect();
        json!({ "items": list })
    }
}

/// The sort key of an iUID's text: (creation time, canonical text).
pub fn key_of(text: &str) -> (u64, String) {
    let id: Iuid = text.parse().expect("an iUID cursor");
    (id.unix_ts_ms(), id.to_string())
}
