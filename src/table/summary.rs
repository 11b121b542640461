//! The routing table at a glance (docs/admin.md): what the console shows of the serving table,
//! built from the compiled table on request (admin only, never on the data path).

use serde::Serialize;

use super::{Override, RoutingTable, UpstreamProtocol};
use crate::scheme::IUID;

/// `GET /admin/routing-table/summary`: every region, country, service, scheme and override.
#[derive(Debug, Serialize)]
pub struct Summary<'t> {
    /// The table's `version`.
    pub version: &'t str,
    /// Where ids without routing bits go.
    pub default_region: &'t str,
    /// Regions in file order.
    pub regions: Vec<RegionSummary<'t>>,
    /// Countries the `countries:` map covers, by id.
    pub countries: Vec<CountrySummary<'t>>,
    /// Named service entities, by id.
    pub services: Vec<ServiceSummary<'t>>,
    /// `iuid`, then the declared schemes.
    pub schemes: Vec<SchemeSummary<'t>>,
    /// Overrides in file order (first match wins).
    pub overrides: &'t [Override],
}

/// A region and where it sends.
#[derive(Debug, Serialize)]
pub struct RegionSummary<'t> {
    /// Its name.
    pub name: &'t str,
    /// Its upstreams' URLs as written.
    pub upstreams: Vec<&'t str>,
    /// The protocol spoken to them (`http1` or `h2`).
    pub protocol: UpstreamProtocol,
}

/// One entry of the country map.
#[derive(Debug, Serialize)]
pub struct CountrySummary<'t> {
    /// The 8-bit country id of the iUID.
    pub id: u8,
    /// Its `code`, if the table gives one.
    pub code: Option<&'t str>,
    /// The region that owns it when no override matches.
    pub region: &'t str,
}

/// One named service entity.
#[derive(Debug, Serialize)]
pub struct ServiceSummary<'t> {
    /// The 8-bit service entity id of the iUID.
    pub id: u8,
    /// Its name.
    pub name: &'t str,
}

/// One scheme a route may use.
#[derive(Debug, Serialize)]
pub struct SchemeSummary<'t> {
    /// The name routes and overrides give.
    pub name: &'t str,
    /// Its `kind:` (docs/schemes.md).
    pub kind: &'static str,
}

impl RoutingTable {
    /// The table at a glance, borrowing from it.
    pub fn summary(&self) -> Summary<'_> {
        Summary {
            version: &self.version,
            default_region: &self.region(self.default_region).name,
            regions: self
                .regions
                .iter()
                .map(|r| RegionSummary {
                    name: &r.name,
                    upstreams: r.upstreams.iter().map(|u| u.url.as_str()).collect(),
                    protocol: r.upstreams.first().map(|u| u.protocol).unwrap_or_default(),
                })
                .collect(),
            countries: (0..=255u8)
                .filter_map(|id| {
                    let region = self.country_region(id)?;
                    Some(CountrySummary {
                        id,
                        code: self.country_code(id),
                        region: &self.region(region).name,
                    })
                })
                .collect(),
            services: (0..=255u8)
                .filter_map(|id| {
                    Some(ServiceSummary {
                        id,
                        name: self.service_name(id)?,
                    })
                })
                .collect(),
            schemes: std::iter::once(SchemeSummary {
                name: IUID,
                kind: "iuid",
            })
            .chain(self.schemes.iter().map(|s| SchemeSummary {
                name: &s.name,
                kind: s.kind.name(),
            }))
            .collect(),
            overrides: &self.overrides,
        }
    }
}
