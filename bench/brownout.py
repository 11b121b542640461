#!/usr/bin/env python3
"""Brownout: a black-hole region and a healthy one, iuid-router, nginx and HAProxy side by side
(issue 38).

Region `us` is a black hole: its upstream (a Python socket server in a process of its own)
accepts connections, reads what is sent and never answers; it keeps every socket and counts
the connections it accepted and the requests it read (a request: a head ending in CRLF CRLF).
Region `eu` is an nginx upstream answering `eu\\n`. Each proxy runs with one worker/process
(iuid-router `workers: 1` and `limits: { region_max_in_flight: 1024 }`; nginx
`worker_processes 1`, `worker_connections 16384`, as bench/idle.py; HAProxy `nbthread 1`,
`maxconn 4096` on the `us` server, its queue bounded by `timeout queue`) and routes by the
id's country as bench/bench.py does. Every proxy waits 15 s for an answer (iuid-router
`timeouts.response_headers_ms`, nginx `proxy_read_timeout`, HAProxy `timeout server` and
`timeout queue`), so the requests let through are still waiting at the reading.

For each proxy, on a fresh proxy and a fresh black hole, after 50 warm-up requests:
  1. baseline: --trickle (400) GETs of an `eu` id on one keep-alive connection, one every
     --interval ms (10), from a process of their own; p50/p99 of each request's time
  2. RSS (VmRSS of the proxy's processes, /proc) before
  3. the same trickle starts; 0.1 s later this process (RLIMIT_NOFILE raised, soft to hard)
     opens --n (6000) non-blocking connections to the proxy at once, each sending one GET of a
     `us` id as soon as it is connected, on one epoll loop (connects issued in batches of 50,
     answers polled between them). Each client's time is from its request's send to the
     first bytes of its answer, as this loop saw them (so it includes the loop's own delay)
  4. --wait (3) s after the last connect was issued: each client is classified (answered, by
     status; closed or reset by the proxy; connect failed; nothing yet), the black hole's
     counts and the proxy's RSS and open file descriptors are read ("during")
  5. the trickle's results ("during"); the sick clients close; RSS 10 s later ("after"), and
     the black hole's connections the proxy still holds then

KiB per waiting request = (RSS during − RSS before) / requests the black hole read.
Listen overflows: the kernel's TcpExtListenOverflows during the burst (a full accept queue).

  python3 bench/brownout.py [--n 6000] [--proxy router,nginx,haproxy] [--out FILE]

Uses loopback ports 18141-18148 and stops only the processes it started.
"""

import argparse
import errno
import json
import math
import multiprocessing
import os
import re
import resource
import select
import signal
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
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux: the kernel's receive time of data

# The processes this script starts and how they are stopped: idle.py's.
started, start, stop = idle.started, idle.start, idle.stop


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


# ---------------------------------------------------------------------------------------------
# The black hole: `brownout.py --hole PORT STATS` (a process of its own, so that its accepts do
# not wait on this process's client loop).

def hole_main(port, stats_path):
    raise_nofile()
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(65535)  # the kernel caps it at net.core.somaxconn
    ls.setblocking(False)
    ep = select.epoll()
    ep.register(ls.fileno(), select.EPOLLIN)
    conns, tails = {}, {}
    counts = {"accepted": 0, "requests": 0, "closed": 0, "accept_errors": 0}
    done = []
    signal.signal(signal.SIGTERM, lambda *_: done.append(1))
    written, last = None, 0.0

    def write_stats():
        tmp = stats_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(dict(counts, open=counts["accepted"] - counts["closed"]), f)
        os.replace(tmp, stats_path)

    write_stats()
    while not done:
        try:
            events = ep.poll(0.05)
        except InterruptedError:
            continue
        for fd, _ in events:
            if fd == ls.fileno():
                while True:
                    try:
                        c, _ = ls.accept()
                    except BlockingIOError:
                        break
                    except OSError:
                        counts["accept_errors"] += 1
                        break
                    c.setblocking(False)
                    conns[c.fileno()], tails[c.fileno()] = c, b""
                    ep.register(c.fileno(), select.EPOLLIN)
                    counts["accepted"] += 1
                continue
            try:
                data = conns[fd].recv(65536)
            except BlockingIOError:
                data = None
            except OSError:  # reset by the proxy
                data = b""
            if data is None:
                continue
            if not data:  # the proxy closed it: kept, no longer watched
                ep.unregister(fd)
                counts["closed"] += 1
                continue
            buf = tails[fd] + data  # a tail of 3 bytes cannot hold a whole CRLF CRLF itself
            counts["requests"] += buf.count(b"\r\n\r\n")
            tails[fd] = buf[-3:]
        now = time.time()
        state = tuple(counts.values())
        if state != written and now - last > 0.05:
            write_stats()
            written, last = state, now
    write_stats()
    for c in conns.values():
        c.close()


class Hole:
    def __init__(self, work, log):
        self.stats = f"{work}/hole-{time.time_ns()}.json"
        self.p = start([sys.executable, os.path.abspath(__file__), "--hole", str(HOLE), self.stats], log)
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
        """Counts once they stopped changing (its writes lag by up to ~0.1 s)."""
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
    if name == "iuid-router":
        return start([args.bin, "serve", "--config", f"{work}/router.yaml"], f"{work}/router.log")
    if name == "nginx":
        return start(["nginx", "-c", f"{work}/nginx.conf", "-p", work], f"{work}/nginx.log")
    return start(["haproxy", "-f", f"{work}/haproxy.cfg"], f"{work}/haproxy.log")


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


def sick_burst(port, uid, n, wait):
    """n non-blocking connections, each sending one GET of `uid` once connected. Returns
    (clients, issue time, sockets); each client a dict with 'sent', 'answer' (s since send),
    'status', 'outcome'. Judged `wait` s after the last connect was issued."""
    request = f"GET /v1/orders/{uid} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    ep = select.epoll()
    socks, clients = {}, {}
    OUT, IN = select.EPOLLOUT, select.EPOLLIN

    def handle(timeout):
        for fd, ev in ep.poll(timeout):
            c, s = clients[fd], socks[fd]
            now = time.perf_counter()
            if c["outcome"] == "connecting":
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    c["outcome"] = f"connect failed ({errno.errorcode.get(err, err)})"
                    ep.unregister(fd)
                    continue
                try:
                    wall = time.time()
                    s.send(request)
                except OSError as e:
                    c["outcome"] = f"send failed ({type(e).__name__})"
                    ep.unregister(fd)
                    continue
                c["sent"], c["wall"], c["outcome"] = now, wall, "waiting"
                ep.modify(fd, IN)
                continue
            try:
                data, anc, _, _ = s.recvmsg(4096, socket.CMSG_SPACE(16))
            except ConnectionResetError:
                c["outcome"] = "reset" if not c["buf"] else c["outcome"]
                ep.unregister(fd)
                continue
            except BlockingIOError:
                continue
            if not data:
                if not c["buf"]:
                    c["outcome"] = "closed, no answer"
                ep.unregister(fd)
                continue
            if not c["buf"]:
                c["seen"] = now - c["sent"]  # as this loop saw it
                c["answer"] = c["seen"]
                for level, kind, raw in anc:  # the kernel's receive time, when it gave one
                    if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(raw) >= 16:
                        sec, nsec = int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:16], "little")
                        c["answer"] = sec + nsec / 1e9 - c["wall"]
                        c["kernel"] = True
            c["buf"] += data
            if b"\r\n" in c["buf"]:
                try:
                    c["status"] = int(c["buf"].split(b" ", 2)[1])
                except (IndexError, ValueError):
                    c["status"] = "?"
                c["outcome"] = "answered"
                c["overloaded"] = b"region-overloaded" in c["buf"]
                ep.unregister(fd)  # kept open until the end, unread
            elif len(c["buf"]) > 64:
                c["outcome"] = "garbage"
                ep.unregister(fd)

    t0 = time.perf_counter()
    for i in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        rc = s.connect_ex(("127.0.0.1", port))
        fd = s.fileno()
        socks[fd] = s
        clients[fd] = {"outcome": "connecting", "buf": b"", "sent": None, "issued": time.perf_counter()}
        if rc not in (0, errno.EINPROGRESS):
            clients[fd]["outcome"] = f"connect failed ({errno.errorcode.get(rc, rc)})"
        else:
            ep.register(fd, OUT)
        if i % BATCH == BATCH - 1:
            handle(0)
    issued = time.perf_counter()
    deadline = issued + wait
    while time.perf_counter() < deadline:
        handle(min(0.02, max(0, deadline - time.perf_counter())))
    ep.close()
    return list(clients.values()), issued - t0, list(socks.values())


# ---------------------------------------------------------------------------------------------

def fds(pid):
    total = 0
    for p in bench.tree(pid):
        try:
            total += len(os.listdir(f"/proc/{p}/fd"))
        except OSError:
            pass
    return total


def run_proxy(name, work, args, ids):
    hole = Hole(work, f"{work}/hole.log")
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
        clients, issue_s, socks = sick_burst(port, ids["us"], args.n, args.wait)
        rss_during, fds_during = idle.rss_kib(proxy.pid), fds(proxy.pid)
        overflow1 = listen_overflows()
        held = hole.settled()
        conns_at_proxy = idle.established(port)
        during_times, during_fail = tr.result(60)
        idle.close_all(socks)
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

    outcomes, statuses = {}, {}
    for c in clients:
        if c["outcome"] == "answered":
            key = f"{c['status']}" + (" region-overloaded" if c.get("overloaded") else "")
            statuses[key] = statuses.get(key, 0) + 1
        else:
            outcomes[c["outcome"]] = outcomes.get(c["outcome"], 0) + 1
    a503 = [c for c in clients if c["outcome"] == "answered" and c["status"] == 503]
    t503 = [c["answer"] * 1000 for c in a503]
    seen503 = [c["seen"] * 1000 for c in a503]
    kernel = sum(1 for c in a503 if c.get("kernel"))
    # connects that took over 0.5 s: their SYN (or its answer) was dropped and sent again at 1 s
    slow = [c for c in clients if c["sent"] is not None and c["sent"] - c["issued"] > 0.5]
    slow503 = [c["answer"] * 1000 for c in slow if c["outcome"] == "answered" and c["status"] == 503]
    fast503 = [c["answer"] * 1000 for c in a503 if c["sent"] - c["issued"] <= 0.5]
    return {
        "proxy": name, "n": args.n, "issue_s": issue_s,
        "base": base_times, "base_fail": base_fail,
        "during": during_times, "during_fail": during_fail,
        "hole": held, "hole_after": hole_after, "hole_after20": hole_after20,
        "seen503": seen503, "slow": len(slow), "slow503": slow503, "fast503": fast503, "kernel503": kernel, "clients": len(clients),
        "rss20": rss_after20, "fds20": fds_after20, "log_before_stop": log_before_stop,
        "statuses": statuses, "outcomes": outcomes, "t503": t503,
        "rss": (rss_before, rss_during, rss_after), "fds": (fds_before, fds_during, fds_after),
        "overflows": (overflow1[0] - overflow0[0], overflow1[1] - overflow0[1]),
        "conns_at_proxy": conns_at_proxy, "alive": alive,
    }


def log_lines(work, name):
    path = f"{work}/{'router.log' if name == 'iuid-router' else 'nginx.err' if name == 'nginx' else 'haproxy.log'}"
    try:
        with open(path, errors="replace") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


mib = idle.mib


def table(rows, args):
    lines = ["| proxy | `eu` baseline: ok, p50 / p99 ms | `eu` during: ok, p50 / p99 ms (p99 × baseline) "
             "| `us` let through (black hole: connections / requests) | 503 within "
             f"{args.wait:g} s: count, p50 / p99 / max ms | other answers | no answer within "
             f"{args.wait:g} s | RSS before → during → 10 s → 20 s after MiB | KiB per waiting request "
             "(per client connection) | proxy fds before → during → 10 s → 20 s after | listen overflows |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        total = args.trickle
        bp99, dp99 = pct(r["base"], 99), pct(r["during"], 99)
        base = f"{len(r['base'])}/{total}, {pct(r['base'], 50):.2f} / {bp99:.2f}"
        during = (f"{len(r['during'])}/{total}, {pct(r['during'], 50):.2f} / {dp99:.2f} "
                  f"({dp99 / bp99:.2f}×)")
        if r["during_fail"]:
            during += "; failed: " + ", ".join(f"{v} {k}" for k, v in r["during_fail"].items())
        h = r["hole"]
        through = f"{h['requests']} ({h['accepted']} / {h['requests']})"
        t = r["t503"]
        n503 = (f"{len(t)}, {pct(t, 50):.1f} / {pct(t, 99):.1f} / {max(t):.1f}" if t else "0")
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
        lines.append(f"| {r['proxy']} | {base} | {during} | {through} | {n503} | {other} | {nothing} "
                     f"| {mib(b)} → {mib(d)} → {mib(a)} → {mib(r['rss20'])} | {per} "
                     f"| {fb} → {fd} → {fa} → {r['fds20']} "
                     f"| {r['overflows'][0]} |")
    return lines


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--hole":
        return hole_main(int(sys.argv[2]), sys.argv[3])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=6000, help="sick clients, one `us` GET each")
    ap.add_argument("--proxy", default="iuid-router,nginx,haproxy",
                    help="comma-separated: iuid-router (or router), nginx, haproxy")
    ap.add_argument("--trickle", type=int, default=400, help="healthy-region requests per phase")
    ap.add_argument("--interval", type=float, default=10, help="ms between trickle requests")
    ap.add_argument("--wait", type=float, default=3, help="s the sick clients wait for an answer")
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "iuid-router"))
    ap.add_argument("--out", help="append the results, a markdown section, to this file")
    args = ap.parse_args()
    bench.BIN = args.bin
    proxies = ["iuid-router" if p.strip() == "router" else p.strip() for p in args.proxy.split(",")]
    for p in proxies:
        if p not in PORTS:
            sys.exit(f"unknown proxy {p}")

    soft, hard = raise_nofile()  # the proxies and the black hole inherit it
    if soft < args.n + 1000:
        sys.exit(f"needs {args.n + 1000} file descriptors; the limit is {soft}")
    busy = [p for p in [EU, HOLE, ADMIN] + list(PORTS.values())
            if subprocess.run(["ss", "-Hltn", f"( sport = :{p} )"], capture_output=True,
                              text=True).stdout.strip()]
    if busy:
        sys.exit(f"ports in use: {busy}")

    work = tempfile.mkdtemp(prefix="iuid-brownout-")
    rows, notes = [], []
    try:
        ids = {"eu": bench.mint(3, 1)[0], "us": bench.mint(2, 1)[0]}
        configs(work)
        upstreams = start(["nginx", "-c", f"{work}/upstreams.conf", "-p", work], f"{work}/upstreams.log")
        bench.wait_tcp(EU)
        for name in proxies:
            print(f"== {name}", flush=True)
            r = run_proxy(name, work, args, ids)
            rows.append(r)
            print("\n".join(table([r], args)[2:]), flush=True)
            if not r["alive"]:
                notes.append(f"{name} had exited by the last reading.")
        stop(upstreams)
        for log in ("router.log", "nginx.err", "haproxy.log"):
            path = f"{work}/{log}"
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    text = f.read()
                kinds = {}
                for l in text.splitlines():
                    if any(w in l.lower() for w in ("error", "alert", "warn", "emerg")):
                        # iuid-router: "<time>  WARN target: message fields"; nginx: "<date> <time> [level] pid#tid: *conn message"
                        key = re.sub(r"^\S+\s+", "", l) if log == "router.log" else re.sub(
                            r"^\S+ \S+ |\d+#\d+: |\*\d+ |, client: .*$", "", l)
                        key = re.sub(r"\d+", "N", key)[:160]
                        kinds[key] = kinds.get(key, 0) + 1
                for key, count in sorted(kinds.items(), key=lambda kv: -kv[1])[:4]:
                    notes.append(f"{log}: {count} × `{key}`")
    finally:
        for p in started:
            stop(p)
        subprocess.run(["rm", "-rf", work])

    for r in rows:
        notes.append(f"{r['proxy']}: {r['n']} connects issued in {r['issue_s']:.2f} s; at the reading "
                     f"the proxy had {r['conns_at_proxy']} established client connections; "
                     f"listen overflows / drops during the burst {r['overflows'][0]} / "
                     f"{r['overflows'][1]}; black hole 10 s after the clients closed: "
                     f"{r['hole_after']['open']} of {r['hole_after']['accepted']} connections still "
                     f"open (the proxy had not closed them), 20 s after {r['hole_after20']['open']}; "
                     f"{r['hole_after20']['requests']} requests read in all; {r['log_before_stop']} "
                     f"log lines before the proxy was stopped; {r['slow']} clients' connects took "
                     f"over 0.5 s (a SYN sent again at 1 s), sending later.")
        if r["slow503"] and r["fast503"]:
            notes.append(f"{r['proxy']}: 503s to clients connected at once: {len(r['fast503'])}, p50 "
                         f"{pct(r['fast503'], 50):.1f} / p99 {pct(r['fast503'], 99):.1f} ms; to those "
                         f"connected after a SYN retry: {len(r['slow503'])}, p50 "
                         f"{pct(r['slow503'], 50):.1f} / p99 {pct(r['slow503'], 99):.1f} ms.")
        if r["t503"]:
            notes.append(f"{r['proxy']}: the 503s' times from the kernel's receive timestamps "
                         f"(SO_TIMESTAMPNS, {r['kernel503']} of {len(r['t503'])}); as the client loop "
                         f"saw them: p50 {pct(r['seen503'], 50):.1f} ms, p99 {pct(r['seen503'], 99):.1f} ms.")
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    cmd = " ".join(["python3 bench/brownout.py"] + sys.argv[1:])
    lines = ["## Brownout: a black-hole region beside a healthy one (issue 38)", "",
             f"`{cmd}` on {time.strftime('%Y-%m-%d')}, commit {commit}, {os.cpu_count()} CPUs; "
             f"RLIMIT_NOFILE {soft}/{hard}. Region `us` is a black hole (a Python server that "
             "accepts, reads and never answers), `eu` an nginx upstream. One worker each: "
             "iuid-router `workers: 1`, `limits: { region_max_in_flight: 1024 }`; nginx "
             "`worker_processes 1`, `worker_connections 16384`; HAProxy `nbthread 1`, `maxconn 4096` "
             f"on the server, global `maxconn 9000`. Response timeouts {TIMEOUT_S} s on every proxy "
             "(HAProxy's `timeout queue` too). Listen backlogs left at each proxy's default. "
             f"`eu`: {args.trickle} GETs on one keep-alive connection, one every {args.interval:g} ms, "
             f"alone (baseline) and while {args.n} clients each connect at once and send one GET of a "
             f"`us` id; each sick client is judged {args.wait:g} s after the last connect was issued. "
             "Times of the 503s: from each client's send (wall clock just before it) to the kernel's "
             "receive timestamp of the answer's first bytes (SO_TIMESTAMPNS), so the client loop's "
             "own delay in reading is left out; a client whose connect completed on its side while "
             "the proxy's accept queue was full (the kernel drops the handshake's last ACK: *listen "
             "overflows*) sent at once and waits until the proxy accepts it, and that wait is in. "
             "2-core machine shared by the proxy, the black hole, the trickle and the clients' one "
             "epoll loop (connects issued in batches of 50 between polls). *Let through*: requests the black hole read. RSS: VmRSS of the proxy's "
             "processes; *during* read at the judging; KiB per waiting request = (during − before) / "
             "let through (all the growth, the client connections answered 503 and still open "
             "included, charged to the waiting requests); per client connection = (during − before) "
             "/ --n. Readings 10 s and 20 s after the sick clients closed (20 s: past every "
             "15 s timeout).", ""] + table(rows, args)
    lines += [""] + [f"- {n}" for n in notes] + [""]
    text = "\n".join(lines)
    print()
    print(text)
    if args.out:
        old = ""
        if os.path.exists(args.out):
            with open(args.out) as f:
                old = f.read()
        with open(args.out, "a") as f:
            f.write(("" if not old or old.endswith("\n\n") else "\n" if old.endswith("\n") else "\n\n")
                    + text)


if __name__ == "__main__":
    try:
        main()
    finally:
        for p in started:
            stop(p)
