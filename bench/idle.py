#!/usr/bin/env python3
"""Memory per idle connection and per waiting request: iuid-router and nginx side by side.

Each proxy runs with one worker (nginx `worker_processes 1`, iuid-router `workers: 1`) and
routes by the id's country as in bench/bench.py, to nginx upstreams; a country of its own goes
to an upstream that accepts and never answers (a socket of this script). Every case starts a
fresh proxy, warms it up with 50 requests on one connection, and reads its RSS (VmRSS summed
over its processes: nginx's master and worker) from /proc:

  HTTP/1.1       N connections make one keep-alive GET each (the answer read in full) and
                 stay open; then N more connect and send nothing; then all close
  TLS HTTP/1.1   the same over HTTPS, ALPN http/1.1
  h2c            N HTTP/2 connections with prior knowledge: preface, empty SETTINGS, one GET
                 (HEADERS of HPACK literals without indexing), the answer read, idle
  TLS h2         the same over HTTPS, ALPN h2
  waiting        --waiting requests (5000) on as many connections, all to the silent upstream
  GraphQL        N connections make one keep-alive `POST /graphql` each, a JSON body
                 `{"query":"query { node(id: \\"<id>\\") { id } }"}`, the answer read; idle.
                 iuid-router routes it by the id (a `graphql: /graphql` route); nginx reads no
                 id and proxies every such POST to one fixed region (eu), as bench.py's GRAPHQL
  TLS upstream   as HTTP/1.1 (plain to the proxy), the regions' upstreams serving TLS 1.3 only
                 (the throwaway CA's localhost leaf, as bench.py's UPSTREAM_TLS), verified
  HTTP/1.0       N connections send `GET ... HTTP/1.0` with `Connection: keep-alive`, read the
                 answer (Content-Length) and stay open; those the proxy closed are counted
  burst          N connections each connect and send a GET at once, none waiting for its
                 answer; the answers are read after all N are sent; idle. iuid-router with its
                 default `workers` (one per core), nginx still one worker
  streams        issue 37's "64 streams of 1 MiB answers from a TLS upstream <= 32 MiB peak":
                 the upstreams as in TLS upstream, which answer one id of their own (minted
                 apart) with a static 1 MiB file; ONE h2c connection with prior knowledge
                 (nginx: its h2c listener) sends 64 GETs of that id at once and reads every
                 answer to its end (200 and 1048576 bytes each, checked), with curl 7.88's
                 receive windows (32 MiB per stream and for the connection). The proxy's RSS is
                 sampled every 2 ms during the transfer and VmHWM read before and after; the
                 row's "RSS with them" is the peak, count 64, KiB each = peak growth / 64.
                 --rounds rounds (5), each on a fresh proxy: the row is the one with the
                 highest peak, the others' peaks listed in it. nginx with
                 `proxy_max_temp_file_size 0` (as bench.py's RESP_BYTES), so what it holds of
                 the answers is in memory, not in a temporary file

and reports (RSS with them - RSS before) / count in KiB, and the RSS 2 s after they closed.
Kernel socket buffers are not in a process's RSS, so they are not counted.

  python3 bench/idle.py [--proxy router|nginx|both] [--n 3000] [--waiting 5000]
                        [--bin target/release/iuid-router] [--out bench/RESULTS.md]
                        [--only burst] [--rounds 5]

Uses loopback ports 18121-18134 (18125-18127: the TLS upstreams) and stops only the processes
it started.
"""

import argparse
import json
import os
import resource
import select
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (mint, tree, the HTTP/1.1 client, the routing of bench.py)

ROOT = bench.ROOT
UPSTREAMS = {"eu": 18121, "us": 18122, "ap": 18123}
HOLE = 18124  # accepts, reads nothing, answers nothing
HOLE_COUNTRY = 5
UPSTREAMS_TLS = {"eu": 18125, "us": 18126, "ap": 18127}  # the same regions, TLS 1.3 only
GRAPHQL_PATH = "/graphql"
MIB = 1 << 20  # the streams case's answer
STREAMS = 64  # streams at once on the streams case's one connection
PLAIN, TLS, NGINX_H2C, NGINX_TLS_H2, ADMIN = 18130, 18131, 18132, 18133, 18134
WARMUP = 50

started = []


def start(cmd, log):
    with open(log, "ab") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT,
                             env={k: v for k, v in os.environ.items() if k != "RUST_LOG"})
    started.append(p)
    return p


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def rss_kib(pid):
    """VmRSS of pid and its descendants (threads share their process's memory)."""
    total = 0
    for p in bench.tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def established(port):
    """Connections open on the server side of `port` (the proxy's or the silent upstream's)."""
    out = subprocess.run(["ss", "-Htn", "state", "established", f"( sport = :{port} )"],
                         capture_output=True, text=True, check=True).stdout
    return sum(1 for line in out.splitlines() if line.strip())


def nginx_has_http2():
    r = subprocess.run(["nginx", "-V"], capture_output=True, text=True)
    return "http_v2_module" in r.stdout + r.stderr


def configs(work, h2, mib_id):
    """nginx as upstreams; nginx routing as bench.py's (one worker, room for 2 × 5000
    connections); iuid-router plain and TLS, one worker. The TLS upstreams answer
    `/v1/orders/<mib_id>` with a static file of MIB bytes (the streams case)."""
    # nginx's workers run as another user (nobody, when started as root): they must get in.
    os.chmod(work, 0o711)
    os.makedirs(f"{work}/www", mode=0o755, exist_ok=True)
    with open(f"{work}/www/mib", "wb") as f:
        f.write(b"x" * MIB)
    os.chmod(f"{work}/www/mib", 0o644)
    servers = "\n".join(
        f'  server {{ listen 127.0.0.1:{port}; location / {{ add_header X-Region {region} always; '
        f'return 200 "{region}\\n"; }} }}' for region, port in UPSTREAMS.items())
    # The TLS upstreams, as bench.py's UPSTREAM_TLS: TLS 1.3 only, the localhost leaf of the
    # throwaway CA, session cache and tickets, keep-alive; one id of their own (mib_id) is
    # answered with the 1 MiB file (as bench.py's RESP_BYTES: root + try_files).
    tls_servers = "\n".join(
        f'  server {{ listen 127.0.0.1:{port} ssl; ssl_certificate {work}/certs/localhost.pem; '
        f'ssl_certificate_key {work}/certs/localhost-key.pem; ssl_protocols TLSv1.3; '
        f'location / {{ add_header X-Region {region} always; return 200 "{region}\\n"; }} '
        f'location = /v1/orders/{mib_id} {{ add_header X-Region {region} always; '
        f'root {work}/www; try_files /mib =500; }} }}'
        for region, port in UPSTREAMS_TLS.items())
    bench.write(f"{work}/upstreams.conf", f"""worker_processes 1;
daemon off;
pid {work}/upstreams.pid;
error_log {work}/upstreams.err;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  ssl_session_cache shared:up:10m;
  ssl_session_tickets on;
{servers}
{tls_servers}
}}
""")
    regions = dict(UPSTREAMS, hole=HOLE)
    countries = {**bench.COUNTRIES, HOLE_COUNTRY: "hole"}
    def groups_of(ports):
        return "\n".join(
            f"  upstream {region} {{ server 127.0.0.1:{port}; keepalive 64; keepalive_requests 1000000; }}"
            for region, port in ports.items())
    groups = groups_of(regions)
    cases = "\n".join(
        f'    "~^/v1/orders/[0-9a-fA-F-]{{14}}8[0-9a-fA-F]{country:02x}" {region};'
        for country, region in countries.items())
    location = """    location /v1/orders/ {
      if ($region = "") { return 404; }
      proxy_pass http://$region;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }"""
    # GraphQL: nginx reads no id from a body; every POST /graphql goes to eu (bench.py's floor).
    graphql_location = f"""
    location = {GRAPHQL_PATH} {{
      proxy_pass http://eu;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}"""
    ssl = f"""    ssl_certificate {work}/certs/localhost.pem;
    ssl_certificate_key {work}/certs/localhost-key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;"""
    listeners = [f"listen 127.0.0.1:{PLAIN};", f"listen 127.0.0.1:{TLS} ssl;\n{ssl}"]
    if h2:
        listeners += [f"listen 127.0.0.1:{NGINX_H2C} http2;",
                      f"listen 127.0.0.1:{NGINX_TLS_H2} ssl http2;\n{ssl}"]
    def nginx_conf(name, groups, location, extra_http=""):
        server_blocks = "\n".join(f"  server {{\n    {l}\n{location}\n  }}" for l in listeners)
        bench.write(f"{work}/{name}", f"""worker_processes 1;
worker_rlimit_nofile 20000;
daemon off;
pid {work}/nginx.pid;
error_log {work}/nginx.err;
events {{ worker_connections 16384; }}
http {{
  access_log off;
  keepalive_requests 1000000;
{extra_http}{groups}
  map $uri $region {{
    default "";
{cases}
  }}
{server_blocks}
}}
""")
    nginx_conf("nginx.conf", groups, location)
    nginx_conf("nginx-graphql.conf", groups, location + graphql_location)
    # TLS upstreams as bench.py's UPSTREAM_TLS: verified against the CA as localhost (SNI),
    # TLS 1.3, sessions reused; the silent upstream stays plain (no case uses it here).
    upstream_tls = (f"  proxy_ssl_verify on;\n  proxy_ssl_trusted_certificate {work}/certs/ca.pem;\n"
                    "  proxy_ssl_name localhost;\n  proxy_ssl_server_name on;\n"
                    "  proxy_ssl_protocols TLSv1.3;\n  proxy_ssl_session_reuse on;\n")
    tls_groups = groups_of(dict(UPSTREAMS_TLS, hole=HOLE))
    tls_location = location.replace("proxy_pass http://$region;", "proxy_pass https://$region;")
    nginx_conf("nginx-upstream-tls.conf", tls_groups, tls_location, upstream_tls)
    # streams: the same, and answers larger than the proxy buffers stream to the client rather
    # than to a temporary file (as bench.py's RESP_BYTES), so what nginx holds is in memory.
    nginx_conf("nginx-streams.conf", tls_groups, tls_location,
               upstream_tls + "  proxy_max_temp_file_size 0;\n")
    table = "".join(f"  {region}: {{ upstreams: [\"http://127.0.0.1:{port}\"] }}\n"
                    for region, port in regions.items())
    table_countries = "".join(f"  {c}: {r}\n" for c, r in countries.items())
    bench.write(f"{work}/routing-table.yaml",
                f"version: idle\nregions:\n{table}countries:\n{table_countries}default_region: eu\n")
    # The same table with the regions' upstreams over TLS (bench.py's UPSTREAM_TLS table).
    region_tls = f", tls: {{ ca: {work}/certs/ca.pem, server_name: localhost }}"
    table_tls = "".join(f"  {region}: {{ upstreams: [\"https://127.0.0.1:{port}\"]{region_tls} }}\n"
                        for region, port in UPSTREAMS_TLS.items())
    table_tls += f"  hole: {{ upstreams: [\"http://127.0.0.1:{HOLE}\"] }}\n"
    bench.write(f"{work}/routing-table-tls.yaml",
                f"version: idle-tls\nregions:\n{table_tls}countries:\n{table_countries}default_region: eu\n")
    # header_read_timeout_ms also bounds how long an HTTP/1.1 connection may sit idle between
    # requests (10 s by default): raised to nginx's client_header_timeout (60 s), so that the
    # connections opened first are still open when the last ones are.
    base = (f"admin_listen: 127.0.0.1:{ADMIN}\nregion: edge\nrouting_table: routing-table.yaml\n"
            "routes:\n  - path: /v1/orders/{id}\nreload: { watch: false }\nworkers: 1\n"
            "limits: { header_read_timeout_ms: 60000 }\n" + bench.ENGINE_LINE)
    bench.write(f"{work}/router.yaml", f"listen: 127.0.0.1:{PLAIN}\n" + base)
    # Variants for one case each: a GraphQL route; the TLS upstreams' table; the default
    # `workers` (one per core), with the per-region limits above the burst (the default
    # 1,024 in flight would shed some of its 3,000 requests, which nginx has no limit for).
    bench.write(f"{work}/router-graphql.yaml", f"listen: 127.0.0.1:{PLAIN}\n" + base.replace(
        "  - path: /v1/orders/{id}\n", f"  - path: /v1/orders/{{id}}\n  - graphql: {GRAPHQL_PATH}\n"))
    bench.write(f"{work}/router-upstream-tls.yaml", f"listen: 127.0.0.1:{PLAIN}\n" + base.replace(
        "routing_table: routing-table.yaml", "routing_table: routing-table-tls.yaml"))
    bench.write(f"{work}/router-streams.yaml", f"listen: 127.0.0.1:{PLAIN}\n" + base.replace(
        "routing_table: routing-table.yaml", "routing_table: routing-table-tls.yaml"))
    bench.write(f"{work}/router-default-workers.yaml", f"listen: 127.0.0.1:{PLAIN}\n" +
                base.replace("workers: 1\n", "").replace(
                    "limits: { header_read_timeout_ms: 60000 }",
                    "limits: { header_read_timeout_ms: 60000, region_max_in_flight: 8192, "
                    "region_max_pending_connects: 8192 }"))
    bench.write(f"{work}/router-tls.yaml", f"listen: 127.0.0.1:{TLS}\n" + base +
                f"tls:\n  certificates:\n    - {{ cert: {work}/certs/localhost.pem, "
                f"key: {work}/certs/localhost-key.pem }}\n")


# HTTP/2 with the standard library: frames by hand, HPACK literals without indexing.
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
END_STREAM, ACK, END_HEADERS, PADDED = 0x1, 0x1, 0x4, 0x8
INITIAL_WINDOW_SIZE, MAX_CONCURRENT_STREAMS = 4, 3  # SETTINGS identifiers
# curl 7.88's receive windows (HTTP2_HUGE_WINDOW_SIZE), for each stream and the connection.
H2_WINDOW = 32 << 20


def frame(kind, flags, stream, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def hpack_int(value, prefix_bits):
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([value])
    out, value = bytearray([limit]), value - limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    return bytes(out + bytearray([value]))


def hpack_literal(name, value):
    """Literal header field without indexing, new name, no Huffman (RFC 7541 §6.2.2)."""
    name, value = name.encode(), value.encode()
    return b"\x00" + hpack_int(len(name), 7) + name + hpack_int(len(value), 7) + value


def h2_get(conn, port, path):
    """Preface, empty SETTINGS and a GET on stream 1; reads until the answer's end. Returns
    the answer's DATA; the server's SETTINGS are acknowledged."""
    block = b"".join(hpack_literal(n, v) for n, v in [
        (":method", "GET"), (":scheme", "https" if port in (TLS, NGINX_TLS_H2) else "http"),
        (":authority", f"127.0.0.1:{port}"), (":path", path)])
    conn.sendall(PREFACE + frame(SETTINGS, 0, 0) + frame(HEADERS, END_STREAM | END_HEADERS, 1, block))
    buf, body = b"", b""

    def read(n):
        nonlocal buf
        while len(buf) < n:
            chunk = conn.recv(65536)
            if not chunk:
                raise ConnectionError("HTTP/2 connection closed before the answer")
            buf += chunk
        out, buf = buf[:n], buf[n:]
        return out

    while True:
        head = read(9)
        length, kind, flags = int.from_bytes(head[:3], "big"), head[3], head[4]
        stream = int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
        payload = read(length)
        if kind == SETTINGS and not flags & ACK:
            conn.sendall(frame(SETTINGS, ACK, 0))
        elif kind in (GOAWAY, RST_STREAM):
            raise ConnectionError(f"HTTP/2 frame type {kind} from the server")
        elif stream == 1 and kind == DATA:
            body += payload
        if stream == 1 and kind in (DATA, HEADERS) and flags & END_STREAM:
            return body


def h2_streams(port, path, count, timeout=60):
    """ONE h2c connection with prior knowledge; `count` GETs of `path` sent at once (streams 1,
    3, …), every answer read to its end. The client's receive windows are curl 7.88's: 32 MiB
    for each stream (SETTINGS_INITIAL_WINDOW_SIZE) and for the connection (a WINDOW_UPDATE
    after the preface, topped up by what was read once half is used). Returns ({stream:
    [status, DATA bytes, ended]}, the server's SETTINGS_MAX_CONCURRENT_STREAMS or None).
    Not curl: curl 7.88's `--parallel --http2-prior-knowledge` fails every transfer after the
    first on the reused connection ("Error in the HTTP2 framing layer", curl issue 10634, fixed
    in 8.0), and `--parallel-immediate` opens a connection per transfer."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    out = bytearray(PREFACE + frame(SETTINGS, 0, 0, INITIAL_WINDOW_SIZE.to_bytes(2, "big")
                                    + H2_WINDOW.to_bytes(4, "big"))
                    + frame(WINDOW_UPDATE, 0, 0, (H2_WINDOW - 65535).to_bytes(4, "big")))
    streams = {}
    for i in range(count):
        sid = 2 * i + 1
        out += frame(HEADERS, END_STREAM | END_HEADERS, sid, b"".join(
            hpack_literal(n, v) for n, v in [(":method", "GET"), (":scheme", "http"),
                                             (":authority", f"127.0.0.1:{port}"), (":path", path)]))
        streams[sid] = [None, 0, False]
    buf, pos, unacked, ended, limit = bytearray(), 0, 0, 0, None
    try:
        conn.sendall(out)

        def fill(n):
            nonlocal buf, pos
            while len(buf) - pos < n:
                if pos > (1 << 20):
                    del buf[:pos]
                    pos = 0
                chunk = conn.recv(1 << 20)
                if not chunk:
                    raise ConnectionError(f"HTTP/2 connection closed, {ended}/{count} answers ended")
                buf += chunk

        while ended < count:
            fill(9)
            length = int.from_bytes(buf[pos:pos + 3], "big")
            kind, flags = buf[pos + 3], buf[pos + 4]
            sid = int.from_bytes(buf[pos + 5:pos + 9], "big") & 0x7FFFFFFF
            fill(9 + length)
            start, pos = pos + 9, pos + 9 + length
            if kind == DATA:
                pad = buf[start] + 1 if flags & PADDED else 0
                streams[sid][1] += length - pad
                unacked += length
                if unacked >= H2_WINDOW // 2:  # the connection's window; streams' are > 1 MiB
                    conn.sendall(frame(WINDOW_UPDATE, 0, 0, unacked.to_bytes(4, "big")))
                    unacked = 0
            elif kind == HEADERS and streams[sid][0] is None:
                # :status is the first field; 0x88 is the static table's `:status: 200`.
                streams[sid][0] = 200 if buf[start] == 0x88 else f"not 200 (0x{buf[start]:02x})"
            elif kind == SETTINGS and not flags & ACK:
                payload = bytes(buf[start:pos])
                for k in range(0, len(payload), 6):
                    if int.from_bytes(payload[k:k + 2], "big") == MAX_CONCURRENT_STREAMS:
                        limit = int.from_bytes(payload[k + 2:k + 6], "big")
                conn.sendall(frame(SETTINGS, ACK, 0))
            elif kind == PING and not flags & ACK:
                conn.sendall(frame(PING, ACK, 0, bytes(buf[start:pos])))
            elif kind in (GOAWAY, RST_STREAM):
                raise ConnectionError(f"HTTP/2 frame type {kind} on stream {sid} from the server "
                                      f"({bytes(buf[start:pos]).hex()}), {ended}/{count} ended")
            if kind in (DATA, HEADERS) and flags & END_STREAM and not streams[sid][2]:
                streams[sid][2] = True
                ended += 1
    finally:
        conn.close()
    return streams, limit


class Hole:
    """An upstream that accepts connections and never reads or answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", HOLE))
        self.sock.listen(8192)
        self.sock.settimeout(0.2)
        self.conns, self.done = [], False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.done:
            try:
                self.conns.append(self.sock.accept()[0])
            except socket.timeout:
                pass
            except OSError:
                time.sleep(0.05)

    def drop(self):
        for c in self.conns:
            c.close()
        self.conns = []

    def close(self):
        self.done = True
        self.thread.join()
        self.drop()
        self.sock.close()


def close_all(conns):
    for c in conns:
        try:
            c.close()
        except OSError:
            pass
    conns.clear()


class Case:
    """One proxy, fresh for one case: start, warm up, read RSS at each step."""

    def __init__(self, name, proxy, work, args, ids, variant=None):
        """`variant`: the config of one case (router-<variant>.yaml, nginx-<variant>.conf, the
        latter where there is one)."""
        self.name, self.proxy, self.work, self.args, self.ids = name, proxy, work, args, ids
        self.tls = name.startswith("TLS") and name != "TLS upstream"
        port = TLS if self.tls else PLAIN
        if proxy == "nginx":
            config = f"{work}/nginx-{variant}.conf" if variant else f"{work}/nginx.conf"
            if not os.path.exists(config):
                config = f"{work}/nginx.conf"
            self.p = start(["nginx", "-c", config, "-p", work], f"{work}/nginx.log")
            self.port = {"h2c": NGINX_H2C, "TLS h2": NGINX_TLS_H2, "streams": NGINX_H2C}.get(name, port)
        else:
            config = f"{work}/router-tls.yaml" if self.tls else f"{work}/router.yaml"
            if variant:
                config = f"{work}/router-{variant}.yaml"
            self.p = start([args.bin, "serve", "--config", config], f"{work}/router.log")
            self.port = port
        self.listen = self.port
        bench.wait_tcp(self.port)
        if proxy == "nginx":  # the routing servers listen together; wait for all of them
            for other in (PLAIN, TLS):
                bench.wait_tcp(other)
        self.rows = []

    def h1(self, alpn=None):
        """A connection that made one keep-alive GET, its answer read in full."""
        conn = bench.client(self.port, "https" if self.tls else "http", f"{self.work}/certs",
                            alpn=alpn)
        if alpn and conn.selected_alpn_protocol() != alpn[0]:
            raise SystemExit(f"{self.proxy}: ALPN chose {conn.selected_alpn_protocol()}, not {alpn[0]}")
        status, headers, _, reusable = bench.exchange(conn, "GET", f"/v1/orders/{self.ids['eu']}")
        if status != 200 or headers.get("x-region") != "eu" or not reusable:
            raise SystemExit(f"{self.proxy} {self.name}: answered {status} {headers}")
        return conn

    def h2(self):
        conn = bench.client(self.port, "https" if self.tls else "http", f"{self.work}/certs",
                            alpn=["h2"])
        if self.tls:
            if conn.selected_alpn_protocol() != "h2":
                raise SystemExit(f"{self.proxy}: ALPN chose {conn.selected_alpn_protocol()}, not h2")
        body = h2_get(conn, self.port, f"/v1/orders/{self.ids['eu']}")
        if body != b"eu\n":
            raise SystemExit(f"{self.proxy} {self.name}: the HTTP/2 answer was {body!r}")
        return conn

    def graphql(self):
        """A connection that made one keep-alive POST /graphql (`node(id:)` of an eu id in a
        JSON body), its answer read in full."""
        conn = bench.client(self.port)
        status, headers, _, reusable = self.graphql_request(conn)
        if status != 200 or headers.get("x-region") != "eu" or not reusable:
            conn.close()
            raise SystemExit(f"{self.proxy} {self.name}: answered {status} {headers}")
        return conn

    def graphql_request(self, conn):
        body = json.dumps({"query": f'query {{ node(id: "{self.ids["eu"]}") {{ id }} }}'},
                          separators=(",", ":")).encode()
        return bench.exchange(conn, "POST", GRAPHQL_PATH, body, "Content-Type: application/json\r\n")

    def h10(self):
        """A connection that sent one HTTP/1.0 GET with `Connection: keep-alive`, the answer
        (it has Content-Length) read. The first answer's status line and Connection header
        are kept for the report."""
        conn = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        conn.sendall(f"GET /v1/orders/{self.ids['eu']} HTTP/1.0\r\nHost: x\r\n"
                     "Connection: keep-alive\r\n\r\n".encode())
        buf = b""
        while b"\r\n" not in buf:
            chunk = conn.recv(65536)
            if not chunk:
                conn.close()
                raise SystemExit(f"{self.proxy} {self.name}: closed without an answer")
            buf += chunk
        status_line = buf.split(b"\r\n", 1)[0].decode("latin-1")
        status, headers, body = bench.read_answer(conn, buf)
        if status != 200 or headers.get("x-region") != "eu" or "content-length" not in headers:
            conn.close()
            raise SystemExit(f"{self.proxy} {self.name}: answered {status} {headers}")
        if not hasattr(self, "h10_answer"):
            self.h10_answer = f"`{status_line}`, Connection: `{headers.get('connection', '(none)')}`"
        return conn

    def warm_up(self, make, request=None):
        """WARMUP requests on one connection, as a proxy that has served traffic is measured;
        `request(conn)` makes one of this case's kind (a GET by default). The HTTP/2 and
        HTTP/1.0 cases warm up with WARMUP connections of one request each."""
        if make in (self.h2, self.h10):
            for _ in range(WARMUP):
                make().close()
        else:
            conn = bench.client(self.port, "https" if self.tls else "http", f"{self.work}/certs")
            for _ in range(WARMUP):
                if request:
                    request(conn)
                else:
                    bench.exchange(conn, "GET", f"/v1/orders/{self.ids['eu']}")
            conn.close()
        time.sleep(0.5)
        self.before = self.level = rss_kib(self.p.pid)

    def add(self, what, count, make):
        """Opens `count` connections with `make`, reads RSS; a row against the last level."""
        conns, t0 = [], time.time()
        try:
            for _ in range(count):
                conns.append(make())
        except BaseException:
            close_all(conns)
            raise
        took = time.time() - t0
        time.sleep(0.5)
        rss = rss_kib(self.p.pid)
        self.rows.append({"proxy": self.proxy, "case": what, "count": count,
                          "open": established(self.listen), "before": self.level, "with": rss,
                          "per": (rss - self.level) / count, "took": took,
                          "closed": closed_by_peer(conns)})
        self.level = rss
        return conns

    def closed(self, conns, hole=None):
        close_all(conns)
        if hole:
            time.sleep(0.5)
            hole.drop()
        time.sleep(2.0)
        after = rss_kib(self.p.pid)
        for row in self.rows:
            row["after"], row["start"] = after, self.before
        stop(self.p)
        return self.rows


def closed_by_peer(conns):
    """How many of the client connections the proxy has closed (readable, and at their end)."""
    poll = select.poll()
    by_fd = {}
    for c in conns:
        poll.register(c, select.POLLIN)
        by_fd[c.fileno()] = c
    closed = 0
    for fd, events in poll.poll(0):
        c = by_fd[fd]
        if events & (select.POLLHUP | select.POLLERR):
            closed += 1
            continue
        try:
            if isinstance(c, ssl.SSLSocket):
                continue  # TLS 1.3 session tickets make it readable; not peeked
            if c.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                closed += 1
        except (BlockingIOError, OSError):
            pass
    return closed


def burst(case, count):
    """`count` connections, each connecting and sending its GET at once; the answers are read
    only after all are sent, then the connections stay open, idle."""
    conns, t0 = [], time.time()
    request = f"GET /v1/orders/{case.ids['eu']} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    try:
        for _ in range(count):
            c = socket.create_connection(("127.0.0.1", case.port), timeout=10)
            conns.append(c)
            c.sendall(request)
        for c in conns:
            status, headers, _ = bench.read_answer(c)
            if status != 200 or headers.get("x-region") != "eu" or \
                    headers.get("connection", "").lower() == "close":
                raise SystemExit(f"{case.proxy} {case.name}: answered {status} {headers}")
    except BaseException:
        close_all(conns)
        raise
    took = time.time() - t0
    time.sleep(0.5)
    rss = rss_kib(case.p.pid)
    case.rows.append({"proxy": case.proxy, "case": f"burst: {count} connect + GET at once, "
                      "answers read after all sent, then idle", "count": count,
                      "open": established(case.listen), "before": case.level, "with": rss,
                      "per": (rss - case.level) / count, "took": took,
                      "closed": closed_by_peer(conns)})
    case.level = rss
    return conns


PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


def statm_kib(pid):
    """Resident memory of `pid` (/proc/PID/statm's second field, what VmRSS shows; cheaper to
    read every few ms than status)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE_KIB
    except OSError:
        return 0


def hwm_kib(pid):
    """VmHWM of `pid`: the peak of its VmRSS over its life."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return 0


def streams(case, count=STREAMS):
    """`count` GETs of the 1 MiB answer at once on ONE h2c connection (h2_streams), each read
    to its end; the RSS of the proxy's processes is sampled every 2 ms during the transfer and
    their VmHWM read before and after. A process's peak is its VmHWM after the transfer where
    that rose during it (then it is the peak exactly), else its highest sample; the peak is
    their sum (nginx: master and worker)."""
    pids = bench.tree(case.p.pid)
    level = rss_kib(case.p.pid)
    hwm_before = {p: hwm_kib(p) for p in pids}
    highest = {p: statm_kib(p) for p in pids}
    peak, done = [sum(highest.values())], threading.Event()

    def sample():
        while not done.is_set():
            now = {p: statm_kib(p) for p in pids}
            for p, kib in now.items():
                highest[p] = max(highest[p], kib)
            peak[0] = max(peak[0], sum(now.values()))
            time.sleep(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.time()
    try:
        answers, limit = h2_streams(case.port, f"/v1/orders/{case.ids['mib']}", count)
    except (ConnectionError, OSError) as e:
        raise SystemExit(f"{case.proxy} streams: {e}")
    finally:
        took = time.time() - t0
        done.set()
        sampler.join()
    hwm_after = {p: hwm_kib(p) for p in pids}
    complete = sum(1 for status, size, end in answers.values() if (status, size, end) == (200, MIB, True))
    if complete != count:
        raise SystemExit(f"{case.proxy} streams: {complete}/{count} complete answers: "
                         f"{sorted(set(map(tuple, answers.values())), key=str)}")
    sampled = peak[0]
    risen = [p for p in pids if hwm_after[p] > hwm_before[p]]
    with_ = sum(max(hwm_after[p], highest[p]) if p in risen else highest[p] for p in pids)
    how = (f"VmHWM risen during the transfer in {len(risen)} of {len(pids)} process(es)"
           if risen else "VmHWM unchanged: highest samples")
    case.rows.append({"proxy": case.proxy, "case": f"streams: {count} × 1 MiB GET at once on one "
                      "h2c connection, upstreams over TLS 1.3; peak during the transfer",
                      "count": count, "open": 1, "before": level, "with": with_,
                      "per": (with_ - level) / count, "took": took,
                      "extra": f"1 h2c connection, {complete}/{count} answers 200 of {MIB} B read to "
                               f"their end in {took:.2f} s (server MAX_CONCURRENT_STREAMS "
                               f"{limit if limit is not None else 'unlimited'}); "
                               f"peak +{mib(with_ - level)} MiB ({how}; highest sample "
                               f"+{mib(sampled - level)} MiB)"})
    case.level = level
    return []


def silent(port):
    conn = socket.create_connection(("127.0.0.1", port), timeout=5)
    return conn


def waiting(case, hole, count, uid):
    """`count` requests sent to the silent upstream through the proxy; RSS once they are all
    there (or 10 s on: iuid-router answers 504 after timeouts.response_headers_ms, 15 s)."""
    conns, t0 = [], time.time()
    request = f"GET /v1/orders/{uid} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    for _ in range(count):
        c = socket.create_connection(("127.0.0.1", case.port), timeout=5)
        c.sendall(request)
        conns.append(c)
    took = time.time() - t0
    deadline, last, stable = time.time() + 10, -1, 0
    while time.time() < deadline:
        n = len(hole.conns)
        if n >= count:
            break
        stable = stable + 1 if n == last else 0
        if stable >= 10:
            break
        last = n
        time.sleep(0.2)
    time.sleep(0.5)
    rss = rss_kib(case.p.pid)
    # Any answer already (a 502/504) would mean the request is no longer waiting.
    poll = select.poll()
    for c in conns:
        poll.register(c, select.POLLIN)
    answered = len(poll.poll(0))
    case.rows.append({"proxy": case.proxy, "case": "waiting request (upstream silent)",
                      "count": count, "open": established(case.listen),
                      "upstream": established(HOLE), "answered": answered,
                      "before": case.level, "with": rss, "per": (rss - case.level) / count,
                      "took": took})
    return conns


def run_proxy(proxy, work, args, ids, hole, notes):
    rows = []

    def wanted(title):
        return not args.only or args.only.lower() in title.lower()

    # HTTP/1.1: kept-alive, then never used, then all closed.
    if wanted("HTTP/1.1"):
        case = Case("HTTP/1.1", proxy, work, args, ids)
        case.warm_up(case.h1)
        kept = case.add("HTTP/1.1 kept-alive (one GET, then idle)", args.n, case.h1)
        never = case.add("never used (TCP connect, nothing sent)", args.n,
                         lambda: silent(case.port))
        rows += case.closed(kept + never)
        print_rows(rows[-2:])

    if wanted("TLS HTTP/1.1"):
        case = Case("TLS HTTP/1.1", proxy, work, args, ids)
        case.warm_up(case.h1)
        conns = case.add("TLS HTTP/1.1 kept-alive (ALPN http/1.1, one GET)", args.n,
                         lambda: case.h1(["http/1.1"]))
        rows += case.closed(conns)
        print_rows(rows[-1:])

    if proxy == "nginx" and not args.nginx_h2:
        notes.append("nginx: this nginx lacks the http2 module; no HTTP/2 rows for it.")
    else:
        for name, what in [("h2c", "h2c prior knowledge (one GET, then idle)"),
                           ("TLS h2", "TLS h2 (ALPN h2, one GET, then idle)")]:
            if not wanted(name):
                continue
            case = Case(name, proxy, work, args, ids)
            case.warm_up(case.h2)
            conns = case.add(what, args.n, case.h2)
            rows += case.closed(conns)
            print_rows(rows[-1:])

    if wanted("waiting"):
        case = Case("waiting", proxy, work, args, ids)
        case.warm_up(case.h1)
        conns = waiting(case, hole, args.waiting, ids["hole"])
        rows += case.closed(conns, hole)
        print_rows(rows[-1:])

    def graphql():
        case = Case("GraphQL", proxy, work, args, ids, "graphql")
        case.warm_up(case.graphql, lambda conn: case.graphql_request(conn))
        what = ("GraphQL POST /graphql kept-alive (one POST, then idle)" if proxy == "iuid-router"
                else "GraphQL POST /graphql kept-alive (proxied to eu, no id read)")
        return case.closed(case.add(what, args.n, case.graphql))

    def upstream_tls():
        case = Case("TLS upstream", proxy, work, args, ids, "upstream-tls")
        case.warm_up(case.h1)
        return case.closed(case.add("HTTP/1.1 kept-alive, upstreams over TLS 1.3 (one GET)",
                                    args.n, case.h1))

    def h10():
        case = Case("HTTP/1.0", proxy, work, args, ids)
        case.warm_up(case.h10)
        conns = case.add("HTTP/1.0 keep-alive (one GET, then idle)", args.n, case.h10)
        notes.append(f"{proxy}, HTTP/1.0 keep-alive: the answer was {case.h10_answer}.")
        return case.closed(conns)

    def burst_case():
        case = Case("burst", proxy, work, args, ids,
                    "default-workers" if proxy == "iuid-router" else None)
        case.warm_up(case.h1)
        if proxy == "iuid-router":
            workers = [t for t in os.listdir(f"/proc/{case.p.pid}/task")
                       if open(f"/proc/{case.p.pid}/task/{t}/comm").read().startswith("iuid-worker-")]
            notes.append(f"iuid-router, burst: default `workers`, {len(workers)} iuid-worker "
                         f"threads on {os.cpu_count()} CPUs.")
        return case.closed(burst(case, args.n))

    def streams_case():
        # The peak depends on how the transfers interleave: --rounds rounds, each on a fresh
        # proxy; the row is the round with the highest peak, the others' peaks listed in it.
        rounds = []
        for _ in range(args.rounds):
            case = Case("streams", proxy, work, args, ids, "streams")
            case.warm_up(case.h2)
            rounds += case.closed(streams(case))
        worst = max(rounds, key=lambda r: r["with"] - r["before"])
        peaks = sorted(r["with"] - r["before"] for r in rounds)
        worst["extra"] += (f"; the highest of {len(rounds)} rounds, each on a fresh proxy, whose "
                           f"peaks were +{', +'.join(mib(k) for k in peaks)} MiB")
        return [worst]

    for title, fn in [("GraphQL", graphql), ("TLS upstream", upstream_tls),
                      ("HTTP/1.0 keep-alive", h10), ("burst", burst_case),
                      ("streams", streams_case)]:
        if not wanted(title):
            continue
        if title == "streams" and proxy == "nginx" and not args.nginx_h2:
            notes.append("nginx, streams: this nginx lacks the http2 module; no row.")
            continue
        first = len(started)
        try:
            rows += fn()
            print_rows(rows[-1:])
        except (SystemExit, OSError) as e:
            for p in started[first:]:
                stop(p)
            notes.append(f"{proxy}, {title}: failed ({e}); no row.")
            print(f"   {proxy:12} {title}: failed ({e})")
    return rows


def append_section(path, text):
    """Appends `text` (a markdown section) to `path`, one blank line after what is there."""
    old = ""
    if os.path.exists(path):
        with open(path) as f:
            old = f.read()
    with open(path, "a") as f:
        f.write(("" if not old or old.endswith("\n\n") else "\n" if old.endswith("\n") else "\n\n")
                + text + "\n")


def mib(kib):
    return f"{kib / 1024:.1f}"


def table(rows):
    lines = ["| proxy | case | count | open at reading | RSS before MiB | RSS with them MiB "
             "| KiB each | RSS 2 s after close MiB (idle level before) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        open_ = f"{r['open']}"
        if "upstream" in r:
            open_ += f"; {r['upstream']} upstream, {r['answered']} answered"
        if r.get("closed"):
            open_ += f"; {r['closed']} closed by the proxy"
        if "extra" in r:
            open_ = r["extra"]
        lines.append(f"| {r['proxy']} | {r['case']} | {r['count']} | {open_} | {mib(r['before'])} "
                     f"| {mib(r['with'])} | {r['per']:.1f} | {mib(r['after'])} ({mib(r['start'])}) |")
    return lines


def print_rows(rows):
    for r in rows:
        print(f"   {r['proxy']:12} {r['case']:48} {r['count']:>5}: {r['per']:6.1f} KiB each "
              f"({mib(r['before'])} -> {mib(r['with'])} MiB, {r['open']} open, opened in "
              f"{r['took']:.1f} s; {mib(r['after'])} MiB 2 s after close)")
        if "extra" in r:
            print(f"   {'':12} {r['extra']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--proxy", choices=["router", "nginx", "both"], default="both")
    ap.add_argument("--n", type=int, default=3000, help="idle connections per case")
    ap.add_argument("--waiting", type=int, default=5000, help="requests waiting on the upstream")
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "iuid-router"))
    ap.add_argument("--only", help="run only the cases whose title contains this (e.g. burst)")
    ap.add_argument("--rounds", type=int, default=5,
                    help="rounds of the streams case, each on a fresh proxy (the highest peak is reported)")
    ap.add_argument("--out", help="append the results, a markdown section, to this file")
    args = ap.parse_args()
    bench.BIN = args.bin

    # Client and upstream ends of every connection are in this process, and the proxies
    # inherit the limit.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = max(2 * args.n, 2 * args.waiting) + 1000
    if hard != resource.RLIM_INFINITY and hard < need:
        sys.exit(f"needs {need} file descriptors; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else need, hard))

    busy = [p for p in list(UPSTREAMS.values()) + list(UPSTREAMS_TLS.values())
            + [HOLE, PLAIN, TLS, NGINX_H2C, NGINX_TLS_H2, ADMIN]
            if subprocess.run(["ss", "-Hltn", f"( sport = :{p} )"], capture_output=True,
                              text=True).stdout.strip()]
    if busy:
        sys.exit(f"ports in use: {busy}")

    args.nginx_h2 = nginx_has_http2()
    work = tempfile.mkdtemp(prefix="iuid-idle-")
    proxies = ["router", "nginx"] if args.proxy == "both" else [args.proxy]
    notes, rows, hole = [], [], None
    try:
        subprocess.run(["bash", os.path.join(ROOT, "config", "make-certs.sh"), f"{work}/certs",
                        "localhost"], check=True, capture_output=True)
        ids = {"eu": bench.mint(3, 1)[0], "hole": bench.mint(HOLE_COUNTRY, 1)[0]}
        ids["mib"] = next(i for i in bench.mint(3, 2) if i != ids["eu"])  # eu, the 1 MiB answer
        configs(work, args.nginx_h2, ids["mib"])
        upstreams = start(["nginx", "-c", f"{work}/upstreams.conf", "-p", work], f"{work}/upstreams.log")
        for port in list(UPSTREAMS.values()) + list(UPSTREAMS_TLS.values()):
            bench.wait_tcp(port)
        bench.UPSTREAMS = UPSTREAMS_TLS  # bench.py's check of its TLS upstreams, on these
        bench.check_upstream_tls(work)
        hole = Hole()
        for proxy in proxies:
            print(f"== {proxy}")
            rows += run_proxy("iuid-router" if proxy == "router" else "nginx", work, args, ids,
                              hole, notes)
        stop(upstreams)
    finally:
        if hole:
            hole.close()
        for p in started:
            stop(p)
        subprocess.run(["rm", "-rf", work])

    commit = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip()
    cmd = " ".join(["python3 bench/idle.py"] + sys.argv[1:])
    lines = ["## Idle connections and waiting requests", "",
             f"`{cmd}` on {time.strftime('%Y-%m-%d')}, commit {commit} "
             f"({os.path.relpath(args.bin, ROOT) if args.bin.startswith(ROOT) else args.bin}): "
             "one worker each (nginx `worker_processes 1`, master and worker counted, "
             "`worker_connections 16384`, which nginx allocates at start, so that is in the "
             "level before; iuid-router `workers: 1` and `limits.header_read_timeout_ms: 60000`, "
             "as nginx's `client_header_timeout`: the default, 10 s, also closes HTTP/1.1 "
             "connections idle that long, before the last of N are open), routing as "
             "bench.py's. Each case on a "
             f"fresh proxy after {WARMUP} requests; RSS is VmRSS from /proc, read 0.5 s after the "
             "last connection opened. KiB each = (RSS with them − the level before) / count; "
             "kernel socket buffers are not in RSS. HTTP/2 requests are a real GET (HPACK "
             "literals without indexing), the answer read to its end. *Open at reading*: the "
             "proxy's established connections on its listener (`ss`), for the waiting case also "
             "the silent upstream's, and the clients that had any answer; *closed by the proxy*: "
             "client connections the proxy had closed at the reading. "
             "GraphQL: one `POST /graphql` per connection, `{\"query\":\"query { node(id: "
             "\\\"<id>\\\") { id } }\"}` as application/json; iuid-router with a "
             "`graphql: /graphql` route routes it by the id, nginx reads no id and proxies it to "
             "one fixed region (eu). TLS upstream: plain HTTP/1.1 to the proxy, its regions' "
             "upstreams nginx serving TLS 1.3 only (the throwaway CA's leaf for localhost), "
             "verified as localhost (iuid-router `https://` upstreams with `tls: { ca, "
             "server_name: localhost }`, nginx `proxy_ssl_verify`, sessions reused). HTTP/1.0: "
             "`GET … HTTP/1.0` with `Connection: keep-alive`. Burst: each connection connects "
             "and sends its GET without waiting, the answers read after all are sent; "
             "iuid-router here with its default `workers` (one per core) and its per-region "
             "limits raised to 8,192 (the default 1,024 in flight sheds some of the 3,000), "
             "nginx still one worker. Streams (issue 37: 64 streams of 1 MiB answers from a TLS upstream, "
             "≤ 32 MiB peak): the TLS upstream set-up, one h2c connection with prior knowledge "
             "(nginx: its h2c listener, `proxy_max_temp_file_size 0`) sending 64 GETs at once "
             "of an id the upstreams answer with a 1 MiB file, all read to their end with "
             "32 MiB receive windows (curl 7.88's); *RSS with them* is the peak during the "
             "transfer (per process VmHWM where it rose during it, else the highest of VmRSS "
             "samples every 2 ms), KiB each the peak growth / 64; the highest of --rounds rounds, "
             "each on a fresh proxy.", ""] + table(rows)
    lines += [""] + [f"- {n}" for n in notes] + ([""] if notes else [])
    text = "\n".join(lines)
    print()
    print(text)
    if args.out:
        append_section(args.out, text)


if __name__ == "__main__":
    try:
        main()
    finally:
        for p in started:
            stop(p)
