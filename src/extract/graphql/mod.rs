//! Ids in GraphQL requests (docs/config.md `graphql:` routes, docs/data-path.md): root
//! `node(id:)` and `nodes(ids:)`, and the `id_arguments` of root fields of queries and
//! mutations.
//!
//! The GraphQL-over-HTTP forms read here: `POST` with `application/json` (one operation, or a
//! batch array), `POST` with `application/graphql` (the raw document), and `GET` with
//! URL-encoded `query`, `variables`, `operationName`, `extensions`. Persisted queries sent by
//! hash only (no document) are routed by configured variable names and by the route's
//! `id_arguments` read in `variables` as a document passing them would.
//!
//! One reading (docs/data-path.md, "GraphQL requests"): what GraphQL servers could read
//! otherwise is refused, 400 `ambiguous-graphql` ([`GraphqlError::Ambiguous`]): a `GET`
//! parameter repeated with different values (graphql-http, express-graphql and Hono execute
//! the first, Apollo Server refuses), a `POST` whose URL carries a parameter its body does
//! not agree with (express-graphql and Hono execute the URL's), a JSON member given twice
//! (in the operation, `variables` or `extensions`), an integer id variable beyond 2^53.
//!
//! Cost: a cold document is parsed with `apollo-parser` under token and depth limits, and its
//! plan cached by shape ([`scan`], [`cache`]); later requests with the same shape only scan
//! for string literals, look the plan up, and read the ids it names.

pub mod cache;
pub mod plan;
pub mod scan;
mod unique;
mod variables;

use std::borrow::Cow;
use std::cell::RefCell;

use serde::Deserialize;
use serde_json::Value;

use super::json::Numbers;
use super::Access;
use cache::PlanCache;
use plan::{ArgPath, IdSource, ParseLimits, SplitNodes};
use scan::Literal;
use unique::{decoding, json_param, unique};
use variables::{push_at, push_value};

/// Variables read from a persisted query (sent by hash only) when none are configured.
pub const DEFAULT_PERSISTED_ID_VARIABLES: [&str; 3] = ["id", "ids", "nodeId"];

/// The argument paths of root fields read when a route names none (Relay's convention:
/// `order(id:)`, `cancelOrder(input: {id:})`), docs/config.md `id_arguments`.
pub const DEFAULT_ID_ARGUMENTS: [&str; 2] = ["id", "input.id"];

/// Plans kept per GraphQL route.
const CACHE_CAPACITY: usize = 1024;
/// Documents larger than this are planned every time rather than cached.
const CACHE_MAX_SHAPE: usize = 64 << 10;

/// Where a cache miss may be parsed.
///
/// A cold parse costs about 30 µs per KiB; on an async worker that delays every other
/// connection of the worker. Callers on a worker pass [`ColdParse::SmallOnly`] and, on
/// [`GraphqlError::ParseElsewhere`], retry with [`ColdParse::Here`] on the blocking pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColdParse {
    /// Any document may be parsed on this thread.
    Here,
    /// Cold parses of at most [`INLINE_PARSE_MAX`] bytes in total per request (all the
    /// documents of a batch together); cache hits are always served.
    SmallOnly,
}

/// Most document bytes one request may cold-parse on an async worker (about 100 µs of
/// parsing), summed over the documents of a batch.
pub const INLINE_PARSE_MAX: usize = 4 << 10;

/// The cold-parse allowance of one request: under [`ColdParse::SmallOnly`] the cache-missing
/// documents of the request, together, may use [`INLINE_PARSE_MAX`] bytes, so that a batch of
/// many small distinct documents is bounded like one large document.
#[derive(Debug)]
struct ColdBudget {
    /// Bytes of cold documents still allowed here; `None` is unbounded ([`ColdParse::Here`]).
    left: Option<usize>,
}

impl ColdBudget {
    fn new(cold: ColdParse) -> ColdBudget {
        ColdBudget {
            left: match cold {
                ColdParse::Here => None,
                ColdParse::SmallOnly => Some(INLINE_PARSE_MAX),
            },
        }
    }

    /// Whether a cache-missing document of `len` bytes may be parsed on this thread; if so,
    /// its bytes are charged to the request.
    fn admit(&mut self, len: usize) -> bool {
        match &mut self.left {
            None => true,
            Some(left) if len <= *left => {
                *left -= len;
                true
            }
            Some(_) => false,
        }
    }
}

/// Why the ids of a GraphQL request cannot be read (answered 400, except `ParseElsewhere`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GraphqlError {
    /// Under [`ColdParse::SmallOnly`], the request's cache-missing documents come to more than
    /// [`INLINE_PARSE_MAX`] bytes: call again with [`ColdParse::Here`] off the async workers.
    ParseElsewhere,
    /// The body or query string is not a GraphQL request: the decoder's message.
    Invalid(String),
    /// GraphQL servers could read the request another way than the router: why.
    Ambiguous(String),
}

impl std::fmt::Display for GraphqlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GraphqlError::ParseElsewhere => f.write_str("the document needs a cold parse"),
            GraphqlError::Invalid(m) | GraphqlError::Ambiguous(m) => f.write_str(m),
        }
    }
}

/// One `graphql:` route: its endpoint path, persisted-query variables and plan cache.
#[derive(Debug)]
pub struct GraphqlRoute {
    /// The endpoint path, matched exactly (e.g. `/graphql`).
    pub path: String,
    persisted_id_variables: Vec<String>,
    /// The scheme name of the route's ids.
    scheme: String,
    limits: ParseLimits,
    cache: PlanCache,
    split_nodes: bool,
    /// The argument paths read on root fields (`id_arguments`).
    id_arguments: Box<[ArgPath]>,
    /// How an integer id in `variables` is read (`json_numbers`, docs/config.md).
    numbers: Numbers,
}

/// Routes are equal when they serve the same endpoint (the cache is a detail).
impl PartialEq for GraphqlRoute {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path
    }
}

impl Eq for GraphqlRoute {}

/// One operation of a request, as JSON (GraphQL over HTTP). A member given twice is an
/// error (serde's `duplicate field`), in `variables` and `extensions` too ([`Unique`]).
#[derive(Debug, Default, Deserialize)]
struct Operation<'a> {
    #[serde(borrow, default)]
    query: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "operationName")]
    operation_name: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "unique")]
    variables: Option<Value>,
    #[serde(default, deserialize_with = "unique")]
    extensions: Option<Value>,
}

thread_local! {
    /// The literal list of the document being read, reused across requests on a thread.
    static LITERALS: RefCell<Vec<Literal>> = const { RefCell::new(Vec::new()) };
}

impl GraphqlRoute {
    /// The scheme name of the route's ids.
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// A route for `path` whose ids are of the scheme called `scheme`; `persisted_id_variables` empty means the
    /// defaults.
    pub fn new(
        path: String,
        persisted_id_variables: Vec<String>,
        scheme: String,
        limits: ParseLimits,
    ) -> Self {
        let persisted_id_variables = if persisted_id_variables.is_empty() {
            DEFAULT_PERSISTED_ID_VARIABLES.map(String::from).to_vec()
        } else {
            persisted_id_variables
        };
        GraphqlRoute {
            path,
            persisted_id_variables,
            scheme,
            limits,
            cache: PlanCache::new(CACHE_CAPACITY, CACHE_MAX_SHAPE),
            split_nodes: false,
            id_arguments: DEFAULT_ID_ARGUMENTS
                .iter()
                .map(|p| p.split('.').map(Box::from).collect())
                .collect(),
            numbers: Numbers::Safe,
        }
    }

    /// The route reading integer ids in `variables` as `numbers` says (`json_numbers`).
    pub fn with_numbers(mut self, numbers: Numbers) -> Self {
        self.numbers = numbers;
        self
    }

    /// The route reading `id_arguments` on root fields instead of [`DEFAULT_ID_ARGUMENTS`]
    /// (`[]`: only a query's `node` and `nodes`); parsed with [`plan::arg_paths`].
    pub fn with_id_arguments(mut self, id_arguments: Box<[ArgPath]>) -> Self {
        self.id_arguments = id_arguments;
        self
    }

    /// The route with `split_nodes` set as given (docs/fanout.md).
    pub fn with_split_nodes(mut self, split_nodes: bool) -> Self {
        self.split_nodes = split_nodes;
        self
    }

    /// Whether a `nodes(ids: $var)` over several regions is split by region.
    pub fn split_nodes(&self) -> bool {
        self.split_nodes
    }

    /// The root `nodes(ids: $var)` of a `POST` JSON body holding one operation, when its
    /// variable holds every id of the request (given as a list): the request can be split
    /// by region. `None` for anything else (a batch, a raw document, ids in literals or in
    /// several fields), which keeps docs/data-path.md's one-region rule.
    pub fn split_of(&self, content_type: Option<&[u8]>, body: &[u8]) -> Option<SplitNodes> {
        if content_type.is_some_and(is_raw_document) {
            return None;
        }
        let op: Operation = serde_json::from_slice(body).ok()?;
        let query = op.query.as_deref()?;
        let list = op.variables.as_ref()?;
        let operation_name = op.operation_name.as_deref().filter(|n| !n.is_empty());
        LITERALS.with(|cell| {
            let mut literals = cell.borrow_mut();
            let entry = self.entry(query, &mut literals, operation_name, |_| true)?;
            let plan = entry.plan.as_ref().ok()?;
            // A mutation is never split: it would write in several regions.
            let split = plan.split.clone().filter(|_| !plan.mutation)?;
            list.get(&*split.variable)?.is_array().then_some(split)
        })
    }

    /// How many document plans are cached.
    pub fn cached_plans(&self) -> usize {
        self.cache.len()
    }

    /// Ids of a `GET` request: its URL query string (GraphQL over HTTP §GET), and whether it
    /// is a read (a query) or a write (a mutation, which GraphQL over HTTP refuses over
    /// `GET`, but which is still a write here). A `GET` with none of the GraphQL parameters
    /// (a browser opening GraphiQL, a probe) is no GraphQL request: it has no ids, and the
    /// `unrouted` policy decides where it goes.
    pub fn ids_from_query(
        &self,
        query: &str,
        cold: ColdParse,
        out: &mut Vec<Vec<u8>>,
    ) -> Result<Access, GraphqlError> {
        let mut op = Operation::default();
        let mut variables = None;
        let mut extensions = None;
        let is_graphql = form_urlencoded::parse(query.as_bytes())
            .any(|(k, _)| matches!(&*k, "query" | "operationName" | "variables" | "extensions"));
        if !is_graphql {
            return Ok(Access::Read);
        }
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            let slot = match &*k {
                "query" => &mut op.query,
                "operationName" => &mut op.operation_name,
                "variables" => &mut variables,
                "extensions" => &mut extensions,
                _ => continue,
            };
            once(&k, slot, v)?;
        }
        op.variables = json_param("variables", variables)?;
        op.extensions = json_param("extensions", extensions)?;
        // Persisted queries over `GET` are queries (GraphQL over HTTP §GET).
        self.operation(&op, &mut ColdBudget::new(cold), out)
            .map(|access| match op.query.is_some() {
                true => access,
                false => Access::Read,
            })
    }

    /// Whether a `POST`'s URL query string (`url_query`) agrees with its body: none of the
    /// GraphQL parameters in it, or each with the value the body has. express-graphql and
    /// Hono execute the URL's `query`, `variables`, `operationName` and `extensions` before
    /// the body's, the router reads the body: they must not differ.
    ///
    /// Errors: [`GraphqlError::Ambiguous`] (or `Invalid` for a URL parameter that is no JSON).
    pub fn url_agrees(
        &self,
        url_query: &str,
        content_type: Option<&[u8]>,
        body: &[u8],
    ) -> Result<(), GraphqlError> {
        let named = |k: &str| matches!(k, "query" | "operationName" | "variables" | "extensions");
        if url_query.is_empty()
            || !form_urlencoded::parse(url_query.as_bytes()).any(|(k, _)| named(&k))
        {
            return Ok(());
        }
        let (mut query, mut name, mut variables, mut extensions) = (None, None, None, None);
        for (k, v) in form_urlencoded::parse(url_query.as_bytes()) {
            let slot = match &*k {
                "query" => &mut query,
                "operationName" => &mut name,
                "variables" => &mut variables,
                "extensions" => &mut extensions,
                _ => continue,
            };
            once(&k, slot, v)?;
        }
        let disagree = |what: &str| {
            GraphqlError::Ambiguous(format!(
                "the URL's `{what}` is not the body's: some GraphQL servers execute the URL's, \
                 the router reads the body; send it in one place"
            ))
        };
        let op: Operation = match content_type.is_some_and(is_raw_document) {
            true => Operation {
                query: std::str::from_utf8(body).ok().map(Cow::Borrowed),
                ..Operation::default()
            },
            false => match body.iter().find(|b| !b.is_ascii_whitespace()) {
                Some(b'[') => return Err(disagree("parameters (beside a batch)")),
                _ => serde_json::from_slice(body).map_err(|e| decoding("the JSON body", e))?,
            },
        };
        if query.is_some() && query.as_deref() != op.query.as_deref() {
            return Err(disagree("query"));
        }
        if name.is_some() && name.as_deref() != op.operation_name.as_deref() {
            return Err(disagree("operationName"));
        }
        for (what, text, body_value) in [
            ("variables", variables, &op.variables),
            ("extensions", extensions, &op.extensions),
        ] {
            if text.is_some() && json_param(what, text)?.as_ref() != body_value.as_ref() {
                return Err(disagree(what));
            }
        }
        Ok(())
    }

    /// Ids of a `POST` body: raw document for `application/graphql`, else JSON (one operation
    /// or a batch array), which includes `application/json` and `application/graphql+json`;
    /// and whether the request writes: any mutation in it, or a persisted query sent by hash
    /// (its document unknown here) does.
    pub fn ids_from_body(
        &self,
        content_type: Option<&[u8]>,
        body: &[u8],
        cold: ColdParse,
        out: &mut Vec<Vec<u8>>,
    ) -> Result<Access, GraphqlError> {
        if content_type.is_some_and(is_raw_document) {
            let text = std::str::from_utf8(body)
                .map_err(|e| GraphqlError::Invalid(format!("the document is not UTF-8: {e}")))?;
            let op = Operation {
                query: Some(Cow::Borrowed(text)),
                ..Operation::default()
            };
            return self.operation(&op, &mut ColdBudget::new(cold), out);
        }
        let first = body.iter().find(|b| !b.is_ascii_whitespace());
        if first == Some(&b'[') {
            let batch: Vec<Operation> =
                serde_json::from_slice(body).map_err(|e| decoding("invalid JSON batch", e))?;
            if batch.is_empty() {
                return Err(GraphqlError::Invalid("empty batch".into()));
            }
            // One allowance for the whole batch. When it runs out part way, the documents
            // already parsed are cached, so the retry off the worker finds them.
            let mut budget = ColdBudget::new(cold);
            let mut access = Access::Read;
            for op in &batch {
                access = access.and(self.operation(op, &mut budget, out)?);
            }
            Ok(access)
        } else {
            let op: Operation =
                serde_json::from_slice(body).map_err(|e| decoding("invalid JSON body", e))?;
            self.operation(&op, &mut ColdBudget::new(cold), out)
        }
    }

    /// The plan cache's entry for `query`: scanned into `literals`, looked up, and on a miss
    /// planned and cached if `may_parse(document length)` allows; `None` when it does not.
    fn entry(
        &self,
        query: &str,
        literals: &mut Vec<Literal>,
        operation_name: Option<&str>,
        may_parse: impl FnOnce(usize) -> bool,
    ) -> Option<std::sync::Arc<cache::Entry>> {
        let doc = query.as_bytes();
        let key = PlanCache::key(scan::scan(doc, literals), operation_name);
        if let Some(entry) = self.cache.get(key, doc, literals, operation_name) {
            return Some(entry);
        }
        if !may_parse(doc.len()) {
            return None;
        }
        let plan = plan::build(
            query,
            literals,
            operation_name,
            self.limits,
            &self.id_arguments,
        );
        let shape = scan::shape_of(doc, literals);
        Some(self.cache.insert(key, shape, operation_name, plan))
    }

    /// The ids of one operation, and whether it writes.
    fn operation(
        &self,
        op: &Operation<'_>,
        budget: &mut ColdBudget,
        out: &mut Vec<Vec<u8>>,
    ) -> Result<Access, GraphqlError> {
        let variables = match &op.variables {
            None | Some(Value::Null) => None,
            Some(Value::Object(map)) => Some(map),
            Some(_) => return Err(GraphqlError::Invalid("variables must be an object".into())),
        };
        let Some(query) = op.query.as_deref() else {
            let persisted = op
                .extensions
                .as_ref()
                .and_then(|e| e.get("persistedQuery"))
                .is_some();
            if !persisted {
                return Err(GraphqlError::Invalid(
                    "the request has no query and no persistedQuery extension".into(),
                ));
            }
            // Sent by hash only: the document is unknown here, so ids are where the
            // configured variables say.
            for name in &self.persisted_id_variables {
                if let Some(value) = variables.and_then(|v| v.get(name.as_str())) {
                    push_value(value, self.numbers, out)?;
                }
            }
            // And the route's `id_arguments` inside an object (`input.id`) in the variable
            // named after the argument, as a document passing `cancelOrder(input: $input)` is
            // read. A plain argument name (`id`) is a variable's name: the configured
            // `persisted_id_variables` decide those.
            for path in self.id_arguments.iter() {
                if let Some((first, rest @ [_, ..])) = path.split_first() {
                    if let Some(value) = variables.and_then(|v| v.get(&**first)) {
                        push_at(value, rest, self.numbers, out)?;
                    }
                }
            }
            // The document is unknown: it may be a mutation.
            return Ok(Access::Write);
        };
        let operation_name = op.operation_name.as_deref().filter(|n| !n.is_empty());
        LITERALS.with(|cell| {
            let mut literals = cell.borrow_mut();
            let entry = self
                .entry(query, &mut literals, operation_name, |len| {
                    budget.admit(len)
                })
                .ok_or(GraphqlError::ParseElsewhere)?;
            let plan = entry
                .plan
                .as_ref()
                .map_err(|e| GraphqlError::Invalid(e.to_string()))?;
            for source in plan.sources.iter() {
                match source {
                    IdSource::Literal(i) => push_literal(query, &literals, *i, out),
                    IdSource::Variable {
                        name,
                        path,
                        default,
                    } => match variables.and_then(|v| v.get(&**name)) {
                        Some(value) if !value.is_null() => push_at(value, path, self.numbers, out)?,
                        _ => {
                            for i in default.iter() {
                                push_literal(query, &literals, *i, out);
                            }
                        }
                    },
                }
            }
            Ok(match plan.mutation {
                true => Access::Write,
                false => Access::Read,
            })
        })
    }
}

/// Whether a `Content-Type` names the raw-document media type `application/graphql` itself
/// (any case, parameters allowed), not a longer type that starts the same way:
/// `application/graphql+json` (the request type of earlier GraphQL-over-HTTP drafts) and
/// `application/graphql-response+json` carry JSON, and are read as JSON.
fn is_raw_document(content_type: &[u8]) -> bool {
    const RAW: &[u8] = b"application/graphql";
    let content_type = content_type.trim_ascii_start();
    content_type.len() >= RAW.len()
        && content_type[..RAW.len()].eq_ignore_ascii_case(RAW)
        && matches!(
            content_type.get(RAW.len()),
            None | Some(b';' | b' ' | b'\t')
        )
}

/// Sets a query-string parameter's `slot` to `value`, unless it was given already with
/// another value: graphql-http, express-graphql and Hono execute the first, Apollo Server
/// refuses, `URLSearchParams`-less readers take the last.
fn once<'a>(
    name: &str,
    slot: &mut Option<Cow<'a, str>>,
    value: Cow<'a, str>,
) -> Result<(), GraphqlError> {
    match slot {
        Some(first) if *first != value => Err(GraphqlError::Ambiguous(format!(
            "the parameter `{name}` is given twice with different values: GraphQL servers \
             execute the first, the last, or refuse; send it once"
        ))),
        _ => {
            *slot = Some(value);
            Ok(())
        }
    }
}

fn push_literal(doc: &str, literals: &[Literal], index: u32, out: &mut Vec<Vec<u8>>) {
    if let Some(l) = literals.get(index as usize) {
        let text = &doc.as_bytes()[l.start as usize..l.end as usize];
        out.push(text.trim_ascii().to_vec());
    }
}

#[cfg(test)]
mod tests;
