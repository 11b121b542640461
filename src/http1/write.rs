//! Writing message heads into one buffer, so a head leaves in one `write`.

/// Appends `name: value\r\n`.
pub fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.reserve(name.len() + value.len() + 4);
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Appends a status line, `HTTP/1.1 <status> <reason>\r\n` (RFC 9112 §4). `status` is
/// three digits (100–999).
pub fn status_line(out: &mut Vec<u8>, status: u16, reason: &[u8]) {
    status_line_for(out, 1, status, reason)
}

/// [`status_line`] of `HTTP/1.<minor>`: `HTTP/1.0` to an HTTP/1.0 client, as a server that
/// knows its client speaks only HTTP/1.0 answers (hyper's server does the same).
pub fn status_line_for(out: &mut Vec<u8>, minor: u8, status: u16, reason: &[u8]) {
    let digits = [
        b'0' + (status / 100 % 10) as u8,
        b'0' + (status / 10 % 10) as u8,
        b'0' + (status % 10) as u8,
    ];
    out.extend_from_slice(match minor {
        0 => b"HTTP/1.0 ",
        _ => b"HTTP/1.1 ",
    });
    out.extend_from_slice(&digits);
    out.push(b' ');
    out.extend_from_slice(reason);
    out.extend_from_slice(b"\r\n");
}

/// Appends a decimal number (a `Content-Length`), without allocating.
pub fn decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_written_as_rfc_9112_spells_them() {
        let mut out = Vec::new();
        status_line(&mut out, 502, b"Bad Gateway");
        field(&mut out, b"Content-Length", b"");
        out.truncate(out.len() - 2);
        decimal(&mut out, 18446744073709551615);
        decimal(&mut out, 0);
        assert_eq!(
            out,
            b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 184467440737095516150"
        );
    }
}
