//! `header:` routes (docs/config.md): a request header holding an id, e.g. `x-entity-id`; its value
//! trimmed is the id's text.

use std::borrow::Cow;

use http::header::HeaderName;
use serde::Deserialize;

use super::{scheme_or_default, Kind, Route, RouteError, Token};
use crate::extract::graphql::plan::ParseLimits;

/// A `header:` route's keys.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Spec {
    /// The header's name.
    header: String,
    /// The scheme of the route's ids (docs/schemes.md); default `iuid`.
    #[serde(default)]
    scheme: Option<String>,
}

impl Kind for Spec {
    fn scheme(&self) -> Option<&str> {
        self.scheme.as_deref()
    }

    fn compile(self, routes: &mut Vec<Route>, _: ParseLimits) -> Result<(), RouteError> {
        let name = HeaderName::from_bytes(self.header.as_bytes()).map_err(|_| {
            RouteError::new("header", format!("`{}` is not a header name", self.header))
        })?;
        let scheme = scheme_or_default(self.scheme)?;
        routes.push(Route::Header(HeaderRoute { name, scheme }));
        Ok(())
    }
}

/// A compiled `header:` route.
#[derive(Debug)]
pub struct HeaderRoute {
    name: HeaderName,
    scheme: String,
}

impl HeaderRoute {
    /// The id's token, if the request has the header (borrowed: no allocation).
    pub(super) fn token<'q>(
        &self,
        header: &impl Fn(&HeaderName) -> Option<&'q [u8]>,
    ) -> Option<Token<'_, 'q>> {
        let value = header(&self.name)?;
        Some(Token {
            text: Cow::Borrowed(value.trim_ascii()),
            scheme: &self.scheme,
        })
    }
}
