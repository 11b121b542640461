use super::*;

#[test]
fn the_reference_reads_the_grammar() {
    let body = b"5;a=1\r\nhello\r\n1a \t; x\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nT: v\r\n\r\nNEXT";
    assert!(matches!(reference(body), Reference::Done(n) if n == body.len() - 4));
    for cut in 0..body.len() - 4 {
        assert!(matches!(reference(&body[..cut]), Reference::More), "{cut}");
    }
    for bad in [
        &b"0x2\r\nhi\r\n0\r\n\r\n"[..],
        b"5\nhello\r\n",
        b"5 \r\nhello\r\n",
        b"3\r\nhello\r\n",
        b"0\r\n: v\r\n\r\n",
        b"0\r\nT : v\r\n\r\n",
        b"\r\n",
        b"11111111111111111\r\n",
        b"2;\r\nhi\r\n0\r\n\r\n",
        b"2;a=\"x\r\nhi\r\n0\r\n\r\n",
        b"2;a=b \r\nhi\r\n0\r\n\r\n",
        b"2;a=\r\nhi\r\n0\r\n\r\n",
    ] {
        assert!(
            matches!(reference(bad), Reference::Bad),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}
