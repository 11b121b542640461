//! `regions.<name>.failover` (docs/failover.md): validated once every region is known,
//! each error at its key's line and column.

use std::collections::HashMap;

use super::load::{key, Validator};
use super::model::TableFile;
use super::{Failover, RegionId};

impl Validator<'_> {
    /// Each region's failover, in `file.regions` order: the named region must be another
    /// region of the table that fails over nowhere itself (one hop: no chain, no cycle),
    /// and `overprovisioning` within 1 to 10.
    pub(super) fn failovers(
        &mut self,
        file: &TableFile,
        names: &HashMap<&str, RegionId>,
    ) -> Vec<Option<Failover>> {
        let fails_over = |name: &str| {
            file.regions
                .0
                .iter()
                .any(|(n, spec)| n == name && spec.failover.is_some())
        };
        let mut out = Vec::with_capacity(file.regions.0.len());
        let mut seen = std::collections::HashSet::new();
        for (name, spec) in &file.regions.0 {
            if !seen.insert(name.as_str()) {
                // Reported as defined twice; no compiled region to attach it to.
                continue;
            }
            let Some(failover) = &spec.failover else {
                out.push(None);
                continue;
            };
            let at = |leaf: &str| {
                [
                    key("regions"),
                    key(name.clone()),
                    key("failover"),
                    key(leaf),
                ]
            };
            let target = failover.region.as_str();
            let region = if target == name {
                self.error(
                    &at("region"),
                    format!("region `{name}` cannot fail over to itself"),
                );
                None
            } else if let Some(&id) = names.get(target) {
                if fails_over(target) {
                    self.error(
                        &at("region"),
                        format!(
                            "region `{target}` fails over itself: a failover is one hop (no chain, no cycle)"
                        ),
                    );
                    None
                } else {
                    Some(id)
                }
            } else {
                let known: Vec<&str> = file.regions.0.iter().map(|(n, _)| n.as_str()).collect();
                self.error(
                    &at("region"),
                    format!(
                        "region `{target}` is not defined under `regions` (defined: {})",
                        known.join(", ")
                    ),
                );
                None
            };
            let overprovisioning = failover
                .overprovisioning
                .unwrap_or(Failover::OVERPROVISIONING);
            if !(1.0..=10.0).contains(&overprovisioning) {
                self.error(
                    &at("overprovisioning"),
                    format!("overprovisioning must be within 1 and 10, not {overprovisioning}"),
                );
            }
            out.push(region.map(|region| Failover {
                region,
                serves: failover.serves,
                overprovisioning,
            }));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::table::{load_source, Serves};

    fn table(regions: &str) -> String {
        format!("version: t\nregions:\n{regions}countries:\n  1: eu\ndefault_region: eu\n")
    }

    fn errors(regions: &str) -> Vec<String> {
        let source = crate::source::Source {
            path: "routing-table.yaml".into(),
            text: table(regions),
        };
        match load_source(&source) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn a_failover_compiles_with_its_defaults() {
        let text = table(
            "  eu: { upstreams: [\"http://127.0.0.1:1\"] }\n  ap:\n    upstreams: [\"http://127.0.0.1:2\"]\n    failover: { region: eu }\n",
        );
        let source = crate::source::Source {
            path: "routing-table.yaml".into(),
            text,
        };
        let t = load_source(&source).expect("valid");
        let ap = t.regions.iter().find(|r| r.name == "ap").expect("ap");
        let f = ap.failover.expect("a failover");
        assert_eq!(t.regions[usize::from(f.region.0)].name, "eu");
        assert_eq!(f.serves, Serves::Reads);
        assert_eq!(f.overprovisioning, 1.4);
        // 80 % healthy keeps it all, half keeps 70 %, a dead region none.
        assert_eq!(f.kept(0.8), 1.0);
        assert!((f.kept(0.5) - 0.7).abs() < 1e-9);
        assert_eq!(f.kept(0.0), 0.0);
        assert!(f.moves(true) && !f.moves(false));
    }

    #[test]
    fn check_refuses_a_bad_failover_at_its_line() {
        let e = errors(
            "  eu:\n    upstreams: [\"http://127.0.0.1:1\"]\n    failover: { region: mars }\n",
        );
        assert!(
            e.iter()
                .any(|e| e.contains(":5:") && e.contains("`mars` is not defined")),
            "{e:?}"
        );
        let e = errors(
            "  eu:\n    upstreams: [\"http://127.0.0.1:1\"]\n    failover: { region: eu }\n",
        );
        assert!(
            e.iter()
                .any(|e| e.contains(":5:") && e.contains("to itself")),
            "{e:?}"
        );
        let chain = "  eu:\n    upstreams: [\"http://127.0.0.1:1\"]\n    failover: { region: us }\n  us:\n    upstreams: [\"http://127.0.0.1:2\"]\n    failover: { region: eu }\n";
        let e = errors(chain);
        assert_eq!(
            e.iter().filter(|e| e.contains("one hop")).count(),
            2,
            "{e:?}"
        );
        assert!(
            e.iter().any(|e| e.contains(":5:")) && e.iter().any(|e| e.contains(":8:")),
            "{e:?}"
        );
        let e = errors("  eu: { upstreams: [\"http://127.0.0.1:1\"] }\n  us:\n    upstreams: [\"http://127.0.0.1:2\"]\n    failover: { region: eu, overprovisioning: 0.5 }\n");
        assert!(
            e.iter()
                .any(|e| e.contains(":6:") && e.contains("within 1 and 10")),
            "{e:?}"
        );
        let e = errors("  eu: { upstreams: [\"http://127.0.0.1:1\"] }\n  us:\n    upstreams: [\"http://127.0.0.1:2\"]\n    failover: { region: eu, serves: writes }\n");
        assert!(!e.is_empty(), "serves is reads or all");
    }
}
