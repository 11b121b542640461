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
mod tests;
