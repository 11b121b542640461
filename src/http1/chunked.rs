//! The chunked transfer coding (RFC 9112 §7.1), checked as it passes: the router forwards a
//! chunked body as it came (sizes and extensions byte for byte, never re-encoded), so all it
//! needs to know is where the body ends and that every byte of the framing is valid.
//! [`Chunked::scan`] is fed the bytes as they arrive, in any split.
//!
//! Refused: a chunk size that is not 1–16 hex digits (`2zz`, `0x2`, `+2`, ` 2`), a bare LF
//! or CR anywhere in the framing, data longer or shorter than its size, a chunk extension
//! outside RFC 9112 §7.1.1's grammar (`;` with no name, `=` with no value, an unbalanced
//! quote, whitespace before the line's CRLF, control bytes), a trailer field without a name
//! or with control bytes, and more than [`MAX_LINE`] bytes of one size line or
//! [`MAX_TRAILERS`] of trailers. A strict parser next in line (llhttp, h11) refuses the same
//! extensions: forwarding one would have it read the body otherwise than the router did.
//!
//! A request's trailer section is checked and dropped ([`Chunked::request`]): RFC 9110
//! §6.5.1 forbids trailers that carry framing, routing or forwarding fields
//! (`Content-Length`, `Transfer-Encoding`, `Host`, the routing header), and an upstream that
//! merged them into the head would read another request than the router routed; nginx and
//! hyper drop request trailers too. A response's trailers go on as they came.

/// Longest chunk-size line accepted: the size, whitespace and extensions, without the CRLF.
pub const MAX_LINE: usize = 4096;
/// Longest trailer section accepted: every byte after the last chunk's size line, its
/// trailer lines and the final CRLF included.
pub const MAX_TRAILERS: usize = 16 << 10;

/// Where in the framing the scanner is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// At the start of a chunk-size line (no digit yet).
    SizeStart,
    /// Reading the size's hex digits.
    Size,
    /// Whitespace after the size: only `;` may follow (BWS before a chunk-ext).
    SizeSpace,
    /// After a chunk extension's `;` (and BWS): its name must follow.
    ExtNameStart,
    /// In a chunk extension's name (a token).
    ExtName,
    /// Whitespace after a name: `=` or `;` must follow (BWS), not the line's end.
    ExtNameSpace,
    /// After `=` (and BWS): a token or a quoted string must follow.
    ExtValueStart,
    /// In a token value.
    ExtToken,
    /// In a quoted-string value, after its opening quote.
    ExtQuoted,
    /// After a backslash in a quoted string (a quoted-pair).
    ExtEscape,
    /// After a value (or whitespace after it): `;` or, with no whitespace, CR.
    ExtValueEnd,
    /// Whitespace after a value: only `;` may follow.
    ExtValueSpace,
    /// CR seen after the size line: LF must follow.
    SizeLf,
    /// In chunk data, `remaining` bytes to go.
    Data,
    /// After the data: CR must follow.
    DataCr,
    /// After the data's CR: LF must follow.
    DataLf,
    /// At the start of a trailer line, or of the final CRLF.
    TrailerStart,
    /// In a trailer field's name.
    TrailerName,
    /// In a trailer field's value, up to CR.
    TrailerValue,
    /// CR seen after a trailer line: LF must follow.
    TrailerLf,
    /// CR seen on an empty line: the body ends with the LF.
    EndLf,
    /// The body ended.
    Done,
}

/// Why a chunked body was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkError {
    /// A chunk-size that is not 1–16 hex digits.
    BadSize,
    /// A line of the framing not ended by CRLF.
    BadLineEnd,
    /// A chunk extension outside RFC 9112 §7.1.1's grammar, or a byte not allowed in a
    /// trailer field.
    BadByte,
    /// A size line or the trailers are too long.
    TooLong,
}

impl std::fmt::Display for ChunkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ChunkError::BadSize => "invalid chunk size",
            ChunkError::BadLineEnd => "chunked framing line not ended by CRLF",
            ChunkError::BadByte => "invalid chunk extension or trailer field",
            ChunkError::TooLong => "chunk-size line or trailers too long",
        })
    }
}

/// The scanner of one chunked body.
#[derive(Debug, Clone)]
pub struct Chunked {
    state: State,
    /// Data bytes left in the current chunk, or the size read so far.
    remaining: u64,
    digits: u8,
    /// Bytes of the current size line (without its CR), or of the trailer section so far.
    line: usize,
    /// A request's scanner: the trailer section is not forwarded ([`Chunked::request`]).
    drop_trailers: bool,
    /// A trailer field was seen.
    trailer_fields: bool,
    /// A decoding scanner: `scan` stops where data starts and ends ([`Chunked::decoding`]).
    data_only: bool,
}

impl Default for Chunked {
    fn default() -> Self {
        Chunked::new()
    }
}

/// What [`Chunked::scan`] found in its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Bytes of the input that belong to the body (all of it unless `done`).
    pub used: usize,
    /// The body ended with the last of those bytes.
    pub done: bool,
}

fn tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A byte allowed in a field value: visible, space, tab, obs-text.
fn text(b: u8) -> bool {
    b == b'\t' || (b >= 0x20 && b != 0x7f)
}

/// `qdtext` (RFC 9110 §5.6.4): a quoted string's byte other than `"` and `\\`.
fn qdtext(b: u8) -> bool {
    text(b) && b != b'"' && b != b'\\'
}

fn space(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

impl Chunked {
    /// A scanner at the start of a body.
    pub fn new() -> Chunked {
        Chunked {
            state: State::SizeStart,
            remaining: 0,
            digits: 0,
            line: 0,
            drop_trailers: false,
            trailer_fields: false,
            data_only: false,
        }
    }

    /// A scanner for decoding a body (to an HTTP/1.0 client, which knows no chunked
    /// coding): [`Chunked::scan`] takes either data or framing in one call, never both, and
    /// [`Chunked::in_data`] before the call says which.
    pub fn decoding() -> Chunked {
        Chunked {
            data_only: true,
            ..Chunked::new()
        }
    }

    /// Whether the next bytes [`Chunked::scan`] takes are chunk data.
    pub fn in_data(&self) -> bool {
        self.state == State::Data
    }

    /// A scanner of a request's body, whose trailer section is checked but not forwarded:
    /// [`Chunked::scan`] stops after the last chunk's size line, and from there
    /// [`Chunked::in_trailers`] says that the bytes it takes are dropped; the body's final
    /// CRLF is then the forwarder's to write (see the module docs).
    pub fn request() -> Chunked {
        Chunked {
            drop_trailers: true,
            ..Chunked::new()
        }
    }

    /// Whether the body has ended.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Whether a request's scanner ([`Chunked::request`]) is past the last chunk: what it
    /// takes from here on is the trailer section and the final CRLF, not forwarded.
    pub fn in_trailers(&self) -> bool {
        self.drop_trailers
            && matches!(
                self.state,
                State::TrailerStart
                    | State::TrailerName
                    | State::TrailerValue
                    | State::TrailerLf
                    | State::EndLf
                    | State::Done
            )
    }

    /// Whether a trailer field was scanned (the body has more than `0\r\n\r\n` at its end).
    pub fn has_trailer_fields(&self) -> bool {
        self.trailer_fields
    }

    /// Scans the next bytes of the body. Errors: the framing is invalid (the whole message
    /// must then be abandoned: its connection closed).
    /// Once the body has ended, no further byte belongs to it: `used` is 0.
    pub fn scan(&mut self, input: &[u8]) -> Result<Progress, ChunkError> {
        if self.state == State::Done {
            return Ok(Progress {
                used: 0,
                done: true,
            });
        }
        let mut i = 0;
        while i < input.len() {
            if self.state == State::Data {
                let take =
                    (input.len() - i).min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
                i += take;
                self.remaining -= take as u64;
                if self.remaining == 0 {
                    self.state = State::DataCr;
                }
                if self.data_only {
                    return Ok(Progress {
                        used: i,
                        done: false,
                    });
                }
                continue;
            }
            let b = input[i];
            i += 1;
            let before = self.state;
            self.state = self.step(b)?;
            if self.state == State::Done {
                return Ok(Progress {
                    used: i,
                    done: true,
                });
            }
            // Decoding: the framing before a chunk's data alone.
            if self.data_only && self.state == State::Data {
                return Ok(Progress {
                    used: i,
                    done: false,
                });
            }
            // A request's trailers are not forwarded: the bytes before them are, alone.
            if self.drop_trailers && before == State::SizeLf && self.state == State::TrailerStart {
                return Ok(Progress {
                    used: i,
                    done: false,
                });
            }
        }
        Ok(Progress {
            used: i,
            done: self.state == State::Done,
        })
    }

    fn step(&mut self, b: u8) -> Result<State, ChunkError> {
        use State::*;
        // Every byte of a size line but its CR counts against `MAX_LINE` (whitespace after
        // the size too: it is not bounded by the grammar).
        let size_line = !matches!(
            self.state,
            SizeLf
                | Data
                | DataCr
                | DataLf
                | TrailerStart
                | TrailerName
                | TrailerValue
                | TrailerLf
                | EndLf
                | Done
        );
        if size_line && b != b'\r' {
            self.line += 1;
            if self.line > MAX_LINE {
                return Err(ChunkError::TooLong);
            }
        }
        // Every byte of the trailer section counts against `MAX_TRAILERS`, CRLFs included.
        if matches!(
            self.state,
            TrailerStart | TrailerName | TrailerValue | TrailerLf | EndLf
        ) {
            self.line += 1;
            if self.line > MAX_TRAILERS {
                return Err(ChunkError::TooLong);
            }
        }
        Ok(match self.state {
            SizeStart | Size => match b {
                _ if b.is_ascii_hexdigit() => {
                    self.digits += 1;
                    if self.digits > 16 {
                        return Err(ChunkError::BadSize);
                    }
                    let digit = (b as char).to_digit(16).unwrap_or(0);
                    self.remaining = (self.remaining << 4) | u64::from(digit);
                    Size
                }
                b';' if self.state == Size => ExtNameStart,
                b' ' | b'\t' if self.state == Size => SizeSpace,
                b'\r' if self.state == Size => SizeLf,
                b'\n' => return Err(ChunkError::BadLineEnd),
                _ => return Err(ChunkError::BadSize),
            },
            SizeSpace => match b {
                b' ' | b'\t' => SizeSpace,
                b';' => ExtNameStart,
                _ => return Err(ChunkError::BadSize),
            },
            // chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
            // (RFC 9112 §7.1.1); chunk-ext-val = token / quoted-string.
            ExtNameStart | ExtName | ExtNameSpace | ExtValueStart | ExtToken | ExtQuoted
            | ExtEscape | ExtValueEnd | ExtValueSpace
                if b == b'\n' =>
            {
                return Err(ChunkError::BadLineEnd)
            }
            ExtNameStart => match b {
                _ if space(b) => ExtNameStart,
                _ if tchar(b) => ExtName,
                _ => return Err(ChunkError::BadByte),
            },
            ExtName => match b {
                _ if tchar(b) => ExtName,
                _ if space(b) => ExtNameSpace,
                b'=' => ExtValueStart,
                b';' => ExtNameStart,
                b'\r' => SizeLf,
                _ => return Err(ChunkError::BadByte),
            },
            ExtNameSpace => match b {
                _ if space(b) => ExtNameSpace,
                b'=' => ExtValueStart,
                b';' => ExtNameStart,
                _ => return Err(ChunkError::BadByte),
            },
            ExtValueStart => match b {
                _ if space(b) => ExtValueStart,
                b'"' => ExtQuoted,
                _ if tchar(b) => ExtToken,
                _ => return Err(ChunkError::BadByte),
            },
            ExtToken => match b {
                _ if tchar(b) => ExtToken,
                _ => self.after_value(b)?,
            },
            ExtQuoted => match b {
                b'"' => ExtValueEnd,
                b'\\' => ExtEscape,
                _ if qdtext(b) => ExtQuoted,
                _ => return Err(ChunkError::BadByte),
            },
            // quoted-pair = "\\" ( HTAB / SP / VCHAR / obs-text )
            ExtEscape if text(b) => ExtQuoted,
            ExtEscape => return Err(ChunkError::BadByte),
            ExtValueEnd => self.after_value(b)?,
            ExtValueSpace => match b {
                _ if space(b) => ExtValueSpace,
                b';' => ExtNameStart,
                _ => return Err(ChunkError::BadByte),
            },
            SizeLf => {
                if b != b'\n' {
                    return Err(ChunkError::BadLineEnd);
                }
                self.line = 0;
                self.digits = 0;
                if self.remaining == 0 {
                    TrailerStart
                } else {
                    Data
                }
            }
            Data => Data,
            DataCr if b == b'\r' => DataLf,
            DataLf if b == b'\n' => SizeStart,
            DataCr | DataLf => return Err(ChunkError::BadLineEnd),
            TrailerStart | TrailerName | TrailerValue => match (self.state, b) {
                (TrailerStart, b'\r') => EndLf,
                (TrailerStart | TrailerName, _) if tchar(b) => {
                    self.trailer_fields = true;
                    TrailerName
                }
                (TrailerName, b':') => TrailerValue,
                (TrailerValue, b'\r') => TrailerLf,
                (_, b'\n') => return Err(ChunkError::BadLineEnd),
                (TrailerValue, _) if text(b) => TrailerValue,
                _ => return Err(ChunkError::BadByte),
            },
            TrailerLf if b == b'\n' => TrailerStart,
            EndLf if b == b'\n' => Done,
            TrailerLf | EndLf => return Err(ChunkError::BadLineEnd),
            // `scan` returns before stepping past the end.
            Done => Done,
        })
    }

    /// The byte after an extension's value: `;` starts the next, CR ends the line,
    /// whitespace may only come before a `;`.
    fn after_value(&self, b: u8) -> Result<State, ChunkError> {
        Ok(match b {
            b';' => State::ExtNameStart,
            b'\r' => State::SizeLf,
            _ if space(b) => State::ExtValueSpace,
            _ => return Err(ChunkError::BadByte),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(body: &[u8]) -> Result<Progress, ChunkError> {
        Chunked::new().scan(body)
    }

    #[test]
    fn valid_bodies_end_where_they_end_in_any_split() {
        let body =
            b"5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        let end = body.len() - 4;
        assert_eq!(
            whole(body),
            Ok(Progress {
                used: end,
                done: true
            })
        );
        for split in 0..body.len() {
            let mut c = Chunked::new();
            let first = c.scan(&body[..split]).expect("first part");
            assert!(!first.done || split >= end);
            let second = c.scan(&body[split..]).expect("second part");
            if !first.done {
                assert_eq!(split + second.used, end, "split at {split}");
                assert!(second.done);
            }
        }
        assert_eq!(
            whole(b"0\r\n\r\n"),
            Ok(Progress {
                used: 5,
                done: true
            })
        );
        assert_eq!(
            whole(b"5 ; a\r\nhello\r\n0\r\n\r\n").map(|p| p.done),
            Ok(true)
        );
    }

    #[test]
    fn broken_framing_is_refused() {
        let cases: [(&[u8], ChunkError); 11] = [
            (b"2zz\r\nhi\r\n0\r\n\r\n", ChunkError::BadSize),
            (b"0x2\r\nhi\r\n0\r\n\r\n", ChunkError::BadSize),
            (b"+2\r\nhi\r\n0\r\n\r\n", ChunkError::BadSize),
            (b" 2\r\nhi\r\n0\r\n\r\n", ChunkError::BadSize),
            (b"\r\nhi\r\n", ChunkError::BadSize),
            (b"5\nhello\r\n", ChunkError::BadLineEnd),
            (b"5\r\nhello\n0\r\n\r\n", ChunkError::BadLineEnd),
            (b"5\r\r;ABCD\r\n", ChunkError::BadLineEnd),
            (b"0_2e\r\n\r\n", ChunkError::BadSize),
            (b"11111111111111111\r\n", ChunkError::BadSize),
            (b"0\r\n: v\r\n\r\n", ChunkError::BadByte),
        ];
        for (body, error) in cases {
            assert_eq!(
                whole(body),
                Err(error),
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
        assert_eq!(whole(b"5\r\nhelloX"), Err(ChunkError::BadLineEnd));
        let long = [b"1;".as_slice(), &[b'a'; MAX_LINE]].concat();
        assert_eq!(whole(&long), Err(ChunkError::TooLong));
    }

    /// RFC 9112 §7.1.1's grammar: what a strict parser next in line (llhttp) also reads.
    #[test]
    fn chunk_extensions_follow_the_grammar() {
        for ext in [
            ";a",
            ";a=b",
            ";a=b;c",
            " ; a = b ; c",
            ";a=\"quoted ; \\\" value\"",
            ";a=\"\";b=\"x\"",
            ";ilovew3=\"I \\\"love\\\"; \\\\extensions\\\\\";somuchlove=\"x\";blah;foo=bar",
        ] {
            let body = format!("2{ext}\r\nhi\r\n0{ext}\r\n\r\n");
            assert_eq!(whole(body.as_bytes()).map(|p| p.done), Ok(true), "{ext:?}");
        }
        for ext in [
            ";",
            "; ",
            ";;a",
            ";a=",
            ";a= ",
            ";=b",
            ";a=b ",
            ";a ",
            ";a=\"open",
            ";a=\"x\"y",
            ";a=b\"",
            ";a=b c",
            ";a b",
            ";a=\x01",
            ";a=\"\x01\"",
            ";a=\"\\\x01\"",
            ";a@b",
        ] {
            let body = format!("2{ext}\r\nhi\r\n0\r\n\r\n");
            assert_eq!(whole(body.as_bytes()), Err(ChunkError::BadByte), "{ext:?}");
        }
        // A bare LF ends nothing, inside a quoted value or not.
        assert_eq!(whole(b"2;a=\"x\n\"\r\nhi"), Err(ChunkError::BadLineEnd));
        assert_eq!(whole(b"2;a\nhi"), Err(ChunkError::BadLineEnd));
    }

    /// A request's scanner stops after the last chunk's size line, then takes the trailer
    /// section without it being forwarded: whatever the split, what is forwarded is the
    /// body up to that line, and the final CRLF is the caller's.
    #[test]
    fn a_requests_trailers_are_taken_but_not_forwarded() {
        let body = b"2;x=1\r\nhi\r\n0;y\r\nContent-Length: 5\r\nHost: other\r\n\r\nNEXT";
        let kept = b"2;x=1\r\nhi\r\n0;y\r\n".len();
        for split in 0..body.len() {
            let mut c = Chunked::request();
            let mut forwarded = Vec::new();
            let mut at = 0;
            for piece in [&body[..split], &body[split..]] {
                let mut piece = piece;
                loop {
                    let trailers = c.in_trailers();
                    let p = c.scan(piece).expect("valid");
                    if !trailers {
                        forwarded.extend_from_slice(&piece[..p.used]);
                    }
                    at += p.used;
                    piece = &piece[p.used..];
                    if p.done || piece.is_empty() {
                        break;
                    }
                }
            }
            assert!(c.is_done(), "split at {split}");
            assert!(c.has_trailer_fields());
            assert_eq!(at, body.len() - 4, "split at {split}");
            assert_eq!(&forwarded[..], &body[..kept], "split at {split}");
        }
        // Without trailers, nothing is taken but the final CRLF; a response's scanner takes
        // the trailers whole, in one scan.
        let mut c = Chunked::request();
        assert_eq!(c.scan(b"0\r\n\r\n").map(|p| p.used), Ok(3));
        assert!(c.in_trailers() && !c.has_trailer_fields());
        assert_eq!(c.scan(b"\r\n").map(|p| p.done), Ok(true));
        assert_eq!(whole(body).map(|p| p.used), Ok(body.len() - 4));
        assert!(!Chunked::new().in_trailers());
    }

    /// A decoding scanner hands data and framing apart, whatever the split: the data taken
    /// is the body's data, and the scan ends where the body does.
    #[test]
    fn a_decoding_scanner_takes_data_and_framing_apart() {
        let body = b"5;a=b\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nT: v\r\n\r\nNEXT";
        for split in 0..body.len() {
            let mut c = Chunked::decoding();
            let mut data = Vec::new();
            let mut at = 0;
            for piece in [&body[..split], &body[split..]] {
                let mut piece = piece;
                while !piece.is_empty() && !c.is_done() {
                    let is_data = c.in_data();
                    let p = c.scan(piece).expect("valid");
                    if is_data {
                        data.extend_from_slice(&piece[..p.used]);
                    }
                    at += p.used;
                    piece = &piece[p.used..];
                }
            }
            assert!(c.is_done(), "split at {split}");
            assert_eq!(at, body.len() - 4, "split at {split}");
            assert_eq!(
                &data[..],
                b"helloabcdefghijklmnopqrstuvwxyz",
                "split at {split}"
            );
        }
    }

    #[test]
    fn the_limits_count_what_their_docs_say() {
        // A size line of MAX_LINE bytes passes (its CRLF is not counted), one more does not.
        let line =
            |n: usize| [b"1;".as_slice(), &vec![b'a'; n - 2], b"\r\nx\r\n0\r\n\r\n"].concat();
        assert_eq!(whole(&line(MAX_LINE)).map(|p| p.done), Ok(true));
        assert_eq!(whole(&line(MAX_LINE + 1)), Err(ChunkError::TooLong));
        // Whitespace after the size is part of the line: it was once unbounded.
        let spaces = [b"1".as_slice(), &[b' '; MAX_LINE]].concat();
        assert_eq!(whole(&spaces), Err(ChunkError::TooLong));
        // A trailer section of MAX_TRAILERS bytes, its CRLFs included, passes.
        let trailers = |n: usize| {
            let value = vec![b'v'; n - b"T:\r\n\r\n".len()];
            [b"0\r\nT:".as_slice(), &value, b"\r\n\r\n"].concat()
        };
        let body = trailers(MAX_TRAILERS);
        assert_eq!(
            whole(&body),
            Ok(Progress {
                used: body.len(),
                done: true
            })
        );
        assert_eq!(whole(&trailers(MAX_TRAILERS + 1)), Err(ChunkError::TooLong));
    }

    #[test]
    fn nothing_after_the_end_belongs_to_the_body() {
        let mut c = Chunked::new();
        assert_eq!(
            c.scan(b"0\r\n\r\nGET"),
            Ok(Progress {
                used: 5,
                done: true
            })
        );
        // It used to take one more byte per call once done.
        assert_eq!(
            c.scan(b"GET / HTTP/1.1\r\n"),
            Ok(Progress {
                used: 0,
                done: true
            })
        );
        assert!(c.is_done());
    }
}
