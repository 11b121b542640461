//! Client connections before the first request, and the worker threads that serve them:
//! a silent client or one stalled inside the HTTP/2 preface is cut off after the header read
//! timeout, a real HTTP/2 preface is served, and the data path runs on `workers` threads.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{client, iuid_for, ConfigYaml, Router, Upstream};

fn table(upstream: &str) -> String {
    format!(
        "version: conn\nregions:\n  a: {{ upstreams: [\"{upstream}\"] }}\ncountries:\n  1: a\ndefault_region: a\n"
    )
}

/// `/o/{id}`, no file watch, 500 ms to read a request head. Every router of this file has 3
/// workers, so that the thread names seen are theirs.
fn config() -> String {
    ConfigYaml::new()
        .route_path("/o/{id}")
        .watch(false)
        .limits("header_read_timeout_ms: 500")
        .extra("workers: 3")
        .yaml()
}

/// Writes `first` (maybe nothing), then waits for the router to close the connection;
/// returns how long that took, or `None` if it was still open after 5 s.
fn closed_after(addr: SocketAddr, first: &'static [u8]) -> Option<Duration> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let started = Instant::now();
    s.write_all(first).expect("write");
    let mut buf = [0u8; 256];
    match s.read(&mut buf) {
        // EOF or a reset: the router hung up.
        Ok(0) | Err(_) if started.elapsed() < Duration::from_secs(5) => Some(started.elapsed()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_stalled_clients_are_cut_off_after_the_header_timeout() {
    let up = Upstream::start("up").await;
    let router = Router::start(&config(), &table(&up.url())).await;
    let addr = router.addr;
    for (what, first) in [
        ("a client that sends nothing", &b""[..]),
        (
            "a client stalled inside the HTTP/2 preface",
            b"PRI * HTTP/2.0\r\n",
        ),
    ] {
        let took = tokio::task::spawn_blocking(move || closed_after(addr, first))
            .await
            .expect("client");
        let took = took.unwrap_or_else(|| panic!("{what} was never disconnected"));
        assert!(
            took >= Duration::from_millis(400) && took < Duration::from_secs(3),
            "{what} was disconnected after {took:?}, want about the 500 ms header timeout"
        );
    }
    // Meanwhile the router serves as usual.
    let id = iuid_for(1);
    let resp = client()
        .get(router.url(&format!("/o/{id}")))
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_preface_is_answered_with_settings() {
    let up = Upstream::start("up").await;
    let router = Router::start(&config(), &table(&up.url())).await;
    let addr = router.addr;
    let frame = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        // The preface, then an empty SETTINGS frame (RFC 9113 §3.4, §6.5).
        s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
            .expect("write");
        let mut head = [0u8; 9];
        s.read_exact(&mut head).expect("a frame back");
        head
    })
    .await
    .expect("client");
    assert_eq!(frame[3], 0x04, "the server's first frame is SETTINGS");
}

/// Names of this process's threads.
fn thread_names() -> Vec<String> {
    let mut names = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let path = task.expect("task").path().join("comm");
        if let Ok(name) = std::fs::read_to_string(path) {
            names.push(name.trim().to_owned());
        }
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_path_runs_on_the_configured_worker_threads() {
    let up = Upstream::start("up").await;
    let router = Router::start(&config(), &table(&up.url())).await;
    let http = client();
    let id = iuid_for(1);
    // Several connections, so that every worker gets some.
    for _ in 0..6 {
        let fresh = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .expect("client");
        let resp = fresh
            .get(router.url(&format!("/o/{id}")))
            .send()
            .await
            .expect("answer");
        assert_eq!(resp.status(), 200);
    }
    assert_eq!(
        http.get(router.url("/o/x"))
            .send()
            .await
            .expect("answer")
            .status(),
        400
    );
    let mut workers: Vec<String> = thread_names()
        .into_iter()
        .filter(|n| n.starts_with("iuid-worker-") && !n.ends_with("-blocking"))
        .collect();
    workers.sort();
    workers.dedup();
    assert_eq!(
        workers,
        ["iuid-worker-1", "iuid-worker-2", "iuid-worker-3"],
        "one thread per configured worker"
    );
}

/// A listener handed in without `SO_REUSEPORT` is accepted on one thread, each connection
/// handed to a worker: served the same, kept alive and closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_without_reuseport_is_served_through_the_hand_off() {
    let up = Upstream::start("up").await;
    let dir = tempfile::tempdir().expect("tempdir");
    common::write(&dir, "routing-table.yaml", &table(&up.url()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let router = Router::start_on(dir, &config(), listener).await;
    let addr = router.addr;
    let path = format!("/o/{}", iuid_for(1));
    let answers = tokio::task::spawn_blocking(move || {
        let mut conn = TcpStream::connect(addr).expect("connect");
        conn.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut answers = Vec::new();
        for close in ["", "Connection: close\r\n"] {
            let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\n{close}\r\n");
            conn.write_all(head.as_bytes()).expect("write");
            std::thread::sleep(Duration::from_millis(100));
            let mut buf = [0u8; 4096];
            let n = conn.read(&mut buf).expect("read");
            answers.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        let mut rest = [0u8; 16];
        answers.push(format!("{:?}", conn.read(&mut rest).ok()));
        answers
    })
    .await
    .expect("client");
    assert!(answers[0].starts_with("HTTP/1.1 200 "), "{}", answers[0]);
    assert!(answers[1].starts_with("HTTP/1.1 200 "), "{}", answers[1]);
    assert_eq!(
        answers[2], "Some(0)",
        "closed after the Connection: close answer"
    );
    assert_eq!(up.count(), 2);
}
