use super::*;

fn whole(body: &[u8]) -> Result<Progress, ChunkError> {
    Chunked::new().scan(body)
}

#[test]
fn valid_bodies_end_where_they_end_in_any_split() {
    let body = b"5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-T: 1\r\n\r\nNEXT";
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
    let line = |n: usize| [b"1;".as_slice(), &vec![b'a'; n - 2], b"\r\nx\r\n0\r\n\r\n"].concat();
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
