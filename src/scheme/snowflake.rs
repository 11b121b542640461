//! The `snowflake` scheme (docs/schemes.md): a decimal integer below 2^63 (ids are stored as signed
//! 64-bit integers; JSON may carry them as strings or numbers) made of bit fields.
//!
//! A [`Layout`] lists the fields from the most significant bit; their widths sum to 63 (under
//! a sign bit that is always 0) or to 64 (whose top bit must then be 0). The field named
//! `time` is the creation time: `value × unit_ms + epoch_ms`. Presets:
//!
//! | preset | fields (from the top) | time unit, epoch |
//! |---|---|---|
//! | `twitter` (63) | time 41, datacenter 5, worker 5, sequence 12 | 1 ms, 1288834974657 |
//! | `instagram` (64) | time 41, shard 13, sequence 10 | 1 ms, 1314220021721 |
//! | `sonyflake` (63) | time 39, sequence 8, machine 16 | 10 ms, 1409529600000 |
//! | `discord` (64) | time 42, worker 5, process 5, increment 12 | 1 ms, 1420070400000 |

use std::fmt;

use super::error::{decimal_u64, SchemeError};

/// One bit field of a layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// Its name (`time`, `shard`, …).
    pub name: String,
    /// Its width in bits (1–63).
    pub bits: u32,
    /// Bits below it: the value is `(id >> shift) & ((1 << bits) - 1)`.
    pub shift: u32,
}

/// A snowflake layout: fields from the most significant bit, and how `time` reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The fields, most significant first.
    pub fields: Vec<Field>,
    /// Index of the `time` field, if there is one.
    pub time: Option<usize>,
    /// Milliseconds per unit of `time`.
    pub unit_ms: u64,
    /// Milliseconds since the Unix epoch at `time` 0.
    pub epoch_ms: u64,
}

/// Why a layout is invalid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutError {
    /// The widths sum to neither 63 nor 64.
    Width(u32),
    /// A field of width 0 or over 63.
    FieldWidth(String, u32),
    /// Two fields share a name.
    Duplicate(String),
    /// Not a preset name.
    UnknownPreset(String),
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::Width(sum) => write!(
                f,
                "the field widths sum to {sum}: they must sum to 63 (under the sign bit) or 64"
            ),
            LayoutError::FieldWidth(name, bits) => {
                write!(f, "field `{name}` is {bits} bits wide: 1-63 bits")
            }
            LayoutError::Duplicate(name) => write!(f, "field `{name}` is listed twice"),
            LayoutError::UnknownPreset(name) => write!(
                f,
                "unknown layout `{name}` (presets: twitter, instagram, sonyflake, discord; or \
                 give `fields:`)"
            ),
        }
    }
}

impl Layout {
    /// A layout of `(name, bits)` fields from the most significant bit; `time` reads as
    /// `value × unit_ms + epoch_ms`.
    pub fn new(fields: &[(&str, u32)], unit_ms: u64, epoch_ms: u64) -> Result<Layout, LayoutError> {
        let total: u32 = fields.iter().map(|(_, b)| *b).sum();
        if total != 63 && total != 64 {
            return Err(LayoutError::Width(total));
        }
        let mut shift = total;
        let mut out = Vec::with_capacity(fields.len());
        for (name, bits) in fields {
            if *bits == 0 || *bits > 63 {
                return Err(LayoutError::FieldWidth((*name).to_owned(), *bits));
            }
            if out.iter().any(|f: &Field| f.name == *name) {
                return Err(LayoutError::Duplicate((*name).to_owned()));
            }
            shift -= bits;
            out.push(Field {
                name: (*name).to_owned(),
                bits: *bits,
                shift,
            });
        }
        let time = out.iter().position(|f| f.name == "time");
        Ok(Layout {
            fields: out,
            time,
            unit_ms: unit_ms.max(1),
            epoch_ms,
        })
    }

    /// A preset by name: `twitter`, `instagram`, `sonyflake`, `discord`.
    pub fn preset(name: &str) -> Result<Layout, LayoutError> {
        let (fields, unit, epoch): (&[(&str, u32)], u64, u64) = match name {
            "twitter" => (
                &[
                    ("time", 41),
                    ("datacenter", 5),
                    ("worker", 5),
                    ("sequence", 12),
                ],
                1,
                1_288_834_974_657,
            ),
            "instagram" => (
                &[("time", 41), ("shard", 13), ("sequence", 10)],
                1,
                1_314_220_021_721,
            ),
            "sonyflake" => (
                &[("time", 39), ("sequence", 8), ("machine", 16)],
                10,
                1_409_529_600_000,
            ),
            "discord" => (
                &[
                    ("time", 42),
                    ("worker", 5),
                    ("process", 5),
                    ("increment", 12),
                ],
                1,
                1_420_070_400_000,
            ),
            other => return Err(LayoutError::UnknownPreset(other.to_owned())),
        };
        Layout::new(fields, unit, epoch)
    }

    /// The index of the field called `name`.
    pub fn field_index(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }

    /// Field `i` of `id`.
    #[inline]
    pub fn field(&self, id: Snowflake, i: usize) -> u64 {
        let f = &self.fields[i];
        (id.0 >> f.shift) & ((1u64 << f.bits) - 1)
    }

    /// Creation time of `id` in ms since the Unix epoch, if the layout has a `time` field.
    pub fn created_ms(&self, id: Snowflake) -> Option<u64> {
        let t = self.field(id, self.time?);
        Some(t.saturating_mul(self.unit_ms).saturating_add(self.epoch_ms))
    }

    /// The id with these field values (`(name, value)`, each masked to its width; fields not
    /// given are 0), or `None` if a name is not a field.
    pub fn compose(&self, values: &[(&str, u64)]) -> Option<Snowflake> {
        let mut v = 0u64;
        for (name, value) in values {
            let f = &self.fields[self.field_index(name)?];
            v |= (value & ((1u64 << f.bits) - 1)) << f.shift;
        }
        // Below 2^63 (a 64-bit layout's top bit belongs to its first field).
        Some(Snowflake(v & (u64::MAX >> 1)))
    }
}

/// A snowflake id's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snowflake(pub u64);

/// Parses a decimal integer below 2^63. No allocation.
pub fn parse(text: &[u8]) -> Result<Snowflake, SchemeError> {
    if text.len() > 19 {
        return Err(SchemeError::InvalidLength {
            len: text.len(),
            expected: "at most 19 decimal digits",
        });
    }
    let v = decimal_u64(text, 0, "a snowflake is below 2^63")?;
    if v >> 63 != 0 {
        return Err(SchemeError::OutOfRange {
            what: "a snowflake is below 2^63",
        });
    }
    Ok(Snowflake(v))
}

impl fmt::Display for Snowflake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instagram_by_the_published_formula() {
        // Instagram's engineering blog: id = (ms − 1314220021721) << 23 | shard << 10 | seq.
        let l = Layout::preset("instagram").expect("preset");
        let ms = 1_387_263_000_000u64;
        let (shard, seq) = (1341u64, 7u64);
        let id = ((ms - 1_314_220_021_721) << 23) | (shard << 10) | seq;
        let s = parse(id.to_string().as_bytes()).expect("parses");
        assert_eq!(l.field(s, l.field_index("shard").expect("shard")), shard);
        assert_eq!(l.field(s, l.field_index("sequence").expect("seq")), seq);
        assert_eq!(l.created_ms(s), Some(ms));
    }

    #[test]
    fn twitter_epoch_and_sonyflake_unit() {
        let t = Layout::preset("twitter").expect("preset");
        // A tweet id: its top 41 bits are ms since Twitter's epoch 1288834974657.
        let id = 1_212_092_628_029_698_048u64;
        let s = parse(id.to_string().as_bytes()).expect("parses");
        assert_eq!(t.created_ms(s), Some((id >> 22) + 1_288_834_974_657));
        let sony = Layout::preset("sonyflake").expect("preset");
        let s = sony
            .compose(&[("time", 100), ("sequence", 1), ("machine", 2)])
            .expect("fields");
        // 100 units of 10 ms after 2014-09-01.
        assert_eq!(sony.created_ms(s), Some(1_409_529_600_000 + 1000));
        assert_eq!(sony.field(s, 2), 2);
        let d = Layout::preset("discord").expect("preset");
        assert_eq!(d.fields.iter().map(|f| f.bits).sum::<u32>(), 64);
    }

    #[test]
    fn layouts_and_values_are_checked() {
        assert_eq!(
            Layout::new(&[("time", 41), ("node", 10)], 1, 0),
            Err(LayoutError::Width(51))
        );
        assert!(Layout::new(&[("time", 41), ("node", 10), ("sequence", 12)], 1, 0).is_ok());
        assert!(matches!(
            Layout::preset("snowflake"),
            Err(LayoutError::UnknownPreset(_))
        ));
        assert!(matches!(
            parse(b"9223372036854775808"),
            Err(SchemeError::OutOfRange { .. })
        ));
        assert!(parse(b"9223372036854775807").is_ok());
        assert!(matches!(
            parse(b"12a"),
            Err(SchemeError::InvalidChar { pos: 3, .. })
        ));
        assert!(parse(b"-1").is_err());
    }

    proptest::proptest! {
        #[test]
        fn mint_then_parse(
            preset in proptest::sample::select(vec!["twitter", "instagram", "sonyflake", "discord"]),
            values: [u64; 4],
        ) {
            let l = Layout::preset(preset).expect("preset");
            let named: Vec<(&str, u64)> = l
                .fields
                .iter()
                .zip(values)
                .map(|(f, v)| (f.name.as_str(), v))
                .collect();
            let id = l.compose(&named).expect("fields");
            let back = parse(id.to_string().as_bytes()).expect("parses");
            proptest::prop_assert_eq!(back, id);
            for (i, f) in l.fields.iter().enumerate().skip(1) {
                proptest::prop_assert_eq!(l.field(back, i), values[i] & ((1 << f.bits) - 1));
            }
        }
    }
}
