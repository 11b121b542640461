//! What an id is and where it goes, as JSON: shared by the `decode` and `resolve` commands
//! (SPEC §3) and the admin API's `/admin/resolve/{id}` (SPEC §8).

use iuid::{Iuid, ParseError};
use serde_json::{json, Map, Value};

use crate::scheme::iuid::IuidKey;
use crate::scheme::{Key, Scheme};
use crate::table::{rfc3339_ms, ResolveError, RoutingTable};

/// Why an id cannot be decoded or resolved, for a command's exit 1.
#[derive(Debug)]
pub enum InspectError {
    /// Not a valid id text (or a UUID of another version, for `decode`).
    Parse(ParseError),
    /// A valid iUID that no region owns.
    Resolve(ResolveError),
}

impl std::fmt::Display for InspectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InspectError::Parse(e) => write!(f, "not an iUID: {e}"),
            InspectError::Resolve(e) => write!(f, "{e}"),
        }
    }
}

/// The fields of an iUID (SPEC §3 `decode`): `id`, `ts_ms`, `created_at`, `ver`, `ver1`,
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

/// Parses `text` as an iUID for `decode`: a UUID of another version is an error here.
pub fn decode_text(text: &str, table: Option<&RoutingTable>) -> Result<Value, InspectError> {
    let id = Iuid::parse(text.trim().as_bytes()).map_err(InspectError::Parse)?;
    Ok(decode(&id, table))
}

/// The routing decision for `text` (SPEC §3 `resolve`): the decoded id, `region`,
/// `upstreams` and the `rule` that matched (with the override's text when one did).
pub fn resolve_text(text: &str, table: &RoutingTable) -> Result<Value, InspectError> {
    let (key, decision) = match table.resolve_text(Scheme::Iuid, text.trim().as_bytes()) {
        Ok(resolved) => resolved,
        Err(ResolveError::Malformed(e)) => return Err(InspectError::Parse(e)),
        Err(e) => return Err(InspectError::Resolve(e)),
    };
    let region = table.region(decision.region);
    let mut out = match &key {
        Key::Iuid(IuidKey::Iuid(iuid)) => decode(iuid, Some(table)),
        Key::Iuid(IuidKey::NoRoutingBits(uuid)) => {
            json!({ "id": uuid.to_string(), "ver": uuid.version() })
        }
    };
    out["region"] = json!(region.name);
    out["upstreams"] = json!(region.upstreams.iter().map(|u| &u.url).collect::<Vec<_>>());
    out["rule"] = json!(decision.rule);
    if let crate::table::Rule::Override { index } = decision.rule {
        out["rule"]["override"] = json!(table.overrides.get(index));
    }
    out["table_version"] = json!(table.version);
    Ok(out)
}
