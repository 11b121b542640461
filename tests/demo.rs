//! `iuid-router demo` as a newcomer runs it: start it, then run each printed `curl` line and
//! check that the answer came from the region the comment above it promises.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::{free_port, ChildGuard};

/// One printed example: what it promises (`eu`, `404`, …), the URL, its headers and
/// an optional body (then it is a POST, as with curl's `-d`).
struct Example {
    expect: String,
    url: String,
    headers: Vec<(String, String)>,
    body: Option<String>,
}

/// Splits off curl's `-d '…'` (the body runs to the line's last quote).
fn parse_curl_with_body(line: &str) -> (String, Vec<(String, String)>, Option<String>) {
    match line.split_once(" -d '") {
        Some((head, rest)) => {
            let body = rest.strip_suffix('\'').expect("quoted body").to_owned();
            let (url, headers) = parse_curl(head);
            (url, headers, Some(body))
        }
        None => {
            let (url, headers) = parse_curl(line);
            (url, headers, None)
        }
    }
}

fn parse_curl(line: &str) -> (String, Vec<(String, String)>) {
    let mut url = None;
    let mut headers = Vec::new();
    let mut words = line
        .split_whitespace()
        .map(|w| w.trim_matches('\''))
        .peekable();
    let mut rest = Vec::new();
    while let Some(w) = words.next() {
        if w == "-H" {
            // The header value is quoted and may span words: "'x-entity-id:" "<id>'".
            let name = words
                .next()
                .expect("header name")
                .trim_end_matches(':')
                .to_owned();
            let value = words.next().expect("header value").to_owned();
            headers.push((name, value));
        } else if w.starts_with("http://") {
            url = Some(w.to_owned());
        } else {
            rest.push(w);
        }
    }
    (url.expect("a URL in the curl line"), headers)
}

#[tokio::test]
async fn printed_curl_lines_reach_the_promised_region() {
    let (listen, admin) = (free_port(), free_port());
    let mut child = ChildGuard::spawn(
        Command::new(env!("CARGO_BIN_EXE_iuid-router"))
            .args([
                "demo",
                "--listen",
                &listen.to_string(),
                "--admin-listen",
                &admin.to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
        "start demo",
    );
    let stdout = child.get_mut().stdout.take().expect("stdout");

    let examples = tokio::task::spawn_blocking(move || {
        let mut examples = Vec::new();
        let mut expect = None;
        for line in BufReader::new(stdout).lines() {
            let line = line.expect("read");
            if let Some(rest) = line.strip_prefix("# → ") {
                expect = rest.split(':').next().map(str::to_owned);
            } else if line.starts_with("curl ") {
                let (url, headers, body) = parse_curl_with_body(&line);
                examples.push(Example {
                    expect: expect.take().expect("a comment before each curl line"),
                    url,
                    headers,
                    body,
                });
            } else if line.starts_with("Press Ctrl-C") {
                break;
            }
        }
        examples
    })
    .await
    .expect("join");
    assert!(examples.len() >= 6, "the demo prints its tour");
    assert!(
        examples.iter().any(|e| e.body.is_some()),
        "a GraphQL example is printed"
    );

    let client = reqwest::Client::new();
    let mut regions = std::collections::BTreeSet::new();
    let mut fanouts = 0;
    for ex in &examples {
        let mut req = match &ex.body {
            Some(body) => client.post(&ex.url).body(body.clone()),
            None => client.get(&ex.url),
        };
        for (name, value) in &ex.headers {
            req = req.header(name, value);
        }
        let resp = req.send().await.expect("demo answers");
        let status = resp.status().as_u16();
        let body = resp.text().await.expect("body");
        match ex.expect.parse::<u16>() {
            Ok(code) => assert_eq!(status, code, "{} → {body}", ex.url),
            // Every region answered: a fan-out page, or GraphQL nodes split by region.
            Err(_) if ex.expect == "all" => {
                assert_eq!(status, 200, "{} → {body}", ex.url);
                let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
                let from: std::collections::BTreeSet<&str> = match v.get("items") {
                    Some(items) => {
                        assert_eq!(v["partial"], false, "{body}");
                        assert_eq!(items.as_array().map(Vec::len), Some(4), "{body}");
                        items
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|i| i["region"].as_str())
                            .collect()
                    }
                    None => v["data"]["nodes"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|n| n["region"].as_str().expect("every node answered"))
                        .collect(),
                };
                assert!(from.len() >= 2, "items from several regions: {body}");
                fanouts += 1;
            }
            Err(_) => {
                assert_eq!(status, 200, "{} → {body}", ex.url);
                let first = body.lines().next().unwrap_or_default();
                assert_eq!(first, format!("region: {}", ex.expect), "{}", ex.url);
                regions.insert(ex.expect.clone());
            }
        }
    }
    assert_eq!(
        regions.len(),
        3,
        "the tour reaches all three regions: {regions:?}"
    );
    assert_eq!(fanouts, 3, "two fan-out pages and a split GraphQL request");
}
