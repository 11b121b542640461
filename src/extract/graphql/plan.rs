//! Extraction plans: where a GraphQL document keeps its node ids.
//!
//! A plan is built once per document shape (see `scan.rs`) with `apollo-parser`, and says
//! which string literals (by index) and which variables (by name and path inside their value,
//! with the literal indices of their defaults) hold the ids of the chosen operation's root
//! fields — through aliases, fragment spreads and inline fragments. Applying a plan to a
//! request needs no parsing at all.
//!
//! Which arguments hold ids (docs/config.md `id_arguments`): a query's root `node(id:)` and
//! `nodes(ids:)` always; and on every root field of a query or a mutation, the argument paths
//! the route names (`id`, `input.id`: Relay's convention). A path walks input objects,
//! written in the document (`input: {id: $id}`) or given as a variable (`input: $input`), and
//! lists. Nested fields' arguments are never read: the root field names the entity the
//! operation is about.

use std::collections::{HashMap, HashSet};

use apollo_parser::cst::{self, CstNode};
use apollo_parser::Parser;

use super::scan::Literal;

/// Where one id (or list of ids) of a request is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdSource {
    /// The content of the string literal with this index (document order).
    Literal(u32),
    /// A variable; when the request gives no value, its default's literals.
    Variable {
        /// The variable name, without `$`.
        name: Box<str>,
        /// The keys to follow inside the variable's value to the id (`input: $input` read
        /// by the argument path `input.id` is `["id"]`); empty: the value is the id (or a
        /// list of ids). A list met on the way is read item by item.
        path: ArgPath,
        /// Literal indices of the default value (`$id: ID = "…"`) at `path`, possibly a list.
        default: Box<[u32]>,
    },
}

/// An argument path split at its dots: `input.id` is `["input", "id"]` (docs/config.md
/// `id_arguments`).
pub type ArgPath = Box<[Box<str>]>;

/// Parses `id_arguments` entries: dot-separated names, each a GraphQL name
/// (`/[_A-Za-z][_0-9A-Za-z]*/`, GraphQL spec §2.1.9).
///
/// Errors: the entry that is not such a path, with why.
pub fn arg_paths(entries: &[String]) -> Result<Box<[ArgPath]>, String> {
    entries
        .iter()
        .map(|entry| {
            let names: ArgPath = entry.split('.').map(Box::from).collect();
            let is_name = |n: &str| {
                n.bytes().enumerate().all(|(i, b)| {
                    b == b'_' || b.is_ascii_alphabetic() || (i > 0 && b.is_ascii_digit())
                }) && !n.is_empty()
            };
            match names.iter().all(|n| is_name(n)) {
                true => Ok(names),
                false => Err(format!(
                    "`{entry}` is not an argument path: GraphQL names joined by dots, e.g. `input.id`"
                )),
            }
        })
        .collect()
}

/// What to read from requests of one document shape and operation name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// Every place an id is, in document order.
    pub sources: Box<[IdSource]>,
    /// The operation is a mutation: a write (docs/data-path.md "Reads and writes"), never
    /// split by region, never sent twice.
    pub mutation: bool,
    /// Set when the operation's only ids are one root `nodes(ids: $var)`: such a request
    /// can be split by region (docs/fanout.md `split_nodes`).
    pub split: Option<SplitNodes>,
}

/// A root `nodes(ids: $var)` that holds every id of an operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitNodes {
    /// The variable holding the ids, without `$`.
    pub variable: Box<str>,
    /// The field's key in the answer's `data`: its alias, or `nodes`.
    pub response_key: Box<str>,
}

/// Why a document has no plan (answered 400).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanError {
    /// The parser's first error, or a limit it hit.
    Syntax(String),
    /// Several operations and no `operationName` (GraphQL spec §6.1 `GetOperation`).
    AmbiguousOperation,
    /// `operationName` names no operation of the document.
    UnknownOperation(String),
    /// The document has no operation at all.
    NoOperation,
}

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlanError::Syntax(m) => write!(f, "GraphQL syntax error: {m}"),
            PlanError::AmbiguousOperation => {
                f.write_str("the document has several operations and no operationName")
            }
            PlanError::UnknownOperation(n) => write!(f, "no operation named `{n}` in the document"),
            PlanError::NoOperation => f.write_str("the document has no operation"),
        }
    }
}

/// Parser limits: a bound on the work a cold parse may do (`limits` in the router config).
#[derive(Debug, Clone, Copy)]
pub struct ParseLimits {
    /// Most lexer tokens.
    pub tokens: usize,
    /// Deepest nesting.
    pub depth: usize,
}

/// Parses `doc` and builds its plan for `operation_name`, reading `id_arguments` on root
/// fields (see the module docs).
pub fn build(
    doc: &str,
    literals: &[Literal],
    operation_name: Option<&str>,
    limits: ParseLimits,
    id_arguments: &[ArgPath],
) -> Result<Plan, PlanError> {
    let tree = Parser::new(doc)
        .token_limit(limits.tokens)
        .recursion_limit(limits.depth)
        .parse();
    if let Some(e) = tree.errors().next() {
        return Err(PlanError::Syntax(format!(
            "{} at byte {}",
            e.message(),
            e.index()
        )));
    }
    let document = tree.document();
    let mut operations = Vec::new();
    let mut fragments = HashMap::new();
    for def in document.definitions() {
        match def {
            cst::Definition::OperationDefinition(op) => operations.push(op),
            cst::Definition::FragmentDefinition(frag) => {
                if let Some(name) = frag.fragment_name().and_then(|n| n.name()) {
                    fragments.insert(name.text().to_string(), frag);
                }
            }
            _ => {}
        }
    }
    let op = choose_operation(&operations, operation_name)?;
    // A shorthand document (`{ … }`) is a query.
    let kind = op.operation_type();
    let mutation = kind.as_ref().is_some_and(|t| t.mutation_token().is_some());
    let query = kind.as_ref().is_none_or(|t| t.query_token().is_some());
    // A subscription is routed as unrouted, as before id arguments; a mutation reads only
    // the id arguments (`[]`: none, as before them).
    if !(query || mutation && !id_arguments.is_empty()) {
        return Ok(Plan {
            mutation,
            ..Plan::default()
        });
    }
    let mut b = Builder {
        literals,
        fragments: &fragments,
        defaults: HashMap::new(),
        sources: Vec::new(),
        visited: HashSet::new(),
        unindexed_literal: false,
        nodes_variables: Vec::new(),
        query,
        id_arguments,
    };
    if let Some(defs) = op.variable_definitions() {
        for def in defs.variable_definitions() {
            let Some(name) = def.variable().and_then(|v| v.name()) else {
                continue;
            };
            if let Some(value) = def.default_value().and_then(|d| d.value()) {
                b.defaults.insert(name.text().to_string(), value);
            }
        }
    }
    if let Some(set) = op.selection_set() {
        b.selection_set(&set);
    }
    if b.unindexed_literal {
        return Err(PlanError::Syntax(format!(
            "a node id is string literal number {} or later: too many literals",
            super::scan::MAX_LITERALS
        )));
    }
    let split = match (&*b.sources, &*b.nodes_variables) {
        ([IdSource::Variable { name, path, .. }], [only])
            if *name == only.variable && path.is_empty() =>
        {
            Some(only.clone())
        }
        _ => None,
    };
    Ok(Plan {
        sources: b.sources.into_boxed_slice(),
        mutation,
        split,
    })
}

fn choose_operation<'a>(
    operations: &'a [cst::OperationDefinition],
    name: Option<&str>,
) -> Result<&'a cst::OperationDefinition, PlanError> {
    match name.filter(|n| !n.is_empty()) {
        Some(want) => operations
            .iter()
            .find(|op| op.name().is_some_and(|n| n.text() == want))
            .ok_or_else(|| PlanError::UnknownOperation(want.to_owned())),
        None => match operations {
            [] => Err(PlanError::NoOperation),
            [only] => Ok(only),
            _ => Err(PlanError::AmbiguousOperation),
        },
    }
}

struct Builder<'a> {
    literals: &'a [Literal],
    fragments: &'a HashMap<String, cst::FragmentDefinition>,
    /// Each variable's default value, as written.
    defaults: HashMap<String, cst::Value>,
    sources: Vec<IdSource>,
    /// Fragments already expanded: a cycle (invalid, but sent) must not loop.
    visited: HashSet<String>,
    /// An id literal past the scanner's limit: the plan would miss it, so there is none.
    unindexed_literal: bool,
    /// Root `nodes` fields whose `ids` is one variable.
    nodes_variables: Vec<SplitNodes>,
    /// The operation is a query: its root `node` and `nodes` fields hold ids.
    query: bool,
    /// The argument paths read on every root field.
    id_arguments: &'a [ArgPath],
}

impl Builder<'_> {
    /// Root selections: `node(id:)`, `nodes(ids:)`, and fragments that contain them.
    fn selection_set(&mut self, set: &cst::SelectionSet) {
        for selection in set.selections() {
            match selection {
                cst::Selection::Field(field) => self.field(&field),
                cst::Selection::InlineFragment(inline) => {
                    if let Some(inner) = inline.selection_set() {
                        self.selection_set(&inner);
                    }
                }
                cst::Selection::FragmentSpread(spread) => {
                    let Some(name) = spread.fragment_name().and_then(|n| n.name()) else {
                        continue;
                    };
                    let name = name.text().to_string();
                    if !self.visited.insert(name.clone()) {
                        continue;
                    }
                    let fragments = self.fragments;
                    if let Some(inner) = fragments.get(&name).and_then(|f| f.selection_set()) {
                        self.selection_set(&inner);
                    }
                }
            }
        }
    }

    fn field(&mut self, field: &cst::Field) {
        let Some(name) = field.name() else { return };
        let Some(args) = field.arguments() else {
            return;
        };
        let wanted_arg = match &*name.text() {
            "node" if self.query => "id",
            "nodes" if self.query => "ids",
            _ => return self.id_arguments(&args),
        };
        for arg in args.arguments() {
            if arg.name().is_some_and(|n| n.text() == wanted_arg) {
                if let Some(value) = arg.value() {
                    if let (cst::Value::Variable(v), "ids") = (&value, wanted_arg) {
                        if let Some(variable) = v.name() {
                            let key = field.alias().and_then(|a| a.name()).unwrap_or(name.clone());
                            self.nodes_variables.push(SplitNodes {
                                variable: variable.text().to_string().into_boxed_str(),
                                response_key: key.text().to_string().into_boxed_str(),
                            });
                        }
                    }
                    self.value(&value);
                }
            }
        }
    }

    /// The configured argument paths of a root field other than `node` and `nodes`.
    fn id_arguments(&mut self, args: &cst::Arguments) {
        let paths = self.id_arguments;
        for arg in args.arguments() {
            let (Some(name), Some(value)) = (arg.name(), arg.value()) else {
                continue;
            };
            let name = name.text();
            for path in paths
                .iter()
                .filter(|p| p.first().is_some_and(|f| **f == *name))
            {
                self.at_path(&value, &path[1..]);
            }
        }
    }

    /// The ids at `path` inside an argument's `value`: through input objects and lists
    /// written in the document, and into a variable's value when one stands on the way.
    fn at_path(&mut self, value: &cst::Value, path: &[Box<str>]) {
        walk(value, path, &mut |found, rest| match (found, rest) {
            (_, []) => self.value(found),
            (cst::Value::Variable(v), rest) => self.variable(v, rest),
            _ => {}
        });
    }

    /// A variable holding ids at `path` inside its value, with its default's literals there.
    fn variable(&mut self, v: &cst::Variable, path: &[Box<str>]) {
        let Some(name) = v.name() else { return };
        let name = name.text().to_string();
        let mut default = Vec::new();
        if let Some(value) = self.defaults.get(&name).cloned() {
            // A default is constant (GraphQL spec §5.8.2): no variable stands in it.
            walk(&value, path, &mut |found, rest| {
                if rest.is_empty() {
                    self.literal_indices(found, &mut default);
                }
            });
        }
        self.sources.push(IdSource::Variable {
            name: name.into_boxed_str(),
            path: path.into(),
            default: default.into_boxed_slice(),
        });
    }

    /// An argument value: a literal, a variable, or a list of either.
    fn value(&mut self, value: &cst::Value) {
        match value {
            cst::Value::StringValue(s) => match self.literal_index(s) {
                Some(i) => self.sources.push(IdSource::Literal(i)),
                None => self.unindexed_literal = true,
            },
            cst::Value::Variable(v) => self.variable(v, &[]),
            cst::Value::ListValue(list) => {
                for item in list.values() {
                    self.value(&item);
                }
            }
            _ => {}
        }
    }

    fn literal_indices(&mut self, value: &cst::Value, out: &mut Vec<u32>) {
        match value {
            cst::Value::StringValue(s) => match self.literal_index(s) {
                Some(i) => out.push(i),
                None => self.unindexed_literal = true,
            },
            cst::Value::ListValue(list) => {
                for item in list.values() {
                    self.literal_indices(&item, out);
                }
            }
            _ => {}
        }
    }

    /// The scanner's index for a string value of the syntax tree, by its opening quote.
    fn literal_index(&self, s: &cst::StringValue) -> Option<u32> {
        let at = u32::from(s.syntax().text_range().start());
        self.literals
            .binary_search_by_key(&at, |l| l.quote)
            .ok()
            .map(|i| i as u32)
    }
}

/// The values at `path` inside `value`, through the input objects and lists written in the
/// document: `found(value, rest)` gets each value the path ends at (`rest` empty), and each
/// value that is not an object or a list where it goes on (a variable, whose value holds
/// the `rest`).
fn walk(value: &cst::Value, path: &[Box<str>], found: &mut impl FnMut(&cst::Value, &[Box<str>])) {
    let Some((key, rest)) = path.split_first() else {
        return found(value, path);
    };
    match value {
        cst::Value::ObjectValue(object) => {
            for field in object.object_fields() {
                if field.name().is_some_and(|n| *n.text() == **key) {
                    if let Some(inner) = field.value() {
                        walk(&inner, rest, found);
                    }
                }
            }
        }
        cst::Value::ListValue(list) => {
            for item in list.values() {
                walk(&item, path, found);
            }
        }
        other => found(other, path),
    }
}
