//! What an id is and where it goes, as JSON: shared by the `decode` and `resolve` commands
//! (docs/cli.md) and the admin API's `/admin/resolve/{id}` (docs/admin.md).

use iuid::Iuid;
use serde_json::{json, Map, Value};

use crate::scheme::iuid::IuidKey;
use crate::scheme::{Key, Kind, SchemeError, IUID};
use crate::table::{rfc3339_ms, ResolveError, RoutingTable};

/// Why an id cannot be decoded or resolved, for a command's exit 1.
#[derive(Debug)]
pub enum InspectError {
    /// Not a valid id of its scheme (or, for `decode`, a UUID of another version).
    Parse(SchemeError),
    /// A valid id that no region owns.
    Resolve(ResolveError),
    /// No scheme of that name (a table scheme needs `--config`).
    UnknownScheme(String),
}

impl std::fmt::Display for InspectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InspectError::Parse(SchemeError::Iuid(e)) => write!(f, "not an iUID: {e}"),
            InspectError::Parse(e) => write!(f, "not a valid id of its scheme: {e}"),
            InspectError::Resolve(e) => write!(f, "{e}"),
            InspectError::UnknownScheme(name) => write!(
                f,
                "no scheme `{name}`: `iuid` is built in, others are declared in the routing \
                 table (give --config)"
            ),
        }
    }
}

/// The fields of an iUID (docs/cli.md `decode`): `id`, `ts_ms`, `created_at`, `ver`, `ver1`,
/// `country`, `service_entity`, `rand`; with a table, `country_code`, `service` and `region`
/// where the table names them.
pub fn decode(id: &Iuid, table: Option<&RoutingTable>) -> Value {
    let mut out = Map::new();
    out.insert("id".into(), json!(id.to_string()));
    out.insert("ts_ms".into(), json!(id.unix_ts_ms()));
    out.insert("created_at".into(), json!(rfc3339_ms(id.unix_ts_ms())));
    out.insert("ver".into(), json!(8));
    out.insert("ver1".into(), json!(id.ver1()));
    out.insert("country".into(), json!(id.country()));
    out.insert("service_entity".into(), json!(id.service_entity()));
    out.insert("rand".into(), json!(format!("{:#x}", id.rand())));
    if let Some(t) = table {
        if let Some(code) = t.country_code(id.country()) {
            out.insert("country_code".into(), json!(code));
        }
        if let Some(name) = t.service_name(id.service_entity()) {
            out.insert("service".into(), json!(name));
        }
    }
    Value::Object(out)
}

/// Parses `text` as an id of the scheme called `scheme` for `decode` (docs/schemes.md): its fields,
/// creation time and canonical text. For `iuid`, a UUID of another version is an error here.
pub fn decode_text(
    scheme: &str,
    text: &str,
    table: Option<&RoutingTable>,
) -> Result<Value, InspectError> {
    let text = text.trim().as_bytes();
    if scheme == IUID {
        let id = Iuid::parse(text).map_err(|e| InspectError::Parse(SchemeError::Iuid(e)))?;
        return Ok(decode(&id, table));
    }
    let kind = table
        .and_then(|t| t.scheme(scheme))
        .map(|(_, kind)| kind)
        .ok_or_else(|| InspectError::UnknownScheme(scheme.to_owned()))?;
    let key = kind.parse(text).map_err(InspectError::Parse)?;
    Ok(describe(scheme, kind, &key))
}

/// An id of a table scheme as JSON: `id`, `scheme`, `kind`, its fields, `key` for a composite,
/// and `ts_ms`/`created_at` where the kind carries a creation time.
fn describe(scheme: &str, kind: &Kind, key: &Key) -> Value {
    let mut out = Map::new();
    out.insert("id".into(), json!(key.to_string()));
    out.insert("scheme".into(), json!(scheme));
    out.insert("kind".into(), json!(kind.name()));
    for (i, name) in kind.fields().iter().enumerate() {
        out.insert((*name).into(), json!(kind.field(key, i)));
    }
    if let Key::Composite(c) = key {
        out.insert("key".into(), json!(String::from_utf8_lossy(c.key)));
    }
    if let Some(ms) = kind.created_ms(key) {
        out.insert("ts_ms".into(), json!(ms));
        out.insert("created_at".into(), json!(rfc3339_ms(ms)));
    }
    Value::Object(out)
}

/// The routing decision for `text`, an id of the scheme called `scheme` (docs/cli.md `resolve`):
/// the decoded id, `region`, `upstreams` and the `rule` that matched (with the override's
/// text when one did).
pub fn resolve_text(scheme: &str, text: &str, table: &RoutingTable) -> Result<Value, InspectError> {
    let (key, decision) = match table.resolve_text(scheme, text.trim().as_bytes()) {
        Ok(resolved) => resolved,
        Err(ResolveError::Malformed(e)) => return Err(InspectError::Parse(e)),
        Err(ResolveError::UnknownScheme(name)) => return Err(InspectError::UnknownScheme(name)),
        Err(e) => return Err(InspectError::Resolve(e)),
    };
    let region = table.region(decision.region);
    let mut out = match &key {
        Key::Iuid(IuidKey::Iuid(iuid)) => decode(iuid, Some(table)),
        Key::Iuid(IuidKey::NoRoutingBits(uuid)) => {
            json!({ "id": uuid.to_string(), "ver": uuid.version() })
        }
        other => match table.scheme(scheme) {
            Some((_, kind)) => describe(scheme, kind, other),
            None => json!({ "id": other.to_string() }),
        },
    };
    out["region"] = json!(region.name);
    out["upstreams"] = json!(region.upstreams.iter().map(|u| &u.url).collect::<Vec<_>>());
    out["rule"] = json!(decision.rule);
    match decision.rule {
        crate::table::Rule::Override { index } => {
            out["rule"]["override"] = json!(table.overrides.get(index));
        }
        // The move as the table says (its phase on a running edge: /admin/moves).
        crate::table::Rule::Move { index } => out["rule"]["move"] = json!(table.moves.get(index)),
        _ => {}
    }
    out["table_version"] = json!(table.version);
    Ok(out)
}
