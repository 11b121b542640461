#!/usr/bin/env python3
"""Side-by-side benchmark of iuid-router against nginx and HAProxy doing the same routing.

Started by bench/run.sh. Every peer first proves it routes every sample id to the right
region (or 404 for ids of unknown countries); then wrk drives each peer in turn, A B C D
interleaved, for several rounds. Proxy CPU is read from /proc (all processes and threads of
the proxy), peak RSS from VmHWM. The report goes to bench/RESULTS.md.

Modes, from the environment; each applies to every proxy of the run, and they combine:
  TLS=1          the proxies terminate HTTPS (one certificate for all) and their TLS listeners
                 are the measured targets; the upstreams stay plain HTTP (unless UPSTREAM_TLS=1)
  CONNCLOSE=1    a new connection per request (`Connection: close` on every request)
  RESP_BYTES=N   the upstreams answer N-byte bodies (a static file of N bytes)
  REQ_BYTES=N    POST requests with N-byte bodies
  UPSTREAM_TLS=1 the upstreams serve TLS 1.3 only (a leaf for localhost and 127.0.0.1 signed by
                 the throwaway CA, session cache and tickets on, keep-alive); every proxy
                 verifies it against that CA (name localhost), keeps its upstream connections
                 alive and resumes sessions
  GRAPHQL=1      POST /graphql with `{"query":"query { node(id: \\"<id>\\") { id } }"}` (JSON, a
                 different id per request); iuid-router routes it by the id, nginx and HAProxy
                 read no id and proxy every such POST to one fixed region (eu): a floor, not the
                 same work. iuid-router's REST path (GET /v1/orders/<id>) is driven in the same
                 rounds as one more target. Not with REQ_BYTES.
  BODY_FORM=F    with GRAPHQL=1, the id in another body: `mutation` (POST /graphql,
                 `mutation { cancelOrder(input: {id: "<id>"}) { order { id } } }`, routed by the
                 `input.id` argument) or `json` (POST /v1/payments with `{"order_id":"<id>"}`, a
                 `json: /order_id` route); `node` (the default) is the `node(id:)` query
  RATE_LIMIT=1   (callgrind only) the router with one `client_ip` rate limit in memory, every
                 request admitted (docs/rate-limits.md "Cost")
Unset, the run is the default one: GET over plain HTTP/1.1 keep-alive, answers of 3 bytes.
The callgrind counts honour CONNCLOSE, RESP_BYTES, REQ_BYTES, UPSTREAM_TLS and GRAPHQL, and the
client side of them is plain HTTP always.

Each round also reads the upstream nginx's CPU (its own process tree, apart from the routing
nginx) and the connections it accepted (its stub_status), and counts the TCP connections to or
from the upstream ports that entered TIME-WAIT during the round: a proxy that churns its
upstream connections opens and leaves thousands.
"""

import argparse
import http.client
import json
import os
import platform
import re
import select
import shutil
import socket
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# IUID_ROUTER_BIN compares another build (say, main's before a change) under the same job.
BIN = os.environ.get("IUID_ROUTER_BIN", os.path.join(ROOT, "target", "release", "iuid-router"))
UPSTREAMS = {"eu": 18081, "us": 18082, "ap": 18083}
# The upstream nginx's stub_status (plain HTTP): connections it accepted, read per round.
UPSTREAM_STATUS = 18084
PORTS = {"nginx": 18090, "haproxy": 18091, "iuid-router": 18092}
ADMIN = 18093
# TLS termination (nginx `listen ssl`, HAProxy `bind ... ssl`, iuid-router `tls:`), and a
# second iuid-router binary to compare in the same run (`IUID_ROUTER_BEFORE_BIN`).
TLS_PORTS = {"nginx TLS": 18101, "haproxy TLS": 18100, "iuid-router TLS": 18102}
BEFORE_PORT, BEFORE_ADMIN, TLS_ADMIN = 18103, 18104, 18105
BEFORE_BIN = os.environ.get("IUID_ROUTER_BEFORE_BIN")
# HTTP1_ENGINE=own|hyper: `http1_engine` for an older binary (IUID_ROUTER_BIN from before
# issue 37, which removed the key); unset for the current one

ENGINE_LINE = f"http1_engine: {os.environ['HTTP1_ENGINE']}\n" if os.environ.get("HTTP1_ENGINE") else ""
# Ports of the callgrind runs: nginx, HAProxy, iuid-router, its admin API.
CG_PORT = 18094
# The modes (see the docstring); all unset is the default run.
TLS = os.environ.get("TLS", "") == "1"
CONNCLOSE = os.environ.get("CONNCLOSE", "") == "1"
RESP_BYTES = int(os.environ.get("RESP_BYTES") or 0)
REQ_BYTES = int(os.environ.get("REQ_BYTES") or 0)
UPSTREAM_TLS = os.environ.get("UPSTREAM_TLS", "") == "1"
GRAPHQL = os.environ.get("GRAPHQL", "") == "1"
# TRACE_RATIO=r: the router (callgrind run) with `tracing:` at `sample_ratio: r`, spans posted
# over OTLP/HTTP to the upstream nginx's `/v1/traces` (a collector that takes every batch);
# callgrind counts the export's thread with the data path's.
TRACE_RATIO = os.environ.get("TRACE_RATIO", "")
# RATE_LIMIT=1: the router (callgrind run) with one `client_ip` rate limit in memory, high
# enough that every request is admitted (docs/rate-limits.md): what a check costs.
RATE_LIMIT = os.environ.get("RATE_LIMIT", "") == "1"
if GRAPHQL and REQ_BYTES:
    sys.exit("GRAPHQL=1 sends its own body: unset REQ_BYTES")
# GRAPHQL=1: iuid-router's GraphQL endpoint, and the region nginx and HAProxy send every
# GraphQL request to (they read no id from the body).
# BODY_FORM: which body carries the id (`node`, `mutation`, `json`).
BODY_FORM = os.environ.get("BODY_FORM", "node")
if BODY_FORM not in ("node", "mutation", "json"):
    sys.exit("BODY_FORM is node, mutation or json")
GRAPHQL_PATH = "/v1/payments" if BODY_FORM == "json" else "/graphql"
FLOOR_REGION = "eu"


def id_body(uid):
    """The JSON body carrying `uid` in this run's BODY_FORM."""
    if BODY_FORM == "json":
        doc = {"order_id": uid}
    elif BODY_FORM == "mutation":
        doc = {"query": f'mutation {{ cancelOrder(input: {{id: "{uid}"}}) {{ order {{ id }} }} }}'}
    else:
        doc = {"query": f'query {{ node(id: "{uid}") {{ id }} }}'}
    return json.dumps(doc, separators=(",", ":"))


def mode_text():
    """The modes of this run, for the report's header line."""
    parts = []
    if TLS:
        parts.append("TLS=1 (HTTPS to every proxy, one certificate"
                     + ("" if UPSTREAM_TLS else "; upstreams plain HTTP") + ")")
    if CONNCLOSE:
        parts.append("CONNCLOSE=1 (a new connection per request, `Connection: close`)")
    if RESP_BYTES:
        parts.append(f"RESP_BYTES={RESP_BYTES} (upstream answers of {RESP_BYTES} bytes, a static file)")
    if REQ_BYTES:
        parts.append(f"REQ_BYTES={REQ_BYTES} (POST bodies of {REQ_BYTES} bytes)")
    if UPSTREAM_TLS:
        parts.append("UPSTREAM_TLS=1 (the upstreams serve TLS 1.3 only; every proxy verifies "
                     "their certificate against the throwaway CA, keeps upstream connections alive "
                     "and resumes sessions; the callgrind runs use the same TLS upstreams)")
    if GRAPHQL:
        form = {"node": "`node(id:)`", "mutation": "a mutation's `input.id`",
                "json": "`order_id` (a `json:` route)"}[BODY_FORM]
        parts.append(f"GRAPHQL=1 BODY_FORM={BODY_FORM} (POST {GRAPHQL_PATH}, {form} in a JSON body; iuid-router routes "
                     f"by the id, nginx and HAProxy read no id and proxy to one fixed region, "
                     f"{FLOOR_REGION}: a floor; iuid-router's REST path driven beside it)")
    if RATE_LIMIT:
        parts.append("RATE_LIMIT=1 (the router checks one client_ip rate limit in memory, "
                     "every request admitted)")
    if TRACE_RATIO:
        parts.append(f"TRACE_RATIO={TRACE_RATIO} (the router traces at sample_ratio {TRACE_RATIO}, "
                     "spans exported over OTLP/HTTP to an nginx that takes them; the export "
                     "thread counted)")
    return "; ".join(parts) or "default (GET, plain HTTP/1.1 keep-alive, answers of 3 bytes)"


# iUID country -> region; country 99 is owned by no region (404 everywhere).
COUNTRIES = {1: "ap", 2: "us", 3: "eu", 4: "eu"}
CLK_TCK = os.sysconf("SC_CLK_TCK")

started = []


def start(cmd, **kw):
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    started.append(p)
    return p


def stop_all():
    for p in started:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in started:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()


def wait_tcp(port, timeout=10.0):
    """Waits until `port` accepts TCP connections (a TLS port answers HTTP with an alert)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on port {port}")


def wait_port(port, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            c.request("GET", "/")
            c.getresponse().read()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"nothing answers on port {port}")


def tree(pid):
    """pid and all its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    if int(fields[1]) == p:
                        todo.append(int(entry))
                except OSError:
                    pass
    return out


def cpu_seconds(pid):
    """(user, system) CPU seconds of pid and its descendants, all threads."""
    user = system = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            user += int(fields[11])  # utime
            system += int(fields[12])  # stime
        except OSError:
            pass
    return user / CLK_TCK, system / CLK_TCK


def worker_seconds(pid):
    """CPU seconds of each of iuid-router's worker threads (`iuid-worker-N`), in order; empty
    for another proxy. Their split shows how evenly the kernel spread connections."""
    seconds = {}
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            if re.fullmatch(r"iuid-worker-\d+", name):
                fields = stat.rsplit(")", 1)[1].split()
                seconds[name] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    except OSError:
        pass
    return [seconds[k] for k in sorted(seconds)]


def context_switches(pid):
    """(voluntary, involuntary) context switches of pid and its descendants, all threads: a
    proxy that sleeps more often per request wakes (and preempts) more often."""
    vol = invol = 0
    for p in tree(pid):
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/status") as f:
                    text = f.read()
                vol += int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", text, re.M).group(1))
                invol += int(re.search(r"^nonvoluntary_ctxt_switches:\s+(\d+)", text, re.M).group(1))
        except (OSError, AttributeError):
            pass
    return vol, invol


def peak_rss_mib(pid):
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def time_wait():
    """The TCP connections in TIME-WAIT (what `ss -tan state time-wait` lists, read from
    /proc/net/tcp) to an upstream port, closed first by the proxy side, and from one, closed
    first by the upstream: two sets of (local, peer) address pairs. Those new after a round
    are the upstream connections the round's proxy closed (or had closed)."""
    ports = {f"{port:04X}" for port in UPSTREAMS.values()}
    to_upstream, at_upstream = set(), set()
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            if fields[3] != "06":  # TCP_TIME_WAIT
                continue
            local, peer = fields[1], fields[2]
            if peer.rsplit(":", 1)[1] in ports:
                to_upstream.add((local, peer))
            elif local.rsplit(":", 1)[1] in ports:
                at_upstream.add((local, peer))
    return to_upstream, at_upstream


def upstream_accepts():
    """Connections the upstream nginx has accepted (stub_status), this one included."""
    conn = http.client.HTTPConnection("127.0.0.1", UPSTREAM_STATUS, timeout=5)
    conn.request("GET", "/")
    text = conn.getresponse().read().decode()
    conn.close()
    # "Active connections: 1\nserver accepts handled requests\n 12 12 40\n..."
    return int(text.splitlines()[2].split()[0])


def check_upstream_tls(work):
    """UPSTREAM_TLS: each upstream answers its region over TLS 1.3 with a certificate that
    verifies against the throwaway CA as localhost, and refuses TLS 1.2."""
    for region, port in UPSTREAMS.items():
        ctx = ssl.create_default_context(cafile=f"{work}/certs/ca.pem")
        conn = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5),
                               server_hostname="localhost")
        version = conn.version()
        status, headers, _, _ = exchange(conn, "GET", "/", b"", "Connection: close\r\n")
        conn.close()
        if (version, status, headers.get("x-region")) != ("TLSv1.3", 200, region):
            sys.exit(f"upstream {region} (port {port}): {version}, {status} {headers.get('x-region')}")
        old = ssl.create_default_context(cafile=f"{work}/certs/ca.pem")
        old.maximum_version = ssl.TLSVersion.TLSv1_2
        try:
            old.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5),
                            server_hostname="localhost").close()
            sys.exit(f"upstream {region} (port {port}) accepts TLS 1.2")
        except ssl.SSLError:
            pass
    print("   upstreams: TLS 1.3 only, certificate verified as localhost against the CA")


def mint(country, count):
    out = subprocess.run([BIN, "mint", "--country", str(country), "--service", "1",
                          "--count", str(count)], check=True, capture_output=True, text=True)
    return out.stdout.split()


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def upstream_location(work, region):
    """What an upstream answers: its region's name, or with RESP_BYTES a static file of that
    many bytes (too large for `return`); POST to a static file is 405 in nginx, so it is
    redirected (as GET) to the same file."""
    if not RESP_BYTES:
        return f'add_header X-Region {region} always; return 200 "{region}\\n";'
    # nginx's workers run as another user (nobody, when started as root): they must get in.
    os.chmod(work, 0o711)
    os.makedirs(f"{work}/resp", mode=0o755, exist_ok=True)
    write(f"{work}/resp/{region}", (region * RESP_BYTES)[:RESP_BYTES])
    return (f"add_header X-Region {region} always; root {work}/resp; "
            f"try_files /{region} =500; error_page 405 =200 /{region};")


def configs(work, ids_path):
    # Bodies (REQ_BYTES) are allowed and kept in memory at both nginx layers; answers
    # (RESP_BYTES) larger than nginx's proxy buffers stream to the client, not to a temp file.
    extra_http = (f"  client_max_body_size {max(REQ_BYTES, 1 << 20)};\n  client_body_buffer_size 1m;\n"
            if REQ_BYTES else "")
    if RESP_BYTES:
        extra_http += "  proxy_max_temp_file_size 0;\n"
    # UPSTREAM_TLS: TLS 1.3 only, the localhost leaf of the throwaway CA, one session cache
    # and tickets for the three servers, connections kept (the plain run's keep-alive too).
    ssl = " ssl" if UPSTREAM_TLS else ""
    upstream_tls = (f"  ssl_certificate {work}/certs/localhost.pem;\n"
                    f"  ssl_certificate_key {work}/certs/localhost-key.pem;\n"
                    "  ssl_protocols TLSv1.3;\n"
                    "  ssl_session_cache shared:up:10m;\n"
                    "  ssl_session_tickets on;\n"
                    "  keepalive_timeout 60s;\n" if UPSTREAM_TLS else "")
    upstream_servers = "\n".join(
        f"""  server {{ listen 127.0.0.1:{port}{ssl}; location / {{ {upstream_location(work, region)} }}"""
        """ location = /v1/traces { return 200 ""; } }"""
        for region, port in UPSTREAMS.items())
    write(f"{work}/upstreams.conf", f"""worker_processes 1;
daemon off;
pid {work}/upstreams.pid;
error_log {work}/upstreams.err;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 1000000;
{upstream_tls}{extra_http}{upstream_servers}
  server {{ listen 127.0.0.1:{UPSTREAM_STATUS}; location / {{ stub_status; }} }}
}}
""")
    # nginx routing by the id's country: hex chars 16-17 of the hyphenated id, after "8" + ver1.
    groups = "\n".join(
        f"  upstream {region} {{ server 127.0.0.1:{port}; keepalive 64; keepalive_requests 1000000; }}"
        for region, port in UPSTREAMS.items())
    cases = "\n".join(
        f'    "~^/v1/orders/[0-9a-fA-F-]{{14}}8[0-9a-fA-F]{country:02x}" {region};'
        for country, region in COUNTRIES.items())
    # UPSTREAM_TLS: verify against the throwaway CA under the name localhost (sent as SNI),
    # TLS 1.3 named (nginx before 1.23.4 leaves it out of proxy_ssl_protocols' default), and
    # the session kept for the next connection; the `keepalive 64` pools above hold the
    # connections themselves.
    up = "https" if UPSTREAM_TLS else "http"
    if UPSTREAM_TLS:
        extra_http += (f"  proxy_ssl_verify on;\n  proxy_ssl_trusted_certificate {work}/certs/ca.pem;\n"
                       "  proxy_ssl_name localhost;\n  proxy_ssl_server_name on;\n"
                       "  proxy_ssl_protocols TLSv1.3;\n  proxy_ssl_session_reuse on;\n")
    # GRAPHQL: nginx reads no id from a body; every GraphQL request goes to one region.
    graphql_location = (f"""
    location = {GRAPHQL_PATH} {{
      proxy_pass {up}://{FLOOR_REGION};
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}""" if GRAPHQL else "")
    write(f"{work}/nginx.conf", f"""worker_processes 2;
daemon off;
pid {work}/nginx.pid;
error_log {work}/nginx.err;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 1000000;
{extra_http}{groups}
  map $uri $region {{
    default "";
{cases}
  }}
  server {{
    listen 127.0.0.1:{PORTS["nginx"]};
    location /v1/orders/ {{
      if ($region = "") {{ return 404; }}
      proxy_pass {up}://$region;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}{graphql_location}
  }}
  server {{
    listen 127.0.0.1:{TLS_PORTS["nginx TLS"]} ssl;
    ssl_certificate {work}/certs/localhost.pem;
    ssl_certificate_key {work}/certs/localhost-key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    location /v1/orders/ {{
      if ($region = "") {{ return 404; }}
      proxy_pass {up}://$region;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}{graphql_location}
  }}
}}
""")
    write(f"{work}/countries.map", "".join(f"{c:02x} {r}\n" for c, r in COUNTRIES.items()))
    # UPSTREAM_TLS: verified against the CA, SNI and the verified name localhost; HAProxy
    # keeps a server's TLS session for its next connection by default (`ssl-reuse`).
    server_tls = (f" ssl verify required ca-file {work}/certs/ca.pem sni str(localhost) verifyhost localhost"
                  if UPSTREAM_TLS else "")
    backends = "\n".join(
        f"backend {region}\n  http-reuse always\n  server {region}1 127.0.0.1:{port}{server_tls}\n"
        for region, port in UPSTREAMS.items())
    # GRAPHQL: HAProxy reads no id from a body; every GraphQL request goes to one region.
    graphql_rule = (f"  http-request set-var(txn.region) str({FLOOR_REGION}) if {{ path {GRAPHQL_PATH} }}\n"
                    if GRAPHQL else "")
    # HAProxy wants the certificate and its key in one PEM.
    with open(f"{work}/certs/localhost.pem") as a, open(f"{work}/certs/localhost-key.pem") as b:
        write(f"{work}/certs/localhost-haproxy.pem", a.read() + b.read())
    tls_bind = (f"  bind 127.0.0.1:{TLS_PORTS['haproxy TLS']} ssl crt {work}/certs/localhost-haproxy.pem\n"
                if TLS else "")
    write(f"{work}/haproxy.cfg", f"""global
  nbthread 2
  maxconn 4096
defaults
  mode http
  timeout connect 1s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
frontend fe
  bind 127.0.0.1:{PORTS["haproxy"]}
{tls_bind}  http-request set-var(txn.region) path,regsub(^/v1/orders/[0-9a-fA-F-]{{14}}8[0-9a-fA-F],),regsub(-.*$,),lower,map({work}/countries.map)
{graphql_rule}  http-request return status 404 unless {{ var(txn.region) -m found }}
  # HAProxy's argument parser ends regsub at the first ')', so no capture group: strip the
  # prefix up to the country's hex pair, then everything from the next '-'.
  use_backend %[var(txn.region)]
{backends}""")
    region_tls = f", tls: {{ ca: {work}/certs/ca.pem, server_name: localhost }}" if UPSTREAM_TLS else ""
    table = "".join(f"  {region}: {{ upstreams: [\"{up}://127.0.0.1:{port}\"]{region_tls} }}\n"
                    for region, port in UPSTREAMS.items())
    countries = "".join(f"  {c}: {r}\n" for c, r in COUNTRIES.items())
    write(f"{work}/routing-table.yaml",
          f"version: bench\nregions:\n{table}countries:\n{countries}default_region: eu\n")
    graphql_route = ""
    if GRAPHQL:
        graphql_route = (f"  - {{ path: {GRAPHQL_PATH}, json: /order_id }}\n" if BODY_FORM == "json"
                         else f"  - graphql: {GRAPHQL_PATH}\n")
    write(f"{work}/router.yaml", f"""listen: 127.0.0.1:{PORTS["iuid-router"]}
admin_listen: 127.0.0.1:{ADMIN}
region: edge
routing_table: routing-table.yaml
routes:
  - path: /v1/orders/{{id}}
{graphql_route}reload: {{ watch: false }}
""" + ENGINE_LINE)
    # The same router with HTTPS on its listener (the certificate nginx TLS uses), and the
    # same router again for the binary compared against (IUID_ROUTER_BEFORE_BIN).
    base = (f"region: edge\nrouting_table: routing-table.yaml\nroutes:\n  - path: /v1/orders/{{id}}\n"
            f"{graphql_route}reload: {{ watch: false }}\n")
    tls = f"tls:\n  certificates:\n    - {{ cert: {work}/certs/localhost.pem, key: {work}/certs/localhost-key.pem }}\n"
    write(f"{work}/router-tls.yaml",
          f"listen: 127.0.0.1:{TLS_PORTS['iuid-router TLS']}\nadmin_listen: 127.0.0.1:{TLS_ADMIN}\n" + base + tls
          + ENGINE_LINE)
    write(f"{work}/router-before.yaml",
          f"listen: 127.0.0.1:{BEFORE_PORT}\nadmin_listen: 127.0.0.1:{BEFORE_ADMIN}\n" + base +
          (tls if TLS else "") + ENGINE_LINE)
    # iuid-router needs no limit raised for REQ_BYTES: a path route finds its id without
    # reading the body, and there is no body size limit; a body up to retries.buffer_bytes
    # (64 KiB) is kept for a retry, a larger one streams upstream and is not retried.
    write(f"{work}/ids.lua", wrk_script(ids_path, GRAPHQL))
    if GRAPHQL:
        write(f"{work}/ids-rest.lua", wrk_script(ids_path, False))


def wrk_script(ids_path, graphql):
    """wrk's Lua: one request per id of the file in turn, in this run's mode (the REST path,
    or with `graphql` a POST of a `node(id:)` query carrying the id)."""
    headers = {}
    if CONNCLOSE:
        headers["Connection"] = "close"
    if graphql:
        headers["Content-Type"] = "application/json"
        # id_body's JSON around the id, in a Lua '…' .. ids[i] .. '…' expression.
        before, after = id_body("@ID@").split("@ID@")
        lua = lambda s: "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"
        body = f"{lua(before)} .. ids[i] .. {lua(after)}"
        request_args = f'"POST", "{GRAPHQL_PATH}", headers, {body}'
    elif REQ_BYTES:
        request_args = '"POST", "/v1/orders/" .. ids[i], headers, body'
    elif CONNCLOSE:
        request_args = '"GET", "/v1/orders/" .. ids[i], headers'
    else:
        request_args = '"GET", "/v1/orders/" .. ids[i]'
    lua_headers = "{ " + ", ".join(f'["{k}"] = "{v}"' for k, v in headers.items()) + " }"
    prelude = f"local headers = {lua_headers}\n" if headers or REQ_BYTES else ""
    if REQ_BYTES and not graphql:
        prelude += f'local body = string.rep("x", {REQ_BYTES})\n'
    return prelude + f"""local ids = {{}}
for line in io.lines("{ids_path}") do ids[#ids + 1] = line end
local i = 0
request = function()
  i = i % #ids + 1
  return wrk.format({request_args})
end
"""


def client(port, scheme="http", certs=None, alpn=None):
    """A connection to a proxy (HTTPS: verified against the throwaway CA in `certs`)."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=5)
    if scheme == "https":
        ctx = ssl.create_default_context(cafile=f"{certs}/ca.pem")
        if alpn:
            ctx.set_alpn_protocols(alpn)
        conn = ctx.wrap_socket(conn, server_hostname="localhost")
    return conn


def read_answer(conn, buf=b""):
    """Reads one HTTP/1.1 answer: (status, lower-cased headers, body)."""
    def more():
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("closed in the middle of an answer")
        return chunk
    while b"\r\n\r\n" not in buf:
        buf += more()
    head, buf = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in lines[1:])}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            while b"\r\n" not in buf:
                buf += more()
            size, buf = buf.split(b"\r\n", 1)
            size = int(size.split(b";")[0], 16)
            while len(buf) < size + 2:
                buf += more()
            body, buf = body + buf[:size], buf[size + 2:]
            if size == 0:
                return status, headers, body  # (no trailers from these peers)
    if "content-length" in headers:
        n = int(headers["content-length"])
        while len(buf) < n:
            buf += more()
        return status, headers, buf[:n]
    while True:  # until the peer closes
        chunk = conn.recv(65536)
        if not chunk:
            return status, headers, buf
        buf += chunk


def exchange(conn, method, path, body=b"", extra_headers=""):
    """One request on `conn` and its answer: (status, headers, body, reusable). A peer may
    answer before it has read the body (HAProxy's `http-request return` does): sending then
    stops, the answer is read, and the connection is not reused."""
    head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra_headers}"
            + (f"Content-Length: {len(body)}\r\n" if body else "") + "\r\n")
    conn.sendall(head.encode())
    view, early = memoryview(body), b""
    poll = select.poll()
    poll.register(conn, select.POLLIN | select.POLLOUT)
    while view:
        events = dict(poll.poll(5000)).get(conn.fileno(), 0)
        if events & (select.POLLIN | select.POLLHUP | select.POLLERR):
            # A TLS connection is readable for records that carry no data (TLS 1.3 session
            # tickets): only data is an early answer.
            conn.setblocking(False)
            try:
                early = conn.recv(65536)
                if not early:
                    raise ConnectionError("closed before answering")
            except (ssl.SSLWantReadError, BlockingIOError):
                pass
            finally:
                conn.settimeout(5)
            if early:
                break
        view = view[conn.send(view[:16384]):]
    status, headers, data = read_answer(conn, early)
    reusable = not view and headers.get("connection", "").lower() != "close"
    return status, headers, data, reusable


def verify(name, port, samples, scheme="http", work=None, graphql=False, floor=None):
    """Every sample id reaches its region (the upstream's X-Region), with this run's mode:
    its method and body, `Connection: close`, the size of the answer, HTTPS. `graphql`: the
    id in a GraphQL POST (GRAPHQL=1); `floor`: a peer that reads no id and must send every
    request to that one region."""
    method, body = ("POST", b"x" * REQ_BYTES) if REQ_BYTES else ("GET", b"")
    extra = "Connection: close\r\n" if CONNCLOSE else ""
    if graphql:
        extra += "Content-Type: application/json\r\n"
    wrong, conn = [], None
    for uid, want in samples:
        path = f"/v1/orders/{uid}"
        if graphql:
            method, path = "POST", GRAPHQL_PATH
            body = id_body(uid).encode()
        want = floor or want
        reused = conn is not None
        conn = conn or client(port, scheme, f"{work}/certs")
        try:
            status, headers, data, reusable = exchange(conn, method, path, body, extra)
        except (ConnectionError, ssl.SSLError):
            if not reused:
                raise
            # A peer may close a kept-alive connection after an answer without saying so
            # (iuid-router after a 404 to a POST whose body it did not read): as an HTTP
            # client does, send again on a new connection.
            conn.close()
            conn = client(port, scheme, f"{work}/certs")
            status, headers, data, reusable = exchange(conn, method, path, body, extra)
        if not reusable:
            conn.close()
            conn = None
        got = headers.get("x-region") if status == 200 else str(status)
        if status == 200 and RESP_BYTES and len(data) != RESP_BYTES:
            got = f"{got} with {len(data)} bytes"
        if got != want:
            wrong.append((uid, want, got))
    if conn:
        conn.close()
    if wrong:
        sys.exit(f"{name} misroutes {len(wrong)} of {len(samples)} ids, e.g. {wrong[:3]}")
    how = (f" (GraphQL POSTs, every one to {floor}: no id read)" if floor else
           " (GraphQL POSTs)" if graphql else "")
    print(f"   {name}: all {len(samples)} sample ids routed correctly{how}")


def ms(text):
    m = re.match(r"([\d.]+)(us|ms|s)", text)
    value, unit = float(m.group(1)), m.group(2)
    return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value


def drive(port, work, args, scheme="http", lua="ids.lua"):
    out = subprocess.run(["wrk", "-t1", f"-c{args.connections}", f"-d{args.duration}s",
                          "--latency", "-s", f"{work}/{lua}", f"{scheme}://127.0.0.1:{port}"],
                         check=True, capture_output=True, text=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    # Anchored at the line start: wrk's "+/- Stdev" column also ends in a percentage, and
    # one ending in "99%" (as "81.99%") must not be read as the p99 line.
    p50 = ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))
    p90 = ms(re.search(r"^\s+90%\s+(\S+)", out, re.M).group(1))
    p99 = ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    # "Socket errors: connect 0, read 0, write 0, timeout 0", when there were any.
    sock = re.search(r"Socket errors: (.*)", out)
    return {"rps": rps, "total": total, "p50": p50, "p90": p90, "p99": p99,
            "non2xx": int(errors.group(1)) if errors else 0,
            "sockerr": sock.group(1).strip() if sock else None}


# Where iuid-router's instructions go, by the library (or libc part) a function belongs to;
# first match wins. Patterns are matched against callgrind's function names.
GROUPS = [
    ("hyper-util pool (checkout, return; SipHash of the pool key)",
     r"hyper_util::client::legacy::pool|sip::Hasher|hash_one|hashbrown"),
    ("hyper-util client (request dispatch)", r"hyper_util::client"),
    ("iuid-router upstream pool (checkout, connect race, checkin)", r"iuid_router::upstream::pool"),
    ("hyper-util server, I/O adapters", r"hyper_util"),
    ("httparse (request and response heads)", r"httparse"),
    ("hyper HTTP/1 (encode, decode, dispatch)", r"hyper::"),
    ("http, bytes (HeaderMap, Uri, Bytes)", r"\bhttp::|bytes::|<http::|<bytes::"),
    ("tokio (scheduler, I/O readiness, timers, channels)", r"tokio::|mio::|<tokio::"),
    ("iuid-router (extract, resolve, header rules, request id, metrics)",
     r"iuid_router|iuid::|<iuid|metrics"),
    ("malloc/free (jemalloc in iuid-router, libc's in the peers)",
     r"malloc\.c|_int_free|_int_malloc|realloc|malloc_consolidate|_rjem_|je_|jemalloc"),
    ("libc memcpy/memmove/memset/memcmp", r"memmove|memcpy|memset|memcmp|memchr"),
    ("tracing", r"tracing|nu_ansi|sharded_slab"),
    ("futures, core, alloc, std glue", r"futures|core::|alloc::|std::|<core|<alloc|<std"),
]


ON_STACK = re.compile(r"\b(main|__libc_start_main|__libc_start_call_main|lang_start|"
                      r"lang_start_internal|__rust_begin_short_backtrace|thread_start|"
                      r"start_thread|clone3?)\b|\(below|:0x[0-9a-f]+$")


def callgrind(name, cmd, port, work, env=None):
    """User-space instructions per request of one proxy under callgrind (wrk -c8, 10 s after a
    3 s warm-up), and the per-function self costs; instruction counts do not depend on what
    else the machine is doing, unlike the timed runs."""
    out = f"{work}/callgrind.{name}"
    p = start(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + cmd, env=env)
    wait_port(port, timeout=60)
    url = f"http://127.0.0.1:{port}"
    lua = f"{work}/ids.lua"
    subprocess.run(["wrk", "-t1", "-c8", "-d3s", "-s", lua, url], check=True, capture_output=True)
    subprocess.run(["callgrind_control", "-z", str(p.pid)], check=True, capture_output=True)
    text = subprocess.run(["wrk", "-t1", "-c8", "-d10s", "-s", lua, url], check=True,
                          capture_output=True, text=True).stdout
    subprocess.run(["callgrind_control", "-d", str(p.pid)], check=True, capture_output=True)
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=30)
    total_requests = int(re.search(r"(\d+) requests in", text).group(1))
    dump = f"{out}.1"
    # CG_KEEP=DIR keeps each proxy's dump there (for callgrind_annotate --auto=yes).
    if os.environ.get("CG_KEEP"):
        shutil.copy(dump, os.path.join(os.environ["CG_KEEP"], f"callgrind.{name}"))
    listing = subprocess.run(["callgrind_annotate", "--threshold=100", dump],
                             check=True, capture_output=True, text=True).stdout
    # Functions still on the stack at the dump (thread entry points, `main`) are listed with
    # their callees' cost; the program total is the real sum. A thread doing more than half
    # the work is caught by its cost; the others (the accept loop's thread, which with
    # CONNCLOSE=1 does a third of it) by the names of the frames that start threads.
    total = int(re.search(r"([\d,]+) \([ \d.]+%\)\s+PROGRAM TOTALS", listing)
                .group(1).replace(",", ""))
    costs, started = [], False
    for line in listing.splitlines():
        if "file:function" in line:
            started = True
            continue
        m = re.match(r"\s*([\d,]+) \([ \d.]+%\)\s+(\S+)(.*)", line)
        if not started or not m:
            continue
        fn, obj, cost = m.group(2), m.group(3), int(m.group(1).replace(",", ""))
        if cost > total // 2 or ON_STACK.search(fn):
            continue
        costs.append((cost, fn + (" libc" if "libc.so" in obj else "")))
    return total_requests, total, costs, allocations(dump)


# The allocator's entry points: each call is one allocation (Rust's `__rust_alloc` ends in
# jemalloc's prefixed `malloc` or `mallocx` in iuid-router, src/memory.rs; nginx's pools and
# HAProxy's pools call libc's `malloc` when they grow).
ALLOCATORS = {"malloc", "calloc", "realloc", "posix_memalign", "aligned_alloc", "memalign",
              "_rjem_malloc", "_rjem_mallocx", "_rjem_calloc", "_rjem_realloc", "_rjem_rallocx"}


def allocations(dump):
    """Calls into the allocator in a callgrind dump, read from its call records: a `cfn=`
    line naming the callee (`(id) name` the first time, `(id)` after), then `calls=N`."""
    names, callee, count = {}, None, 0
    with open(dump, errors="replace") as f:
        for line in f:
            if line.startswith(("fn=", "cfn=")):
                m = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line.rstrip("\n"))
                if not m:
                    continue
                if m.group(2):
                    names[m.group(1)] = m.group(2)
                callee = names.get(m.group(1)) if line.startswith("cfn=") else None
            elif line.startswith("calls=") and callee in ALLOCATORS:
                count += int(line.split()[0][len("calls="):])
                callee = None
    return count


def instructions(work):
    """Callgrind runs of nginx, HAProxy and iuid-router (one worker/thread each, ports of
    their own), as report lines."""
    with open(f"{work}/nginx.conf") as f:
        ng = f.read().replace("worker_processes 2;", "worker_processes 1;\nmaster_process off;")
    ng = ng.replace(f"listen 127.0.0.1:{PORTS['nginx']}", f"listen 127.0.0.1:{CG_PORT}")
    # The TLS server block must not collide with the running nginx's.
    ng = ng.replace(f"listen 127.0.0.1:{TLS_PORTS['nginx TLS']}", f"listen 127.0.0.1:{CG_PORT + 20}")
    write(f"{work}/nginx-cg.conf", ng)
    with open(f"{work}/haproxy.cfg") as f:
        ha = f.read().replace("nbthread 2", "nbthread 1")
    ha = ha.replace(f"bind 127.0.0.1:{TLS_PORTS['haproxy TLS']}", f"bind 127.0.0.1:{CG_PORT + 21}")
    write(f"{work}/haproxy-cg.cfg",
          ha.replace(f"bind 127.0.0.1:{PORTS['haproxy']}", f"bind 127.0.0.1:{CG_PORT + 1}"))
    with open(f"{work}/router.yaml") as f:
        ro = f.read().replace(f"listen: 127.0.0.1:{PORTS['iuid-router']}",
                              f"listen: 127.0.0.1:{CG_PORT + 2}")
    tracing = ""
    if TRACE_RATIO:
        scheme = "https" if UPSTREAM_TLS else "http"
        tracing = (f'tracing: {{ otlp: {{ endpoint: "{scheme}://127.0.0.1:{UPSTREAMS["eu"]}", '
                   f'protocol: http/protobuf }}, sample_ratio: {TRACE_RATIO} }}\n')
    write(f"{work}/router-cg.yaml", ro.replace(f"admin_listen: 127.0.0.1:{ADMIN}",
                                                f"admin_listen: 127.0.0.1:{CG_PORT + 3}")
          + "workers: 1\n" + tracing
          + ("rate_limits:\n  - { key: client_ip, rate: 1000000/s, burst: 1000000 }\n"
             if RATE_LIMIT else ""))
    env = {k: v for k, v in os.environ.items() if k != "RUST_LOG"}
    runs = {
        "nginx": callgrind("nginx", ["nginx", "-c", f"{work}/nginx-cg.conf", "-p", work],
                           CG_PORT, work),
        "haproxy": callgrind("haproxy", ["haproxy", "-f", f"{work}/haproxy-cg.cfg"],
                             CG_PORT + 1, work),
        "iuid-router": callgrind("iuid-router",
                                 [BIN, "serve", "--config", f"{work}/router-cg.yaml"],
                                 CG_PORT + 2, work, env),
    }
    per = {name: total / n for name, (n, total, _, _) in runs.items()}
    allocs = {name: a / n for name, (n, _, _, a) in runs.items()}
    lines = ["## User-space instructions per request (callgrind)", "",
             "Each proxy alone under `valgrind --tool=callgrind` (one worker or thread), wrk -c8 "
             "for 10 s after a 3 s warm-up; kernel work is not counted. Unlike the timed runs "
             "these counts repeat to within a percent whatever else the machine does. "
             f"Mode: {mode_text()}" + (" (callgrind runs are plain HTTP)" if TLS else "") + ".", "",
             "| proxy | instructions per request | vs nginx | allocations per request |",
             "|---|---|---|---|"]
    lines += [f"| {name} | {v:,.0f} | {v / per['nginx']:.2f}× | {allocs[name]:.1f} |"
              for name, v in per.items()]
    n, total, costs, _ = runs["iuid-router"]
    groups = {}
    for cost, fn in costs:
        for label, pattern in GROUPS:
            if re.search(pattern, fn):
                groups[label] = groups.get(label, 0) + cost
                break
    other = total - sum(groups.values())
    lines += ["", "iuid-router's instructions per request by where they are spent:", "",
              "| where | per request | share |", "|---|---|---|"]
    lines += [f"| {label} | {cost / n:,.0f} | {100 * cost / total:.1f} % |"
              for label, cost in sorted(groups.items(), key=lambda kv: -kv[1])]
    lines += [f"| other (libc, vDSO, unresolved) | {other / n:,.0f} | {100 * other / total:.1f} % |",
              ""]
    lines += ["iuid-router's 15 costliest functions (self cost per request):", "",
              "| function | per request |", "|---|---|"]
    lines += [f"| `{fn[:110]}` | {cost / n:,.0f} |" for cost, fn in sorted(costs, reverse=True)[:15]]
    return lines + [""]


def criterion():
    """Criterion medians (ns) of the two hot-path functions issue 6 sets targets for."""
    medians = {}
    for bench, name in [("route", "extract+resolve/path"), ("graphql", "graphql/2KiB/cache_hit")]:
        subprocess.run(["cargo", "bench", "--locked", "--bench", bench, "--", "--exact", name],
                       cwd=ROOT, check=True, capture_output=True)
        path = os.path.join(ROOT, "target", "criterion", name.replace("/", "_"), "new",
                            "estimates.json")
        with open(path) as f:
            medians[name] = json.load(f)["median"]["point_estimate"]
    return medians


def machine():
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    def version(cmd):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True)
            return (r.stdout + r.stderr).strip().splitlines()[0]
        except (OSError, IndexError):
            return "?"
    return [f"- CPU: {os.cpu_count()} × {model}",
            f"- Memory: {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') // 2**30} GiB",
            f"- Kernel: {platform.release()}",
            f"- {version(['nginx', '-v'])}; {version(['haproxy', '-v'])}; {version(['wrk', '-v'])}",
            f"- {version(['rustc', '-V'])}"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "RESULTS.md"))
    ap.add_argument("--no-criterion", action="store_true",
                    help="skip the criterion benchmarks of extract+resolve and GraphQL")
    ap.add_argument("--no-profile", action="store_true",
                    help="skip the callgrind instruction counts (about a minute)")
    ap.add_argument("--profile-only", action="store_true",
                    help="only the callgrind instruction counts (before/after a change)")
    ap.add_argument("--only", default="",
                    help="comma-separated target names to drive (e.g. 'haproxy,iuid-router'); "
                         "all by default")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="iuid-bench-")
    samples = []
    for country, region in COUNTRIES.items():
        samples += [(u, region) for u in mint(country, 240)]
    samples += [(u, "404") for u in mint(99, 40)]
    # Spread countries through the file, as real traffic would be.
    samples.sort(key=lambda s: s[0][-6:])
    ids_path = write(f"{work}/ids.txt", "".join(u + "\n" for u, _ in samples))
    # A throwaway CA and certificate for the TLS runs (the shipped script, openssl).
    subprocess.run(["bash", os.path.join(ROOT, "config", "make-certs.sh"), f"{work}/certs", "localhost"],
                   check=True, capture_output=True)
    configs(work, ids_path)

    try:
        print("== starting peers")
        # Its own process tree, apart from the routing nginx's: its CPU is read per round.
        upstream = start(["nginx", "-c", f"{work}/upstreams.conf", "-p", work])
        for port in UPSTREAMS.values():
            wait_tcp(port) if UPSTREAM_TLS else wait_port(port)
        if UPSTREAM_TLS:
            check_upstream_tls(work)
        procs = {
            "nginx": start(["nginx", "-c", f"{work}/nginx.conf", "-p", work]),
            "haproxy": start(["haproxy", "-f", f"{work}/haproxy.cfg"]),
            # The default log level (`info`), as an operator runs it.
            "iuid-router": start([BIN, "serve", "--config", f"{work}/router.yaml"],
                                 env={k: v for k, v in os.environ.items() if k != "RUST_LOG"}),
        }
        for port in PORTS.values():
            wait_port(port)
        print("== verifying routing")
        def floor(name):
            """GRAPHQL: nginx and HAProxy send every GraphQL request to one region."""
            return FLOOR_REGION if GRAPHQL and not name.startswith("iuid-router") else None
        for name in procs:
            verify(name, PORTS[name], samples, graphql=GRAPHQL, floor=floor(name))
        env = {k: v for k, v in os.environ.items() if k != "RUST_LOG"}
        # Extra targets: TLS termination, and the binary compared against. With TLS=1 the
        # TLS listeners of all three proxies are the measured targets, in place of the plain
        # ones; by default nginx's and iuid-router's are measured besides the plain ones.
        extra = []
        if not args.profile_only:
            tls_router = start([BIN, "serve", "--config", f"{work}/router-tls.yaml"], env=env)
            tls_targets = [("nginx TLS", TLS_PORTS["nginx TLS"], procs["nginx"], "https")]
            if TLS:
                tls_targets.append(("haproxy TLS", TLS_PORTS["haproxy TLS"], procs["haproxy"], "https"))
            tls_targets.append(("iuid-router TLS", TLS_PORTS["iuid-router TLS"], tls_router, "https"))
            for name, port, _, scheme in tls_targets:
                wait_tcp(port)
                verify(name, port, samples, scheme, work, GRAPHQL, floor(name))
            extra += tls_targets
            if BEFORE_BIN:
                before = start([BEFORE_BIN, "serve", "--config", f"{work}/router-before.yaml"], env=env)
                scheme = "https" if TLS else "http"
                wait_tcp(BEFORE_PORT) if TLS else wait_port(BEFORE_PORT)
                verify("iuid-router (before)", BEFORE_PORT, samples, scheme, work, GRAPHQL)
                extra.append(("iuid-router (before)", BEFORE_PORT, before, scheme))

        if args.profile_only:
            print("== counting instructions per request (callgrind)")
            text = "\n".join(instructions(work))
            write(args.out, text)
            print(text)
            return
        plain = [] if TLS else [(name, PORTS[name], procs[name], "http") for name in procs]
        targets = [("upstream direct", UPSTREAMS["eu"], None, "https" if UPSTREAM_TLS else "http")]
        targets += plain + extra
        # GRAPHQL: the measured iuid-router's REST path too, on the same listener and process,
        # right after it in every round (wrk's REST script).
        lua = {}
        if GRAPHQL:
            at = [t[0] for t in targets].index("iuid-router TLS" if TLS else "iuid-router")
            name, port, proc, scheme = targets[at]
            rest = f"{name} REST"
            verify(rest, port, samples, scheme, work)
            targets.insert(at + 1, (rest, port, proc, scheme))
            lua[rest] = "ids-rest.lua"
        if args.only:
            wanted = {n.strip() for n in args.only.split(",")}
            targets = [t for t in targets if t[0] in wanted]
        results = {name: [] for name, _, _, _ in targets}
        for r in range(1, args.rounds + 1):
            for name, port, proc, scheme in targets:
                before = cpu_seconds(proc.pid) if proc else (0.0, 0.0)
                workers_before = worker_seconds(proc.pid) if proc else []
                switches_before = context_switches(proc.pid) if proc else (0, 0)
                upstream_before, tw_before = sum(cpu_seconds(upstream.pid)), time_wait()
                accepts_before = upstream_accepts()
                run = drive(port, work, args, scheme, lua.get(name, "ids.lua"))
                after = cpu_seconds(proc.pid) if proc else (0.0, 0.0)
                # The upstream nginx's CPU (for "upstream direct", the measured peer itself),
                # the connections it accepted in this round (less the status request's own),
                # and the upstream connections that entered TIME-WAIT in it.
                run["up100k"] = (sum(cpu_seconds(upstream.pid)) - upstream_before) / run["total"] * 1e5
                run["up_conns"] = upstream_accepts() - accepts_before - 1
                tw_after = time_wait()
                run["tw_to"], run["tw_at"] = (len(a - b) for a, b in zip(tw_after, tw_before))
                switches = [a - b for a, b in zip(context_switches(proc.pid) if proc else (0, 0),
                                                  switches_before)]
                workers = [a - b for a, b in zip(worker_seconds(proc.pid) if proc else [], workers_before)]
                # The busiest worker's CPU over the mean: 1.00 is an even split.
                run["split"] = max(workers) / (sum(workers) / len(workers)) if sum(workers) > 0 else None
                per100k = [(a - b) / run["total"] * 1e5 for a, b in zip(after, before)]
                run["user100k"], run["sys100k"] = per100k if proc else (None, None)
                run["cpu100k"] = sum(per100k) if proc else None
                # nginx TLS shares the nginx process (HAProxy TLS HAProxy's): its peak RSS
                # is nginx's.
                run["rss"] = peak_rss_mib(proc.pid) if proc else None
                results[name].append(run)
                cpu = f"{run['cpu100k']:.2f} CPU-s/100k" if proc else ""
                errs = f"  socket errors: {run['sockerr']}" if run["sockerr"] else ""
                errs += f"  busiest worker {run['split']:.2f}x the mean" if run["split"] else ""
                if proc:
                    errs += (f"  switches/req {switches[0] / run['total']:.2f} voluntary"
                             f" {switches[1] / run['total']:.2f} involuntary")
                errs += (f"  upstream {run['up100k']:.2f} CPU-s/100k, {run['up_conns']} connections"
                         f" opened, TIME-WAIT +{run['tw_to']} to / +{run['tw_at']} at upstreams")
                print(f"   round {r} {name:15} {run['rps']:>9.0f} req/s  p50 {run['p50']:.2f} ms"
                      f"  p90 {run['p90']:.2f}  p99 {run['p99']:.2f} ms  {cpu}{errs}")
        if args.only:
            # A partial run (diagnosis): the rounds above are its output; the report
            # compares against every peer.
            return
        medians = {}
        if not args.no_criterion:
            print("== criterion: extract+resolve, GraphQL 2 KiB on a plan-cache hit")
            medians = criterion()
        profile = []
        if not args.no_profile:
            print("== counting instructions per request (callgrind)")
            profile = instructions(work)
        report(results, args, medians, profile)
    finally:
        stop_all()
        shutil.rmtree(work, ignore_errors=True)


def report(results, args, medians, profile):
    def med(name, key):
        vals = [r[key] for r in results[name] if r[key] is not None]
        return statistics.median(vals) if vals else None

    def span(name, key, fmt):
        vals = [r[key] for r in results[name] if r[key] is not None]
        if not vals:
            return "—"
        return f"{fmt.format(statistics.median(vals))} ({fmt.format(min(vals))}–{fmt.format(max(vals))})"

    # The measured proxies: their TLS listeners with TLS=1.
    n, h, i = ("nginx TLS", "haproxy TLS", "iuid-router TLS") if TLS else ("nginx", "haproxy", "iuid-router")
    lines = ["# Side-by-side benchmark", "",
             f"`bash bench/run.sh` on {time.strftime('%Y-%m-%d')}, mode {mode_text()}: "
             f"wrk -t1 -c{args.connections}, "
             f"{args.duration} s per run, {args.rounds} rounds interleaved, 1000 ids over 4 countries "
             "(4 % of an unknown country, answered 404 by every peer), nginx (1 worker) as the "
             "three regional upstreams; the proxies get both cores (nginx 2 workers, HAProxy 2 threads, "
             "iuid-router its default of one worker per core). Median (min–max) over rounds.", "",
             "## Machine", ""] + machine() + ["",
             "## Results", "",
             "| target | req/s | p50 ms | p99 ms | proxy CPU-s per 100k | of which user / kernel | peak RSS MiB | req/s vs nginx | CPU vs nginx |",
             "|---|---|---|---|---|---|---|---|---|"]
    n_rps, n_cpu = med(n, "rps"), med(n, "cpu100k")
    for name in results:
        rps, cpu = med(name, "rps"), med(name, "cpu100k")
        rss = max((r["rss"] for r in results[name] if r["rss"] is not None), default=None)
        lines.append("| " + " | ".join([
            name, span(name, "rps", "{:.0f}"), span(name, "p50", "{:.2f}"),
            span(name, "p99", "{:.2f}"), span(name, "cpu100k", "{:.2f}"),
            (f"{med(name, 'user100k'):.2f} / {med(name, 'sys100k'):.2f}"
             if med(name, "user100k") is not None else "—"),
            f"{rss:.1f}" if rss is not None else "—",
            f"{rps / n_rps:.2f}×", f"{cpu / n_cpu:.2f}×" if cpu is not None else "—"]) + " |")
    tls_lines = []
    if not TLS and "iuid-router TLS" in results and med("nginx TLS", "cpu100k"):
        tls_lines.append(f"- TLS termination: iuid-router {med('iuid-router TLS', 'rps'):.0f} req/s at "
                         f"{med('iuid-router TLS', 'cpu100k'):.2f} CPU-s/100k; nginx {med('nginx TLS', 'rps'):.0f} "
                         f"req/s at {med('nginx TLS', 'cpu100k'):.2f} CPU-s/100k "
                         f"({med('iuid-router TLS', 'cpu100k') / med('nginx TLS', 'cpu100k'):.2f}× nginx's CPU).")
    if "iuid-router (before)" in results:
        b, a = med("iuid-router (before)", "cpu100k"), med(i, "cpu100k")
        tls_lines.append(f"- The {'TLS' if TLS else 'plain HTTP/1.1'} path, this binary against IUID_ROUTER_BEFORE_BIN in the same "
                         f"rounds: {a:.2f} against {b:.2f} CPU-s/100k ({(a / b - 1) * 100:+.1f} %); "
                         f"p99 {med(i, 'p99'):.2f} against {med('iuid-router (before)', 'p99'):.2f} ms "
                         f"(HAProxy {med(h, 'p99'):.2f} ms).")
    checks = [
        ("CPU-s per 100k ≤ 0.75× nginx", med(i, "cpu100k") <= 0.75 * n_cpu),
        ("req/s ≥ 1.1× nginx", med(i, "rps") >= 1.1 * n_rps),
        ("p99 ≤ HAProxy's", med(i, "p99") <= med(h, "p99")),
        ("peak RSS ≤ 16 MiB", max(r["rss"] for r in results[i]) <= 16.0),
    ]
    rest, gql = medians.get("extract+resolve/path"), medians.get("graphql/2KiB/cache_hit")
    if rest is not None:
        checks.append((f"REST extract + resolve ≤ 50 ns (criterion median: {rest:.1f} ns)",
                       rest <= 50.0))
    if gql is not None:
        checks.append((f"GraphQL extraction of a 2 KiB query on a plan-cache hit ≤ 5 µs "
                       f"(criterion median: {gql / 1000:.2f} µs)", gql <= 5000.0))
    # The upstream side: the upstream nginx's CPU while each target is driven, the
    # connections it accepted, and the upstream connections each round left in TIME-WAIT.
    lines += ["", "## The upstream side", "",
              "The upstream nginx's CPU while each target is driven (for `upstream direct` it is "
              "the measured peer), the connections it accepted in a round (its stub_status), and "
              "the TCP connections to or from the upstream ports that entered TIME-WAIT during a "
              "round: closed first by the proxy (to) or by the upstream (at). A proxy that keeps "
              "its upstream connections opens few (its pools filling) and leaves few; one that "
              "churns them opens thousands (a connection reset rather than closed leaves no "
              "TIME-WAIT, but was opened).", "",
              "| target | upstream CPU-s per 100k | upstream connections opened per round | "
              "TIME-WAIT per round, to / at the upstreams |",
              "|---|---|---|---|"]
    for name in results:
        opened = "; ".join(str(r["up_conns"]) for r in results[name])
        tw = "; ".join(f"{r['tw_to']} / {r['tw_at']}" for r in results[name])
        lines.append(f"| {name} | {span(name, 'up100k', '{:.2f}')} | {opened} | {tw} |")
    if GRAPHQL:
        r_name = "iuid-router TLS" if TLS else "iuid-router"
        g, rest = r_name, f"{r_name} REST"
        lines += ["", "## GraphQL (GRAPHQL=1)", "",
                  f"- nginx and HAProxy read no id from a GraphQL body: they proxy every `POST "
                  f"{GRAPHQL_PATH}` to one fixed region ({FLOOR_REGION}), a floor that does less "
                  "than routing by the id; iuid-router parses the query for `node(id:)` and routes it."]
        if g in results and rest in results:
            lines.append(
                f"- iuid-router, GraphQL against its own REST path in the same rounds: "
                f"{med(g, 'rps'):.0f} against {med(rest, 'rps'):.0f} req/s, "
                f"{med(g, 'cpu100k'):.2f} against {med(rest, 'cpu100k'):.2f} CPU-s/100k, "
                f"p99 {med(g, 'p99'):.2f} against {med(rest, 'p99'):.2f} ms.")
    lines += ["", "## Targets (issue 6)", ""] + \
             ([] if mode_text().startswith("default") else
              ["The targets are set for the default mode; in this mode they are for reference.", ""]) + \
             [f"- {'PASS' if ok else 'FAIL'}: {what}" for what, ok in checks]
    if tls_lines:
        lines += ["", "## TLS termination and the upstream layer (issue 16)", ""] + tls_lines
    non2xx = {name: sum(r["non2xx"] for r in results[name]) for name in results}
    lines += ["", f"Non-2xx answers (the 404s of unknown ids): {non2xx}", ""]
    sockerr = {name: [r["sockerr"] for r in results[name] if r["sockerr"]] for name in results}
    if any(sockerr.values()):
        lines += [f"wrk's socket errors: { {k: v for k, v in sockerr.items() if v} }", ""]
    lines += profile
    # Profiles and what was tried are kept by hand in bench/NOTES.md and carried along.
    notes = os.path.join(ROOT, "bench", "NOTES.md")
    if os.path.exists(notes):
        with open(notes) as f:
            lines += ["", f.read()]
    # bench/idle.py appends its section to the report; a new report keeps the last one.
    if os.path.exists(args.out):
        with open(args.out) as f:
            m = re.search(r"^## Idle connections and waiting requests\b.*?(?=^## |\Z)", f.read(),
                          re.M | re.S)
        if m:
            lines += ["", m.group(0).rstrip("\n"), ""]
    text = "\n".join(lines)
    with open(args.out + ".new", "w") as f:
        f.write(text)
    os.replace(args.out + ".new", args.out)
    print(text)


if __name__ == "__main__":
    try:
        main()
    finally:
        stop_all()
