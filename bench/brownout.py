#!/usr/bin/env python3
"""Brownout: a black-hole region and a healthy one, iuid-router, nginx and HAProxy side by side
(issue 38).

Region `us` is a black hole: its upstream (`loadgen hole`, bench/loadgen, a compiled process
of its own on one thread) accepts connections, reads what is sent and never answers; it keeps
every socket and counts the connections it accepted and the requests it read (a request: a
head ending in CRLF CRLF). Region `eu` is an nginx upstream answering `eu\\n`. Each proxy runs
with one worker/process (iuid-router `workers: 1` and `limits: { region_max_in_flight: 1024 }`;
nginx `worker_processes 1`, `worker_connections 16384`, as bench/idle.py; HAProxy `nbthread
1`, `maxconn 4096` on the `us` server, its queue bounded by `timeout queue`) and routes by the
id's country as bench/bench.py does. Every proxy waits 15 s for an answer (iuid-router
`timeouts.response_headers_ms`, nginx `proxy_read_timeout`, HAProxy `timeout server` and
`timeout queue`), so the requests let through are still waiting at the reading.

The sick clients are `loadgen` too (compiled, tokio's current-thread runtime: one core at
most), so that on a 2-core machine the measuring side takes little CPU from the proxy it
measures (the Python clients and black hole before it did, and the router's 503s measured
70-96 ms). Two cases (--case, both by default):
  h1  --n (6000) HTTP/1.1 connections at once (`loadgen burst`), each sending one GET of a `us`
      id as soon as it is connected; connects issued in batches of 50, the I/O polled between
      them. A client's time: from its send (wall clock just before) to the kernel's receive
      timestamp of its answer's first bytes (SO_TIMESTAMPNS), so loadgen's own delay in
      reading is left out (the time as loadgen saw it is in the notes).
  h2  the same requests as HTTP/2 streams (`loadgen burst-h2`): --h2-conns (60) h2c connections
      (prior knowledge, on the proxy's plain port), each opening --h2-streams (100) streams at
      once as soon as its handshake is done. A stream's time: from its `send_request` to its
      response head, as loadgen saw it. Run against iuid-router and HAProxy (which detects the
      HTTP/2 preface on its HTTP/1.1 bind); nginx 1.22 takes h2c only on a listener of its own
      (`listen ... http2`), so its h2 row says skipped.

For each proxy and case, on a fresh proxy and a fresh black hole, after 50 warm-up requests:
  1. baseline: --trickle (400) GETs of an `eu` id on one keep-alive connection, one every
     --interval ms (10), from a (Python) process of their own; p50/p99 of each request's time
  2. RSS (VmRSS of the proxy's processes, /proc) before
  3. the same trickle starts; 0.1 s later loadgen starts the sick requests (RLIMIT_NOFILE
     raised, soft to hard, here and in loadgen)
  4. --wait (3) s after the last sick request was issued, loadgen judges each (answered, by
     status and whether the body names `region-overloaded`; closed or reset by the proxy;
     connect failed; nothing yet) and prints one JSON line of counts and latency percentiles
     (p50/p90/p99/max, nearest rank), keeping its sockets open; the black hole's counts and
     the proxy's RSS and open file descriptors are read ("during")
  5. the trickle's results ("during"); loadgen is told to end (EOF on its stdin, SIGTERM) and
     its sockets close; RSS 10 s and 20 s later ("after"), and the black hole's connections
     the proxy still holds then

KiB per waiting request = (RSS during - RSS before) / requests the black hole read.
Listen overflows: the kernel's TcpExtListenOverflows during the burst (a full accept queue).

  python3 bench/brownout.py [--n 6000] [--case h1,h2] [--h2-conns 60] [--h2-streams 100]
                            [--proxy router,nginx,haproxy] [--out FILE]

bench/loadgen is built (`cargo build --release --manifest-path bench/loadgen/Cargo.toml`, its
own workspace and lockfile, target bench/loadgen/target) when its binary is missing or older
than its sources. Uses loopback ports 18141-18148 and stops only the processes it started.
"""

import argparse
import json
import math
import multiprocessing
import os
import re
import resource
import select
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (mint, write, tree, the HTTP/1.1 client)
import idle  # noqa: E402  (rss_kib, established, start, stop, mib)

ROOT = bench.ROOT
EU = 18141  # the healthy region's upstream (nginx)
HOLE = 18142  # the black hole (region us)
PORTS = {"iuid-router": 18145, "nginx": 18146, "haproxy": 18147}
ADMIN = 18148
COUNTRIES = {2: "us", 3: "eu"}
REGIONS = {"eu": EU, "us": HOLE}
TIMEOUT_S = 15
WARMUP = 50
BATCH = 50  # connects issued between two polls of the answers
LOADGEN_DIR = os.path.join(ROOT, "bench", "loadgen")
LOADGEN = os.path.join(LOADGEN_DIR, "target", "release", "loadgen")

# The processes this script starts and how they are stopped: idle.py's.
started, start, stop = idle.started, idle.start, idle.stop


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


# ---------------------------------------------------------------------------------------------
# The compiled side: `loadgen hole` (the black hole) and `loadgen burst` / `burst-h2` (the sick
# clients), bench/loadgen, each a process of its own on one thread.

def build_loadgen(path):
    """Builds bench/loadgen when its binary is missing or older than its sources."""
    if path != LOADGEN:
        if not os.access(path, os.X_OK):
            raise SystemExit(f"--loadgen {path}: not an executable")
        return
    sources = [f"{LOADGEN_DIR}/Cargo.toml", f"{LOADGEN_DIR}/Cargo.lock"] + [
        os.path.join(d, f) for d, _, fs in os.walk(f"{LOADGEN_DIR}/src") for f in fs]
    if os.path.exists(path) and os.path.getmtime(path) >= max(map(os.path.getmtime, sources)):
        return
    print("== building bench/loadgen", flush=True)
    subprocess.run(["cargo", "build", "--release", "--quiet", "--manifest-path",
                    f"{LOADGEN_DIR}/Cargo.toml"], check=True, timeout=900)


class Hole:
    def __init__(self, work, log, loadgen):
        self.stats = f"{work}/hole-{time.time_ns()}.json"
        self.p = start([loadgen, "hole", "--port", str(HOLE), "--stats", self.stats], log)
        deadline = time.time() + 10
        while not os.path.exists(self.stats):
            if time.time() > deadline or self.p.poll() is not None:
                raise SystemExit("the black hole did not start")
            time.sleep(0.02)

    def read(self):
        for _ in range(50):
            try:
                with open(self.stats) as f:
                    return json.load(f)
            except (OSError, ValueError):
                time.sleep(0.01)
        raise SystemExit("the black hole's counts are unreadable")

    def settled(self, timeout=1.0):
        """Counts once they stopped changing (its writes lag by up to ~0.05 s)."""
        last, deadline = self.read(), time.time() + timeout
        while time.time() < deadline:
            time.sleep(0.15)
            now = self.read()
            if now == last:
                return now
            last = now
        return last

    def close(self):
        stop(self.p)


class Burst:
    """The sick clients: `loadgen burst` (HTTP/1.1, one connection per request) or `loadgen
    burst-h2` (h2c streams). result() is its JSON, printed once it judged the clients; their
    sockets stay open until close() (EOF on its stdin, then SIGTERM)."""

    def __init__(self, loadgen, port, uid, case, args, log):
        cmd = [loadgen, "burst", "--port", str(port), "--path", f"/v1/orders/{uid}",
               "--n", str(args.n), "--wait", f"{args.wait:g}", "--batch", str(BATCH)]
        if case == "h2":
            cmd = [loadgen, "burst-h2", "--port", str(port), "--path", f"/v1/orders/{uid}",
                   "--conns", str(args.h2_conns), "--streams", str(args.h2_streams),
                   "--wait", f"{args.wait:g}"]
        with open(log, "ab") as err:
            self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        started.append(self.p)

    def result(self, timeout):
        ready, _, _ = select.select([self.p.stdout], [], [], timeout)
        line = self.p.stdout.readline() if ready else b""
        if not line:
            raise SystemExit(f"loadgen gave no result (exit status {self.p.poll()})")
        return json.loads(line)

    def close(self):
        try:
            self.p.stdin.close()
        except OSError:
            pass
        stop(self.p)
        self.p.stdout.close()


# ---------------------------------------------------------------------------------------------
# Configurations

def configs(work):
    os.chmod(work, 0o711)  # nginx's workers may run as another user
    bench.write(f"{work}/upstreams.conf", f"""worker_processes 1;
daemon off;
pid {work}/upstreams.pid;
error_log {work}/upstreams.err;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  server {{ listen 127.0.0.1:{EU}; location / {{ add_header X-Region eu always; return 200 "eu\\n"; }} }}
}}
""")
    groups = "\n".join(
        f"  upstream {region} {{ server 127.0.0.1:{port}; keepalive 64; keepalive_requests 1000000; }}"
        for region, port in REGIONS.items())
    cases = "\n".join(
        f'    "~^/v1/orders/[0-9a-fA-F-]{{14}}8[0-9a-fA-F]{country:02x}" {region};'
        for country, region in COUNTRIES.items())
    # As bench/idle.py's routing nginx: one worker, room for 2 × 6000 connections.
    bench.write(f"{work}/nginx.conf", f"""worker_processes 1;
worker_rlimit_nofile 20000;
daemon off;
pid {work}/nginx.pid;
error_log {work}/nginx.err;
events {{ worker_connections 16384; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  proxy_read_timeout {TIMEOUT_S}s;
{groups}
  map $uri $region {{
    default "";
{cases}
  }}
  server {{
    listen 127.0.0.1:{PORTS["nginx"]};
    location /v1/orders/ {{
      if ($region = "") {{ return 404; }}
      proxy_pass http://$region;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}
  }}
}}
""")
    bench.write(f"{work}/countries.map", "".join(f"{c:02x} {r}\n" for c, r in COUNTRIES.items()))
    # As bench/bench.py's HAProxy, one thread; the `us` server takes at most 4096 requests at
    # once (the rest queue, `timeout queue`); the frontend's maxconn (global) above --n.
    backends = "\n".join(
        f"backend {region}\n  http-reuse always\n  server {region}1 127.0.0.1:{port} maxconn 4096\n"
        for region, port in REGIONS.items())
    bench.write(f"{work}/haproxy.cfg", f"""global
  nbthread 1
  maxconn 9000
defaults
  mode http
  timeout connect 1s
  timeout client 30s
  timeout server {TIMEOUT_S}s
  timeout queue {TIMEOUT_S}s
  option http-keep-alive
frontend fe
  bind 127.0.0.1:{PORTS["haproxy"]}
  http-request set-var(txn.region) path,regsub(^/v1/orders/[0-9a-fA-F-]{{14}}8[0-9a-fA-F],),regsub(-.*$,),lower,map({work}/countries.map)
  http-request return status 404 unless {{ var(txn.region) -m found }}
  use_backend %[var(txn.region)]
{backends}""")
    table = "".join(f"  {region}: {{ upstreams: [\"http://127.0.0.1:{port}\"] }}\n"
                    for region, port in REGIONS.items())
    countries = "".join(f"  {c}: {r}\n" for c, r in COUNTRIES.items())
    bench.write(f"{work}/routing-table.yaml",
                f"version: brownout\nregions:\n{table}countries:\n{countries}default_region: eu\n")
    bench.write(f"{work}/router.yaml", f"""listen: 127.0.0.1:{PORTS["iuid-router"]}
admin_listen: 127.0.0.1:{ADMIN}
region: edge
routing_table: routing-table.yaml
routes:
  - path: /v1/orders/{{id}}
reload: {{ watch: false }}
workers: 1
limits: {{ region_max_in_flight: 1024 }}
timeouts: {{ response_headers_ms: {TIMEOUT_S * 1000} }}
""" + bench.ENGINE_LINE)


def start_proxy(name, work, args):
    # --nofile: every proxy under the same soft and hard RLIMIT_NOFILE (prlimit, util-linux).
    limit = ["prlimit", f"--nofile={args.nofile}:{args.nofile}", "--"] if args.nofile else []
    if name == "iuid-router":
        return start(limit + [args.bin, "serve", "--config", f"{work}/router.yaml"], f"{work}/router.log")
    if name == "nginx":
        return start(limit + ["nginx", "-c", f"{work}/nginx.conf", "-p", work], f"{work}/nginx.log")
    return start(limit + ["haproxy", "-f", f"{work}/haproxy.cfg"], f"{work}/haproxy.log")


def admin_probe(name):
    """iuid-router's admin `/healthz` during the burst: (status or error, ms)."""
    if name != "iuid-router":
        return None
    t = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", ADMIN), timeout=2) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            head = s.recv(64).split(b" ", 2)
            status = head[1].decode() if len(head) > 1 else "?"
    except OSError as e:
        status = type(e).__name__
    return status, (time.perf_counter() - t) * 1000


# ---------------------------------------------------------------------------------------------
# The healthy region's trickle (a process of its own)

def trickle(port, uid, count, interval, conn_end):
    """`count` GETs of `uid` on one keep-alive connection, one every `interval` s; sends
    back (times in ms of the 200s from eu, failures by kind)."""
    times, failures, conn = [], {}, None
    t0 = time.perf_counter()
    for i in range(count):
        delay = t0 + i * interval - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        t = time.perf_counter()
        try:
            if conn is None:
                conn = bench.client(port)
            status, headers, body, reusable = bench.exchange(conn, "GET", f"/v1/orders/{uid}")
            took = (time.perf_counter() - t) * 1000
            if status == 200 and headers.get("x-region") == "eu":
                times.append(took)
            else:
                failures[f"status {status}"] = failures.get(f"status {status}", 0) + 1
            if not reusable:
                conn.close()
                conn = None
        except (OSError, ConnectionError) as e:
            kind = type(e).__name__
            failures[kind] = failures.get(kind, 0) + 1
            if conn is not None:
                conn.close()
            conn = None
    if conn is not None:
        conn.close()
    conn_end.send((times, failures))
    conn_end.close()


class Trickle:
    def __init__(self, port, uid, args):
        ctx = multiprocessing.get_context("fork")
        self.recv, send = ctx.Pipe(duplex=False)
        self.p = ctx.Process(target=trickle, args=(port, uid, args.trickle, args.interval / 1000, send),
                             daemon=True)
        self.p.start()
        send.close()

    def result(self, timeout):
        if not self.recv.poll(timeout):
            self.p.kill()
            self.p.join()
            return [], {"no result": 1}
        out = self.recv.recv()
        self.p.join(5)
        return out


def pct(values, q):
    if not values:
        return float("nan")
    s = sorted(values)  # nearest rank
    return s[min(len(s), max(1, math.ceil(q / 100 * len(s)))) - 1]


# ---------------------------------------------------------------------------------------------
# The sick clients

def listen_overflows():
    with open("/proc/net/netstat") as f:
        lines = f.read().splitlines()
    for names, values in zip(lines[::2], lines[1::2]):
        if names.startswith("TcpExt:"):
            d = dict(zip(names.split()[1:], map(int, values.split()[1:])))
            return d.get("ListenOverflows", 0), d.get("ListenDrops", 0)
    return 0, 0


# ---------------------------------------------------------------------------------------------

def fds(pid):
    total = 0
    for p in bench.tree(pid):
        try:
            total += len(os.listdir(f"/proc/{p}/fd"))
        except OSError:
            pass
    return total


def run_proxy(name, case, work, args, ids):
    hole = Hole(work, f"{work}/hole.log", args.loadgen)
    proxy = None
    try:
        proxy = start_proxy(name, work, args)
        port = PORTS[name]
        bench.wait_tcp(port)
        conn = bench.client(port)
        for _ in range(WARMUP):
            status, headers, _, _ = bench.exchange(conn, "GET", f"/v1/orders/{ids['eu']}")
            if status != 200 or headers.get("x-region") != "eu":
                raise SystemExit(f"{name}: eu answered {status} {headers}")
        conn.close()
        time.sleep(0.5)
        base_times, base_fail = Trickle(port, ids["eu"], args).result(60)
        time.sleep(0.5)
        rss_before, fds_before = idle.rss_kib(proxy.pid), fds(proxy.pid)

        overflow0 = listen_overflows()
        tr = Trickle(port, ids["eu"], args)
        time.sleep(0.1)
        cpu0, t_cpu0 = sum(bench.cpu_seconds(proxy.pid)), time.perf_counter()
        burst = Burst(args.loadgen, port, ids["us"], case, args, f"{work}/loadgen.log")
        try:
            time.sleep(1)
            admin = admin_probe(name)
            sick = burst.result(args.wait + 60)
            cpu = (sum(bench.cpu_seconds(proxy.pid)) - cpu0) / (time.perf_counter() - t_cpu0)
            rss_during, fds_during = idle.rss_kib(proxy.pid), fds(proxy.pid)
            overflow1 = listen_overflows()
            held = hole.settled()
            conns_at_proxy = idle.established(port)
            during_times, during_fail = tr.result(60)
        finally:
            burst.close()
        t_closed = time.time()
        time.sleep(max(0, 10 - (time.time() - t_closed)))
        rss_after, fds_after = idle.rss_kib(proxy.pid), fds(proxy.pid)
        hole_after = hole.read()
        # 20 s after: past the proxies' 15 s response timeouts of every waiting request
        time.sleep(max(0, 20 - (time.time() - t_closed)))
        rss_after20, fds_after20 = idle.rss_kib(proxy.pid), fds(proxy.pid)
        hole_after20 = hole.read()
        alive = proxy.poll() is None
        log_before_stop = log_lines(work, name)
    finally:
        if proxy is not None:
            stop(proxy)
        hole.close()

    lat = sick["latency_ms"]
    return {
        "proxy": name, "case": case, "n": sick["n"], "issue_s": sick["issue_s"],
        "base": base_times, "base_fail": base_fail,
        "during": during_times, "during_fail": during_fail,
        "hole": held, "hole_after": hole_after, "hole_after20": hole_after20,
        "lat503": lat["503"], "seen503": lat["503_seen"], "fast503": lat["503_fast"],
        "slow503": lat["503_slow"], "other_lat": lat["other"], "slow": sick["slow_connects"],
        "kernel503": sick["kernel_503"], "clients": sick["clients"], "loadgen_cpu_s": sick["cpu_s"],
        "conns_ended": sick.get("conns_ended"),
        "rss20": rss_after20, "fds20": fds_after20, "log_before_stop": log_before_stop,
        "statuses": sick["statuses"], "outcomes": sick["outcomes"],
        "rss": (rss_before, rss_during, rss_after), "fds": (fds_before, fds_during, fds_after),
        "overflows": (overflow1[0] - overflow0[0], overflow1[1] - overflow0[1]),
        "conns_at_proxy": conns_at_proxy, "alive": alive, "admin": admin, "cpu": cpu,
    }


def log_lines(work, name):
    path = f"{work}/{'router.log' if name == 'iuid-router' else 'nginx.err' if name == 'nginx' else 'haproxy.log'}"
    try:
        with open(path, errors="replace") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


mib = idle.mib


def case_label(case, args):
    if case == "h2":
        return f"HTTP/2: {args.h2_conns} h2c connections × {args.h2_streams} streams"
    return f"HTTP/1.1: {args.n} connections"


def ms(x):
    return "–" if x is None else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def table(rows, args):
    cols = ["proxy", "sick requests as", "`eu` baseline: ok, p50 / p99 ms",
            "`eu` during: ok, p50 / p99 ms (p99 × baseline)",
            "`us` let through (black hole: connections / requests)",
            f"503 within {args.wait:g} s", "503 p50 ms", "503 p99 ms", "503 max ms", "other answers",
            f"no answer within {args.wait:g} s", "RSS before → during → 10 s → 20 s after MiB",
            "KiB per waiting request (per sick client connection or stream)",
            "proxy fds before → during → 10 s → 20 s after", "listen overflows"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        if r.get("skipped"):
            lines.append(f"| {r['proxy']} | {case_label(r['case'], args)} | skipped: {r['skipped']} |"
                         + " |" * (len(cols) - 3))
            continue
        total = args.trickle
        bp99, dp99 = pct(r["base"], 99), pct(r["during"], 99)
        base = f"{len(r['base'])}/{total}, {pct(r['base'], 50):.2f} / {bp99:.2f}"
        during = (f"{len(r['during'])}/{total}, {pct(r['during'], 50):.2f} / {dp99:.2f} "
                  f"({dp99 / bp99:.2f}×)")
        if r["during_fail"]:
            during += "; failed: " + ", ".join(f"{v} {k}" for k, v in r["during_fail"].items())
        h = r["hole"]
        through = f"{h['requests']} ({h['accepted']} / {h['requests']})"
        t = r["lat503"]
        n503 = str(t["count"])
        kinds = {k: v for k, v in r["statuses"].items() if not k.startswith("503")}
        other = ", ".join(f"{v} × {k}" for k, v in sorted(kinds.items())) or "none"
        over = [k for k in r["statuses"] if k.startswith("503") and "overloaded" not in k]
        if over:
            other += "; 503 without region-overloaded: " + ", ".join(
                f"{r['statuses'][k]}" for k in over)
        nothing = ", ".join(f"{v} {k}" for k, v in sorted(r["outcomes"].items())) or "0"
        b, d, a = r["rss"]
        per = f"{(d - b) / h['requests']:.1f}" if h["requests"] else "–"
        per += f" ({(d - b) / r['clients']:.1f})"
        fb, fd, fa = r["fds"]
        lines.append(f"| {r['proxy']} | {case_label(r['case'], args)} | {base} | {during} | {through} "
                     f"| {n503} | {ms(t.get('p50'))} | {ms(t.get('p99'))} | {ms(t.get('max'))} "
                     f"| {other} | {nothing} "
                     f"| {mib(b)} → {mib(d)} → {mib(a)} → {mib(r['rss20'])} | {per} "
                     f"| {fb} → {fd} → {fa} → {r['fds20']} "
                     f"| {r['overflows'][0]} |")
    return lines


# nginx 1.22 speaks h2c only on a listener of its own (`listen … http2`, no HTTP/1.1 there);
# HAProxy takes it on its HTTP/1.1 bind (it detects the HTTP/2 preface), as iuid-router does.
H2_SKIP = {"nginx": "nginx 1.22 takes h2c only on a listener of its own (`listen … http2`), "
                    "not beside HTTP/1.1; not run"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=6000, help="sick HTTP/1.1 clients, one `us` GET each")
    ap.add_argument("--case", default="h1,h2",
                    help="comma-separated: h1 (the sick requests on --n HTTP/1.1 connections), "
                         "h2 (as --h2-conns × --h2-streams h2c streams)")
    ap.add_argument("--h2-conns", type=int, default=60, help="h2c connections of the h2 case")
    ap.add_argument("--h2-streams", type=int, default=100, help="streams at once on each")
    ap.add_argument("--proxy", default="iuid-router,nginx,haproxy",
                    help="comma-separated: iuid-router (or router), nginx, haproxy")
    ap.add_argument("--trickle", type=int, default=400, help="healthy-region requests per phase")
    ap.add_argument("--interval", type=float, default=10, help="ms between trickle requests")
    ap.add_argument("--wait", type=float, default=3, help="s the sick clients wait for an answer")
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "iuid-router"))
    ap.add_argument("--nofile", type=int, default=0,
                    help="run every proxy under this soft and hard RLIMIT_NOFILE (prlimit), "
                         "e.g. fewer than the sick clients need")
    ap.add_argument("--loadgen", default=LOADGEN,
                    help="the loadgen binary (default: bench/loadgen's, built when stale)")
    ap.add_argument("--out", help="append the results, a markdown section, to this file")
    args = ap.parse_args()
    bench.BIN = args.bin
    proxies = ["iuid-router" if p.strip() == "router" else p.strip() for p in args.proxy.split(",")]
    for p in proxies:
        if p not in PORTS:
            sys.exit(f"unknown proxy {p}")
    cases = [c.strip() for c in args.case.split(",") if c.strip()]
    for c in cases:
        if c not in ("h1", "h2"):
            sys.exit(f"unknown case {c}")

    soft, hard = raise_nofile()  # the proxies and the black hole inherit it
    if soft < args.n + 1000:
        sys.exit(f"needs {args.n + 1000} file descriptors; the limit is {soft}")
    busy = [p for p in [EU, HOLE, ADMIN] + list(PORTS.values())
            if subprocess.run(["ss", "-Hltn", f"( sport = :{p} )"], capture_output=True,
                              text=True).stdout.strip()]
    if busy:
        sys.exit(f"ports in use: {busy}")
    build_loadgen(args.loadgen)

    work = tempfile.mkdtemp(prefix="iuid-brownout-")
    rows, notes = [], []
    try:
        ids = {"eu": bench.mint(3, 1)[0], "us": bench.mint(2, 1)[0]}
        configs(work)
        upstreams = start(["nginx", "-c", f"{work}/upstreams.conf", "-p", work], f"{work}/upstreams.log")
        bench.wait_tcp(EU)
        for name in proxies:
            for case in cases:
                print(f"== {name}, {case_label(case, args)}", flush=True)
                if case == "h2" and name in H2_SKIP:
                    r = {"proxy": name, "case": case, "skipped": H2_SKIP[name]}
                else:
                    r = run_proxy(name, case, work, args, ids)
                    if not r["alive"]:
                        notes.append(f"{name} ({case}) had exited by the last reading.")
                rows.append(r)
                print("\n".join(table([r], args)[2:]), flush=True)
        stop(upstreams)
        for log in ("router.log", "nginx.err", "haproxy.log", "loadgen.log", "hole.log"):
            path = f"{work}/{log}"
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    text = f.read()
                kinds = {}
                for l in text.splitlines():
                    if log in ("loadgen.log", "hole.log") or any(
                            w in l.lower() for w in ("error", "alert", "warn", "emerg")):
                        # iuid-router: "<time>  WARN target: message fields"; nginx: "<date> <time> [level] pid#tid: *conn message"
                        key = re.sub(r"^\S+\s+", "", l) if log == "router.log" else re.sub(
                            r"^\S+ \S+ |\d+#\d+: |\*\d+ |, client: .*$", "", l) if log == "nginx.err" else l
                        key = re.sub(r"\d+", "N", key)[:160]
                        kinds[key] = kinds.get(key, 0) + 1
                for key, count in sorted(kinds.items(), key=lambda kv: -kv[1])[:4]:
                    notes.append(f"{log}: {count} × `{key}`")
    finally:
        for p in started:
            stop(p)
        subprocess.run(["rm", "-rf", work])

    for r in rows:
        if r.get("skipped"):
            continue
        who = f"{r['proxy']} ({r['case']})"
        if r["case"] == "h2":
            opened = (f"{r['n']} streams on {args.h2_conns} connections issued in {r['issue_s']:.2f} s; "
                      f"{r['conns_ended']} of the client's connections had ended by the judging")
        else:
            opened = f"{r['n']} connects issued in {r['issue_s']:.2f} s"
        notes.append(f"{who}: {opened}; at the reading "
                     f"the proxy had {r['conns_at_proxy']} established client connections; "
                     f"listen overflows / drops during the burst {r['overflows'][0]} / "
                     f"{r['overflows'][1]}; black hole 10 s after the clients closed: "
                     f"{r['hole_after']['open']} of {r['hole_after']['accepted']} connections still "
                     f"open (the proxy had not closed them), 20 s after {r['hole_after20']['open']}; "
                     f"{r['hole_after20']['requests']} requests read in all; {r['log_before_stop']} "
                     f"log lines before the proxy was stopped; loadgen used {r['loadgen_cpu_s']:.2f} "
                     f"CPU-s up to the judging; the proxy used {r['cpu'] * 100:.0f} % of a core from "
                     f"the burst's start to the judging"
                     + (f"; its admin `/healthz` 1 s into the burst: {r['admin'][0]} in "
                        f"{r['admin'][1]:.1f} ms" if r["admin"] else "")
                     + (f"; {r['slow']} clients' connects took over 0.5 s (a SYN sent again at "
                        f"1 s), sending later." if r["case"] == "h1" else "."))
        fast, slow = r["fast503"], r["slow503"]
        if r["case"] == "h1" and fast["count"] and slow["count"]:
            notes.append(f"{who}: 503s to clients connected at once: {fast['count']}, p50 "
                         f"{ms(fast['p50'])} / p99 {ms(fast['p99'])} ms; to those connected after "
                         f"a SYN retry: {slow['count']}, p50 {ms(slow['p50'])} / p99 "
                         f"{ms(slow['p99'])} ms.")
        if r["case"] == "h1" and r["lat503"]["count"]:
            seen = r["seen503"]
            notes.append(f"{who}: the 503s' times from the kernel's receive timestamps "
                         f"(SO_TIMESTAMPNS, {r['kernel503']} of {r['lat503']['count']}); as "
                         f"loadgen's loop saw them: p50 {ms(seen['p50'])} ms, p99 {ms(seen['p99'])} "
                         f"ms, max {ms(seen['max'])} ms.")
        t = r["lat503"]
        if t["count"]:
            notes.append(f"{who}: 503s min / p50 / p90 / p99 / max {ms(t['min'])} / {ms(t['p50'])} / "
                         f"{ms(t['p90'])} / {ms(t['p99'])} / {ms(t['max'])} ms.")
        if r["other_lat"]["count"]:
            o = r["other_lat"]
            notes.append(f"{who}: answers other than 503 within {args.wait:g} s: {o['count']}, p50 "
                         f"{ms(o['p50'])} / p99 {ms(o['p99'])} / max {ms(o['max'])} ms.")
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no", "src"],
                           capture_output=True, text=True).stdout.strip()
    cmd = " ".join(["python3 bench/brownout.py"] + sys.argv[1:])
    lines = ["## Brownout: a black-hole region beside a healthy one (issue 38)", "",
             f"`{cmd}` on {time.strftime('%Y-%m-%d')}, commit {commit}"
             + (" (src/ with uncommitted changes)" if dirty else "") + f", {os.cpu_count()} CPUs; "
             f"RLIMIT_NOFILE {soft}/{hard}"
             + (f" (each proxy under {args.nofile}/{args.nofile}, prlimit)" if args.nofile else "")
             + ". Region `us` is a black hole (`loadgen hole`, "
             "bench/loadgen: accepts, reads and never answers), `eu` an nginx upstream. One worker "
             "each: iuid-router `workers: 1`, `limits: { region_max_in_flight: 1024 }`; nginx "
             "`worker_processes 1`, `worker_connections 16384`; HAProxy `nbthread 1`, `maxconn 4096` "
             f"on the server, global `maxconn 9000`. Response timeouts {TIMEOUT_S} s on every proxy "
             "(HAProxy's `timeout queue` too). Listen backlogs left at each proxy's default. "
             f"`eu`: {args.trickle} GETs on one keep-alive connection, one every {args.interval:g} ms "
             "(Python, a process of its own), alone (baseline) and while the sick `us` requests "
             "come, from `loadgen` (compiled, one thread): in the HTTP/1.1 case "
             f"{args.n} clients each connect at once and send one GET (connects issued in batches "
             f"of {BATCH}, the I/O polled between batches); in the HTTP/2 case {args.h2_conns} h2c "
             f"connections (prior knowledge) each open {args.h2_streams} streams at once, one GET "
             f"each. Each sick request is judged {args.wait:g} s after the last was issued. "
             "Times of the HTTP/1.1 503s: from each client's send (wall clock just before it) to "
             "the kernel's receive timestamp of the answer's first bytes (SO_TIMESTAMPNS), so the "
             "client loop's own delay in reading is left out; a client whose connect completed on "
             "its side while the proxy's accept queue was full (the kernel drops the handshake's "
             "last ACK: *listen overflows*) sent at once and waits until the proxy accepts it, and "
             "that wait is in. HTTP/2: from the stream's `send_request` to its response head, as "
             "loadgen's loop saw it. 2-core machine shared by the proxy, the black hole, the "
             "trickle and loadgen. *Let through*: requests the black hole read. RSS: VmRSS of the "
             "proxy's processes; *during* read at the judging; KiB per waiting request = (during − "
             "before) / let through (all the growth, the client connections or streams answered "
             "503 and still open included, charged to the waiting requests); per sick client "
             "connection or stream = (during − before) / sick requests sent. Readings 10 s and 20 s "
             "after the sick clients closed (20 s: past every 15 s timeout).", ""] + table(rows, args)
    lines += [""] + [f"- {n}" for n in notes] + [""]
    text = "\n".join(lines)
    print()
    print(text)
    if args.out:
        idle.append_section(args.out, text)


if __name__ == "__main__":
    try:
        main()
    finally:
        for p in started:
            stop(p)
