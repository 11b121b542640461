#!/usr/bin/env python3
"""The router under faults while a steady load runs (issue 40): bench/chaos.sh's orchestrator.

    python3 bench/chaos.py --work DIR --bin target/release/iuid-router \\
        --loadgen bench/loadgen/target/release/loadgen        # normally through bench/chaos.sh

Prints a Markdown paragraph (how it ran) and table (one row per phase, or per id's region for
the mesh phases) on stdout; progress on stderr. Standard library only. Needs root for the
network namespace of phase 7 (without it, or without `ip`/`nft`, phase 7 is skipped, with
the reason in its row).

Processes (loopback ports 18200-18260, one fixed block):
  R   the router under test for phases 1-3, 5 and 8: region eu, eu = two echo upstreams
      E1 (18202) and E2 (18203), plain HTTP on 18200, admin 18201, `upgrade_socket`.
  T   the same with `tls:` on 18205 (admin 18206), for phase 4's certificate rotation.
  a three-edge mesh as bench/mesh.sh (mTLS + HTTP/2 between edges): the eu edge (18210,
      admin 18211, plain HTTP for the load) routes us ids to the us edge and ap ids to the ap
      edge, each with one echo upstream. The us edge and its upstream live in a network
      namespace (`chaos40-us`, veth 10.200.0.1 <-> 10.200.0.2); the eu edge reaches it through
      `loadgen delay` inside that namespace (10.200.0.2:18216), so the link can be delayed,
      and nftables rules in the namespace drop 20 % of packets or all of them.
Load: `loadgen steady` (bench/loadgen): keep-alive HTTP/1.1 GETs of /v1/orders/{id}, paced,
every request judged (ok, status, refused, reset, closed, timeout = no whole answer within
the client's timeout).

Phases (each its own load run; times are seconds from the load's start):
  1 kill -9 of E1, restart 8 s later          5 `iuid-router upgrade` of R
  2 table reload every 200 ms, two versions   6 kill -9 of the ap edge, restart 10 s later
  3 an invalid table, then the good one        7 eu<->us link: +100 ms each way, 20 % loss,
  4 certificate rotation (T, TLS load)           partition (each 12 s, then a recovery window)
                                               8 several faults at once on R and the mesh
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone

# Ports.
R, R_ADMIN, E1, E2, R_US = 18200, 18201, 18202, 18203, 18204
T, T_ADMIN = 18205, 18206
EDGE = {"eu": 18210, "us": 18213, "ap": 18217}
EDGE_ADMIN = {"eu": 18211, "us": 18214, "ap": 18218}
EDGE_ECHO = {"eu": 18212, "us": 18215, "ap": 18219}
DELAY_PORT = 18216
NS, VETH_ROOT, VETH_NS = "chaos40-us", "chaos40-v0", "chaos40-v1"
IP_ROOT, IP_NS = "10.200.0.1", "10.200.0.2"

# The routers' upstream timeouts, and the client's: longer than any answer the router may
# give (a connect per attempt, 3 attempts, then the headers' wait), so a "no answer" is the
# router's fault, not the client's impatience.
CONNECT_MS, HEADERS_MS = 1000, 2000
CLIENT_TIMEOUT_MS = 6000
BOUND_MS = 3 * CONNECT_MS + HEADERS_MS  # the longest an answer may take by the config

# Load per target: (connections, requests/s).
LOAD_R = (8, 300)
LOAD_T = (8, 200)
LOAD_MESH = (9, 150)

started = time.time()


def log(*a):
    print(f"[chaos {time.time() - started:6.1f}s]", *a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Processes


class Procs:
    """Every process started, by name; each pid also goes to WORK/pids for chaos.sh's trap."""

    def __init__(self, work):
        self.work = work
        self.p = {}
        self.extra_pids = set()  # upgraded routers: not our children

    def note(self, pid):
        with open(os.path.join(self.work, "pids"), "a") as f:
            f.write(f"{pid}\n")

    def start(self, name, argv, ns=None):
        logf = open(os.path.join(self.work, f"{name}.log"), "ab")
        if ns:
            argv = ["ip", "netns", "exec", ns] + argv  # execs argv: same pid
        proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.p[name] = proc
        self.note(proc.pid)
        return proc

    def kill9(self, name):
        proc = self.p[name]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

    def stop_all(self):
        for pid in list(self.extra_pids):
            stop_pid(pid)
        for proc in self.p.values():
            if proc.poll() is None:
                proc.terminate()
        deadline = time.time() + 5
        for proc in self.p.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def alive(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" not in f.read()
    except OSError:
        return False


def stop_pid(pid):
    """SIGTERM, then SIGKILL after 5 s, a process that is not our child."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 2)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        end = time.time() + wait
        while time.time() < end and alive(pid):
            time.sleep(0.05)
        if not alive(pid):
            return


def mem(pid):
    """(RSS in MiB, open fds) of a process, or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024
        return rss, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, AttributeError):
        return None


TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1",
              "05": "FIN_WAIT2", "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT",
              "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}
PORT_NAMES = {R: "R", T: "T", E1: "E1", E2: "E2", R_US: "R's us", DELAY_PORT: "us edge (via delay)",
              **{p: f"{r} edge" for r, p in EDGE.items()}, **{p: f"{r} admin" for r, p in EDGE_ADMIN.items()},
              **{p: f"{r} echo" for r, p in EDGE_ECHO.items()}, R_ADMIN: "R admin", T_ADMIN: "T admin"}


def fd_kinds(pid):
    """A process's descriptors by kind: TCP sockets by port and state (from /proc/net/tcp of
    this namespace), other sockets, epoll and the like. {} when it is gone."""
    tcp = {}
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(f).readlines()[1:]
        except OSError:
            continue
        for line in lines:
            x = line.split()
            lp, rp = int(x[1].rsplit(":", 1)[1], 16), int(x[2].rsplit(":", 1)[1], 16)
            tcp[x[9]] = (lp, rp, TCP_STATES.get(x[3], x[3]))
    kinds = {}
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return kinds
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        m = re.match(r"socket:\[(\d+)\]", link)
        if m and m.group(1) in tcp:
            lp, rp, st = tcp[m.group(1)]
            if st == "LISTEN":
                k = f"listen :{lp}"
            elif lp in PORT_NAMES:
                k = f"tcp from client to {PORT_NAMES[lp]} {st}"
            else:
                k = f"tcp to {PORT_NAMES.get(rp, rp)} {st}"
        elif m:
            k = "socket (unix/udp)"
        else:
            k = re.sub(r"\d+", "N", link) if link.startswith(("anon_inode", "pipe")) else "file"
        kinds[k] = kinds.get(k, 0) + 1
    return kinds


def fd_diff(before, after):
    """What changed between two fd_kinds: "+2 tcp to ap edge ESTABLISHED, -1 …"."""
    keys = sorted(set(before) | set(after))
    d = [(after.get(k, 0) - before.get(k, 0), k) for k in keys]
    return ", ".join(f"{n:+d} {k}" for n, k in d if n)


def http(method, url, body=None, timeout=3):
    """(status, text) of a request to an admin API; (None, error) when it fails."""
    req = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return None, str(e)


def wait_ready(admin_port, ns=None, what="router"):
    for _ in range(150):
        if ns:
            ok = subprocess.run(["ip", "netns", "exec", ns, "curl", "-sf", "-o", "/dev/null",
                                 f"http://127.0.0.1:{admin_port}/readyz"]).returncode == 0
        else:
            ok = http("GET", f"http://127.0.0.1:{admin_port}/readyz", timeout=1)[0] == 200
        if ok:
            return
        time.sleep(0.1)
    raise SystemExit(f"{what} on admin port {admin_port} never got ready")


def wait_port(port, host="127.0.0.1", ns=None):
    for _ in range(100):
        if ns:
            ok = subprocess.run(["ip", "netns", "exec", ns, "bash", "-c",
                                 f"exec 3<>/dev/tcp/{host}/{port}"],
                                stderr=subprocess.DEVNULL).returncode == 0
        else:
            ok = subprocess.run(["bash", "-c", f"exec 3<>/dev/tcp/{host}/{port}"],
                                stderr=subprocess.DEVNULL).returncode == 0
        if ok:
            return
        time.sleep(0.1)
    raise SystemExit(f"nothing listens on {host}:{port}")


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# The network namespace (phase 7)


def sh(*argv, check=True):
    r = subprocess.run(argv, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip() or r.returncode}")
    return r


def netns_up():
    """Makes the namespace and the veth pair; returns None, or why it could not."""
    for tool in ("ip", "nft"):
        if not shutil.which(tool):
            return f"`{tool}` not found"
    if os.geteuid() != 0:
        return "not root"
    netns_down()
    try:
        sh("ip", "netns", "add", NS)
        sh("ip", "link", "add", VETH_ROOT, "type", "veth", "peer", "name", VETH_NS)
        sh("ip", "link", "set", VETH_NS, "netns", NS)
        sh("ip", "addr", "add", f"{IP_ROOT}/30", "dev", VETH_ROOT)
        sh("ip", "link", "set", VETH_ROOT, "up")
        nsx = ["ip", "netns", "exec", NS]
        sh(*nsx, "ip", "addr", "add", f"{IP_NS}/30", "dev", VETH_NS)
        sh(*nsx, "ip", "link", "set", VETH_NS, "up")
        sh(*nsx, "ip", "link", "set", "lo", "up")
        sh(*nsx, "nft", "add", "table", "inet", "chaos")
        sh(*nsx, "nft", "add", "chain", "inet", "chaos", "in",
           "{ type filter hook input priority 0; policy accept; }")
        sh(*nsx, "nft", "add", "chain", "inet", "chaos", "out",
           "{ type filter hook output priority 0; policy accept; }")
        sh("ping", "-c", "1", "-W", "1", IP_NS) if shutil.which("ping") else None
    except (RuntimeError, OSError) as e:
        netns_down()
        return f"network namespace: {e}"
    return None


def netns_down():
    sh("ip", "netns", "del", NS, check=False)  # takes the veth pair and the nft rules with it
    sh("ip", "link", "del", VETH_ROOT, check=False)


def link_rule(rule):
    """`loss` (20 % each way), `partition` (everything dropped) or None (clear) on the us link."""
    nsx = ["ip", "netns", "exec", NS, "nft"]
    sh(*nsx, "flush", "chain", "inet", "chaos", "in")
    sh(*nsx, "flush", "chain", "inet", "chaos", "out")
    if rule is None:
        return
    match = ["numgen", "random", "mod", "100", "<", "20"] if rule == "loss" else []
    sh(*nsx, "add", "rule", "inet", "chaos", "in", "iifname", VETH_NS, *match, "drop")
    sh(*nsx, "add", "rule", "inet", "chaos", "out", "oifname", VETH_NS, *match, "drop")


# ---------------------------------------------------------------------------------------------
# Configs


def table_r(version, order, extra_country=False):
    ups = ", ".join(f'"http://127.0.0.1:{p}"' for p in order)
    countries = "{ 1: eu, 2: us, 3: us }" if extra_country else "{ 1: eu, 2: us }"
    return (f"version: {version}\nregions:\n  eu: {{ upstreams: [{ups}] }}\n"
            f"  us: {{ upstreams: [\"http://127.0.0.1:{R_US}\"] }}\n"
            f"countries: {countries}\ndefault_region: eu\n")


TABLE_A = table_r("chaos-a", [E1, E2])
TABLE_B = table_r("chaos-b", [E2, E1], extra_country=True)
# Invalid: a country owned by a region that does not exist.
TABLE_BAD = table_r("chaos-bad", [E1, E2]).replace("2: us", "2: nowhere")


# The mesh edges check each other actively: a passing check ends an ejection
# (docs/data-path.md), so a partitioned region is back within a check interval of the
# link's return rather than when its doubled ejection runs out.
MESH_CHECKS = "health_check: { path: /healthz, interval_ms: 1000, timeout_ms: 500 }\n"


def router_yaml(listen, admin, region, extra=""):
    return f"""listen: 127.0.0.1:{listen}
admin_listen: 127.0.0.1:{admin}
region: {region}
routing_table: routing-table.yaml
routes: [ {{ path: "/v1/orders/{{id}}" }} ]
timeouts: {{ connect_ms: {CONNECT_MS}, response_headers_ms: {HEADERS_MS} }}
access_log: false
{extra}"""


def mesh_table(r, us_url):
    """Edge r's table: its own region on its echo upstream, the others on their edges."""
    url = {"eu": f"https://127.0.0.1:{EDGE['eu']}", "us": us_url,
           "ap": f"https://127.0.0.1:{EDGE['ap']}"}
    lines = ["version: chaos-mesh", "regions:"]
    for o in ("eu", "us", "ap"):
        if o == r:
            lines.append(f'  {o}: {{ upstreams: ["http://127.0.0.1:{EDGE_ECHO[o]}"] }}')
        else:
            lines.append(f'  {o}: {{ upstreams: ["{url[o]}"], protocol: h2, tls: {{ ca: ../certs/ca.pem, '
                         f'client_cert: ../certs/{r}-peer.pem, client_key: ../certs/{r}-peer-key.pem, '
                         f'server_name: {o} }} }}')
    lines += ["countries: { 1: eu, 2: us, 3: ap }", f"default_region: {r}", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The bench


class Bench:
    def __init__(self, a):
        self.a = a
        self.work = a.work
        self.bin = os.path.abspath(a.bin)
        self.loadgen = os.path.abspath(a.loadgen)
        self.procs = Procs(self.work)
        self.rows = []
        self.r_pid = None  # R's serving pid (changes with each upgrade)
        self.r_cfg = os.path.join(self.work, "r", "router.yaml")
        self.netns_skip = None
        self.notes = []

    # -- setup ---------------------------------------------------------------------------------

    def setup(self):
        w = self.work
        certs = os.path.join(w, "certs")
        subprocess.run(["bash", "config/make-certs.sh", certs, "chaos-edge", "us", "ap"],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["bash", "config/make-certs.sh", "--client", certs, "eu-peer", "us-peer", "ap-peer"],
                       check=True, stdout=subprocess.DEVNULL)
        # The echo upstreams of R and T.
        for name, port in (("E1", E1), ("E2", E2)):
            self.procs.start(name, [self.bin, "echo", "--region", "eu", "--listen", f"127.0.0.1:{port}"])
        # R: plain HTTP, reloads only by POST /admin/reload, upgradable.
        os.makedirs(os.path.join(w, "r"))
        write_atomic(os.path.join(w, "r", "routing-table.yaml"), TABLE_A)
        with open(self.r_cfg, "w") as f:
            f.write(router_yaml(R, R_ADMIN, "eu", "reload: { watch: false }\nupgrade_socket: up.sock\n"
                                "shutdown: { drain_timeout_ms: 10000 }\n"))
        self.r_pid = self.procs.start("R", [self.bin, "serve", "--config", self.r_cfg]).pid
        # T: the same behind TLS; the certificate files are watched.
        os.makedirs(os.path.join(w, "t"))
        write_atomic(os.path.join(w, "t", "routing-table.yaml"), TABLE_A)
        with open(os.path.join(w, "t", "router.yaml"), "w") as f:
            f.write(router_yaml(T, T_ADMIN, "eu", "tls: { certificates: [ { cert: ../certs/chaos-edge.pem, "
                                "key: ../certs/chaos-edge-key.pem } ] }\n"))
        self.procs.start("T", [self.bin, "serve", "--config", os.path.join(w, "t", "router.yaml")])
        # The mesh; the us edge in its namespace when one can be made.
        self.netns_skip = netns_up()
        if self.netns_skip:
            log(f"phase 7 will be skipped: {self.netns_skip}")
            us_url = f"https://127.0.0.1:{EDGE['us']}"
        else:
            us_url = f"https://{IP_NS}:{DELAY_PORT}"
        for r in ("eu", "us", "ap"):
            self.start_edge(r, us_url, first=True)
        wait_ready(R_ADMIN, what="R")
        wait_ready(T_ADMIN, what="T")
        for r in ("eu", "us", "ap"):
            wait_ready(EDGE_ADMIN[r], ns=self.edge_ns(r), what=f"{r} edge")
        if not self.netns_skip:
            self.procs.start("delay", [self.loadgen, "delay", "--listen-host", IP_NS, "--port", str(DELAY_PORT),
                                       "--to", f"127.0.0.1:{EDGE['us']}", "--delay-ms", "100"], ns=NS)
            wait_port(DELAY_PORT, host=IP_NS, ns=NS)
        self.ids = {r: subprocess.run([self.bin, "mint", "--country", str(c)], check=True,
                                      capture_output=True, text=True).stdout.split()[0]
                    for r, c in (("eu", 1), ("us", 2), ("ap", 3))}
        self.path = {r: f"/v1/orders/{i}" for r, i in self.ids.items()}

    def edge_ns(self, r):
        return NS if (r == "us" and not self.netns_skip) else None

    def start_edge(self, r, us_url=None, first=False):
        d = os.path.join(self.work, r)
        ns = self.edge_ns(r)
        if first:
            os.makedirs(d)
            write_atomic(os.path.join(d, "routing-table.yaml"), mesh_table(r, us_url))
            # The eu edge takes the load: plain HTTP. us and ap take only edges: mTLS required.
            tls = "" if r == "eu" else (f"tls:\n  certificates: [ {{ cert: ../certs/{r}.pem, key: ../certs/{r}-key.pem }} ]\n"
                                        "  client_auth: { ca: ../certs/ca.pem, required: true }\n")
            with open(os.path.join(d, "router.yaml"), "w") as f:
                f.write(router_yaml(EDGE[r], EDGE_ADMIN[r], r, tls + "reload: { watch: false }\n" + MESH_CHECKS))
            self.procs.start(f"echo-{r}", [self.bin, "echo", "--region", r, "--listen",
                                           f"127.0.0.1:{EDGE_ECHO[r]}"], ns=ns)
        self.procs.start(f"edge-{r}", [self.bin, "serve", "--config", os.path.join(d, "router.yaml")], ns=ns)

    def edge_pid(self):
        return self.procs.p["edge-eu"].pid

    def t_pid(self):
        return self.procs.p["T"].pid

    # -- faults ----------------------------------------------------------------------------------

    def kill9(self, name):
        self.procs.kill9(name)

    def restart_echo(self, name, port):
        self.procs.start(name, [self.bin, "echo", "--region", "eu", "--listen", f"127.0.0.1:{port}"])

    def reload_r(self, text, expect):
        write_atomic(os.path.join(self.work, "r", "routing-table.yaml"), text)
        status, body = http("POST", f"http://127.0.0.1:{R_ADMIN}/admin/reload", body=b"")
        self.reload_answers[str(status)] = self.reload_answers.get(str(status), 0) + 1
        if status != expect:
            self.reload_unexpected.append(f"{status} {body[:200]}")
        return status, body

    def r_version(self):
        status, body = http("GET", f"http://127.0.0.1:{R_ADMIN}/admin/routing-table")
        return json.loads(body).get("version") if status == 200 else f"({status})"

    def upgrade_r(self):
        """`iuid-router upgrade`; R's pid becomes the new one. Returns a note."""
        old = self.r_pid
        out = os.path.join(self.work, f"upgrade-{time.time():.0f}.log")
        t = time.time()
        with open(out, "wb") as f:
            # The new process inherits these descriptors: a file, never a pipe we would wait on.
            rc = subprocess.run([self.bin, "upgrade", "--config", self.r_cfg], stdout=f,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=60).returncode
        took = time.time() - t
        text = open(out, errors="replace").read()
        m = re.search(r"upgraded: pid (\d+) serves, pid (\d+) drains", text)
        if rc != 0 or not m:
            return f"upgrade failed (exit {rc}): {text.strip()[-300:]}"
        new = int(m.group(1))
        self.procs.extra_pids.add(new)
        self.procs.note(new)
        self.r_pid = new
        # How long the old process drains (it is ours only the first time).
        end = time.time() + 15
        while time.time() < end and alive(old):
            time.sleep(0.05)
        for proc in self.procs.p.values():
            if proc.pid == old:
                proc.poll()
        self.procs.extra_pids.discard(old)
        drained = f"old pid gone {time.time() - t:.1f} s after the command began" if not alive(old) \
            else "old pid still alive 15 s later"
        return f"`upgrade` returned after {took * 1000:.0f} ms (pid {old} → {new}); {drained}"

    # -- the load and a phase --------------------------------------------------------------------

    def load(self, port, paths, duration, conns_rate, tls=False, per_conn=0):
        conns, rate = conns_rate
        argv = [self.loadgen, "steady", "--port", str(port), "--path", ",".join(paths),
                "--conns", str(conns), "--rate", str(rate), "--duration", str(duration),
                "--timeout-ms", str(CLIENT_TIMEOUT_MS), "--per-conn", str(per_conn)]
        if tls:
            argv += ["--tls-ca", os.path.join(self.work, "certs", "ca.pem"), "--sni", "chaos-edge"]
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.note(p.pid)
        return p

    def run_phase(self, loads, duration, actions):
        """Runs the loads (a list of (key, load argv kwargs, pid getter)) while `actions`
        ((at_s, label, fn)) happen in order; returns (results by key, events, mem before/after).
        An action's return value, if a string, is kept as a note."""
        before = {k: mem(pidf()) for k, _, pidf in loads}
        kinds_before = {k: fd_kinds(pidf()) for k, _, pidf in loads}
        t0 = self.phase_t0 = time.time()
        running = {k: self.load(duration=duration, **kw) for k, kw, _ in loads}
        events, notes = [], []
        for at, label, fn in sorted(actions, key=lambda x: x[0]):
            delay = t0 + at - time.time()
            if delay > 0:
                time.sleep(delay)
            at_real = time.time() - t0
            try:
                note = fn()
            except Exception as e:  # a fault that could not be made: say so, go on
                note = f"{label} failed: {e}"
            events.append((at_real, label))
            if isinstance(note, str):
                notes.append(note)
            if label not in ("reload", "watch"):
                log(f"  {at_real:5.1f}s {label}" + (f": {note}" if isinstance(note, str) else ""))
        results = {}
        for k, p in running.items():
            out, err = p.communicate(timeout=duration + CLIENT_TIMEOUT_MS / 1000 + 30)
            if p.returncode != 0 or not out.strip():
                raise SystemExit(f"loadgen failed ({p.returncode}): {err[-500:]}")
            results[k] = json.loads(out.strip().splitlines()[-1])
            # Events relative to this load's own start.
            results[k]["t0_shift"] = results[k]["start_unix"] - t0
        time.sleep(1)
        after = {k: mem(pidf()) for k, _, pidf in loads}
        for k, _, pidf in loads:
            d = fd_diff(kinds_before[k], fd_kinds(pidf()))
            if d:
                notes.append(f"fds of {dict(M='the eu edge').get(k, k)} after vs before: {d}")
        return results, events, notes, before, after

    # -- phases ----------------------------------------------------------------------------------

    def phases(self):
        r_load = lambda: {"port": R, "paths": [self.path["eu"]], "conns_rate": LOAD_R}
        r_pid = lambda: self.r_pid
        mesh_paths = [self.path[r] for r in ("eu", "us", "ap")]
        mesh_load = lambda: {"port": EDGE["eu"], "paths": mesh_paths, "conns_rate": LOAD_MESH}

        # 1. kill -9 of one of eu's two upstreams, restart 8 s later.
        log("phase 1: kill -9 of an upstream")
        res = self.run_phase([("R", r_load(), r_pid)], 28, [
            (8, "kill -9 E1", lambda: self.kill9("E1")),
            (16, "E1 restarted", lambda: self.restart_echo("E1", E1)),
        ])
        self.row("1. kill -9 one of eu's 2 upstreams, restart 8 s later", "R, eu ids", res, "R", 0)

        # 2. A reload every 200 ms, two valid versions in turn.
        log("phase 2: reload storm")
        self.reload_answers, self.reload_unexpected = {}, []
        actions = [(3 + i * 0.2, "reload", lambda i=i: self.reload_r(TABLE_B if i % 2 == 0 else TABLE_A, 200))
                   for i in range(110)]
        res = self.run_phase([("R", r_load(), r_pid)], 28, actions)
        res[2].append(f"{len(actions)} reloads (POST /admin/reload, 200 ms apart, versions chaos-a/chaos-b): "
                      f"answers {fmt_counts(self.reload_answers)}; serving {self.r_version()} after")
        res[2].extend(f"unexpected reload answer: {u}" for u in self.reload_unexpected[:2])
        res = (res[0], [(3.0, "reloads begin"), (3 + 109 * 0.2, "reloads end")], res[2], res[3], res[4])
        self.row("2. table reload every 200 ms (2 versions)", "R, eu ids", res, "R", 0)

        # 3. An invalid table, then the good one.
        log("phase 3: invalid table")
        self.reload_answers, self.reload_unexpected = {}, []

        def bad():
            st, _ = self.reload_r(TABLE_BAD, 422)
            return f"invalid table: reload answered {st}, serving {self.r_version()}"

        def fixed():
            st, _ = self.reload_r(TABLE_A, 200)
            return f"fixed: reload answered {st}, serving {self.r_version()}"

        res = self.run_phase([("R", r_load(), r_pid)], 26, [
            (8, "invalid table written + reload", bad),
            (18, "good table written + reload", fixed),
        ])
        self.row("3. invalid table, fixed 10 s later", "R, eu ids", res, "R", 0)

        # 4. Certificate rotation under TLS load.
        log("phase 4: certificate rotation")
        rot = {"n": 0}

        def rotate():
            rot["n"] += 1
            stage = os.path.join(self.work, f"rot{rot['n']}")
            os.makedirs(stage)
            for f in ("ca.pem", "ca-key.pem"):
                shutil.copy(os.path.join(self.work, "certs", f), stage)
            subprocess.run(["bash", "config/make-certs.sh", stage, "chaos-edge"], check=True,
                           stdout=subprocess.DEVNULL)
            certs = os.path.join(self.work, "certs")
            os.replace(os.path.join(stage, "chaos-edge-key.pem"), os.path.join(certs, "chaos-edge-key.pem"))
            os.replace(os.path.join(stage, "chaos-edge.pem"), os.path.join(certs, "chaos-edge.pem"))

        res = self.run_phase([("T", {"port": T, "paths": [self.path["eu"]], "conns_rate": LOAD_T,
                                     "tls": True, "per_conn": 10}, self.t_pid)], 26,
                             [(6, "cert rotated", rotate), (12, "cert rotated", rotate), (18, "cert rotated", rotate)])
        st, body = http("GET", f"http://127.0.0.1:{T_ADMIN}/admin/tls")
        tls = json.loads(body) if st == 200 else {}
        certs = res[0]["T"].get("certs", {})
        res[2].append(f"HTTPS, a new connection every 10 requests ({res[0]['T']['connects']} handshakes); "
                      f"leaf certificates seen by the client: {len(certs)} ({', '.join(str(v) for v in certs.values())} "
                      f"handshakes); /admin/tls reloads {tls.get('reloads')}, failed {tls.get('failed_reloads')}")
        self.row("4. certificate rotation ×3 (TLS load)", "T (tls), eu ids", res, "T", 0)

        # 5. An upgrade of R.
        log("phase 5: upgrade")
        res = self.run_phase([("R", r_load(), r_pid)], 26, [(10, "upgrade", self.upgrade_r)])
        self.row("5. `iuid-router upgrade`", "R, eu ids", res, "R", 0)

        # 6. One edge of the mesh killed.
        log("phase 6: kill -9 of the ap edge")
        res = self.run_phase([("M", mesh_load(), self.edge_pid)], 30, [
            (8, "kill -9 ap edge", lambda: self.kill9("edge-ap")),
            (18, "ap edge restarted", lambda: self.start_edge("ap")),
        ])
        self.mesh_rows("6. kill -9 of the ap edge, restart 10 s later", res, affected="ap",
                       fault=("kill -9 ap edge", "ap edge restarted"))

        # 7. The eu-us link: latency, loss, partition.
        for label, on, off in (
            ("7a. eu↔us link +100 ms each way", lambda: self.delay_sig(signal.SIGUSR1), lambda: self.delay_sig(signal.SIGUSR2)),
            ("7b. eu↔us link 20 % loss each way", lambda: link_rule("loss"), lambda: link_rule(None)),
            ("7c. eu↔us partition", lambda: link_rule("partition"), lambda: link_rule(None)),
        ):
            if self.netns_skip:
                self.rows.append([label, "mesh eu edge", f"skipped: {self.netns_skip}"] + [""] * 10)
                continue
            log(f"phase {label}")
            self.upstream_watch = []
            actions = [(5, "fault on", on), (17, "fault off", off)]
            actions += [(0.25 * i, "watch", self.watch_us) for i in range(1, 120)]
            res = self.run_phase([("M", mesh_load(), self.edge_pid)], 30, actions)
            res = (res[0], [e for e in res[1] if e[1] != "watch"], res[2], res[3], res[4])
            res[2].append(self.watch_summary(res[1]))
            self.mesh_rows(label + ", 12 s", res, affected="us", fault=("fault on", "fault off"))

        # 8. Several faults at once: R and the mesh together.
        log("phase 8: together")
        self.reload_answers, self.reload_unexpected = {}, []
        actions = [(5 + i * 0.2, "reload", (lambda i=i: self.reload_r(TABLE_B if i % 2 == 0 else TABLE_A, 200)))
                   for i in range(100)]
        actions += [
            (5, "kill -9 E1", lambda: self.kill9("E1")),
            (12, "kill -9 ap edge", lambda: self.kill9("edge-ap")),
            (15, "upgrade R", self.upgrade_r),
            (20, "E1 restarted", lambda: self.restart_echo("E1", E1)),
            (22, "ap edge restarted", lambda: self.start_edge("ap")),
        ]
        if not self.netns_skip:
            actions += [(10, "20 % loss on eu↔us", lambda: link_rule("loss")),
                        (24, "loss removed", lambda: link_rule(None))]
        res = self.run_phase([("R", r_load(), r_pid), ("M", mesh_load(), self.edge_pid)], 36, actions)
        events = [e for e in res[1] if e[1] != "reload"]
        notes = res[2] + [f"reloads of R every 200 ms from 5 s to 25 s: answers {fmt_counts(self.reload_answers)}"]
        label = "8. together: kill E1 + reloads + upgrade R + kill ap edge + 20 % loss eu↔us"
        self.row(label, "R, eu ids", (res[0], events, notes, res[3], res[4]), "R", 0)
        self.mesh_rows(label, (res[0], events, [], res[3], res[4]), affected="ap",
                       fault=("kill -9 ap edge", "ap edge restarted"), key="M")

    def delay_sig(self, sig):
        os.kill(self.procs.p["delay"].pid, sig)

    def watch_us(self):
        """Records the eu edge's view of its us upstream (state) at this moment."""
        st, body = http("GET", f"http://127.0.0.1:{EDGE_ADMIN['eu']}/admin/upstreams", timeout=1)
        state = "?"
        if st == 200:
            for reg in json.loads(body).get("regions", []):
                if reg.get("name") == "us":
                    state = ",".join(u.get("state", "?") for u in reg.get("upstreams", []))
        self.upstream_watch.append((time.time(), state))

    def watch_summary(self, events):
        """When the us upstream was first ejected after the fault, and healthy again after it."""
        if not self.upstream_watch:
            return ""
        t_on = next((t for t, l in events if l == "fault on"), None)
        t_off = next((t for t, l in events if l == "fault off"), None)
        seq = [(t - self.phase_t0, s) for t, s in self.upstream_watch]
        states = sorted({s for _, s in seq})
        first_out = next((t for t, s in seq if t >= t_on and s != "healthy"), None)
        back = next((t for t, s in seq if t >= t_off and s == "healthy"), None)
        parts = [f"eu edge's us upstream (polled every 250 ms): states seen {', '.join(states)}"]
        if first_out is not None and first_out < t_off:
            parts.append(f"first not healthy {first_out - t_on:.1f} s after the fault")
        else:
            parts.append("never taken out during the fault")
        if back is not None:
            parts.append(f"healthy {back - t_off:.1f} s after the link returned")
        return "; ".join(parts)

    # -- rows ------------------------------------------------------------------------------------

    def row(self, phase, target, res, key, path_index=None, first_row=True):
        results, events, notes, before, after = res
        r = results[key]
        tally = r if path_index is None else r["by_path"][path_index]
        if path_index is not None and len(r["by_path"]) == 1:
            tally = r
        shift = r["t0_shift"]
        ev = "; ".join(f"{lbl} @{t - shift:.1f}s" for t, lbl in events)
        fails = self.fail_timing(r, path_index if len(r["by_path"]) > 1 else None)
        text = "; ".join(x for x in [ev, fails] + notes if x)
        m = ""
        if first_row:
            m = (fmt_mem(before.get(key), after.get(key), 0), fmt_mem(before.get(key), after.get(key), 1))
        else:
            m = ("″", "″")
        self.rows.append([phase, target] + cells(tally) + [m[0], m[1], text])

    def mesh_rows(self, phase, res, affected, fault, key="M"):
        results, events, notes, before, after = res
        r = results[key]
        shift = r["t0_shift"]
        t_on = next((t - shift for t, l in events if l == fault[0]), None)
        t_off = next((t - shift for t, l in events if l == fault[1]), None)
        for i, reg in enumerate(("eu", "us", "ap")):
            extra = list(notes) if i == 0 else []
            if reg == affected and t_on is not None and t_off is not None:
                extra.append(recovery(r, i, t_on, t_off))
            self.row(phase, f"mesh eu edge, {reg} ids", (results, events if i == 0 else [], extra, before, after),
                     key, i, first_row=(i == 0))

    def fail_timing(self, r, path_index):
        """When failures happened: the first and last, and in clusters."""
        # Listed as they completed: sorted here by send time.
        fl = sorted((t, k) for t, p, k in r["failed"] if path_index is None or p == path_index)
        if not fl:
            return ""
        # Clusters of failures no more than 1 s apart.
        clusters, cur = [], [fl[0]]
        for f in fl[1:]:
            if f[0] - cur[-1][0] > 1.0:
                clusters.append(cur)
                cur = [f]
            else:
                cur.append(f)
        clusters.append(cur)
        parts = []
        for c in clusters[:6]:
            kinds = {}
            for _, k in c:
                kinds[k] = kinds.get(k, 0) + 1
            parts.append(f"{len(c)} sent {c[0][0]:.1f}–{c[-1][0]:.1f}s ({fmt_counts(kinds)})")
        more = f" and {len(clusters) - 6} more clusters" if len(clusters) > 6 else ""
        return "failed: " + ", ".join(parts) + more

    # -- the report ------------------------------------------------------------------------------

    def markdown(self):
        head = ["phase", "load through", "requests", "ok", "refused", "reset", "closed", "5xx",
                "no answer", "other", "p99 ms", "max ms", "RSS MiB before→after",
                "fds before→after", "when, and notes"]
        out = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 2 + ["---:"] * 10 + ["---"] * 3) + "|"]
        for row in self.rows:
            if len(row) == 13:  # skipped phase
                row = row[:2] + [""] * 12 + [row[2]]
            out.append("| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |")
        return "\n".join(out)


def cells(t):
    f = t.get("failures", {})
    take = lambda pred: sum(v for k, v in f.items() if pred(k))
    fives = {k[len("status "):]: v for k, v in f.items() if k.startswith("status 5")}
    other = {k: v for k, v in f.items()
             if k not in ("refused", "reset", "closed", "timeout") and not k.startswith("status 5")}
    lat = t.get("latency_ms", {})
    return [t["requests"], t["ok"], take(lambda k: k == "refused"), take(lambda k: k == "reset"),
            take(lambda k: k == "closed"),
            (f"{sum(fives.values())} ({fmt_counts(fives)})" if fives else 0),
            take(lambda k: k == "timeout"), fmt_counts(other) if other else 0,
            lat.get("p99", "–"), lat.get("max", "–")]


def recovery(r, p, t_on, t_off):
    """For path p: failures during the fault, and how the region came back after t_off."""
    during = [x for x in r["failed"] if x[1] == p and t_on <= x[0] < t_off]
    after = [x for x in r["failed"] if x[1] == p and x[0] >= t_off]
    b = r["bucket_s"]
    oks = sorted(bk * b for bk, path, ok, _ in r["timeline"] if path == p and ok > 0 and bk * b >= t_off)
    first_ok = f"first ok sent {oks[0] - t_off:.1f} s after" if oks else "no ok after"
    last_fail = f"last failure sent {after[-1][0] - t_off:.1f} s after" if after else "no failure after"
    # Failures sent in the 5 s after the fault was removed.
    window = sum(1 for x in after if x[0] < t_off + 5)
    return (f"during the fault: {len(during)} failed; after it ended: {first_ok}, {last_fail}, "
            f"{window} failed in the first 5 s")


def fmt_counts(d):
    return ", ".join(f"{k}×{v}" for k, v in sorted(d.items()))


def fmt_mem(b, a, i):
    fmt = (lambda v: f"{v:.1f}") if i == 0 else (lambda v: f"{v}")
    return f"{fmt(b[i]) if b else '?'}→{fmt(a[i]) if a else '?'}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True)
    ap.add_argument("--bin", default="target/release/iuid-router")
    ap.add_argument("--loadgen", default="bench/loadgen/target/release/loadgen")
    a = ap.parse_args()
    b = Bench(a)
    start_mem = {}
    try:
        b.setup()
        # A short warm-up through every router, so that the start's RSS has its pools.
        warm = [b.load(port=R, paths=[b.path["eu"]], duration=3, conns_rate=LOAD_R),
                b.load(port=T, paths=[b.path["eu"]], duration=3, conns_rate=LOAD_T, tls=True, per_conn=10),
                b.load(port=EDGE["eu"], paths=[b.path[r] for r in ("eu", "us", "ap")], duration=3,
                       conns_rate=LOAD_MESH)]
        for w in warm:
            w.communicate(timeout=40)
        time.sleep(1)
        start_mem = {"R": (b.r_pid, mem(b.r_pid)), "T": (b.t_pid(), mem(b.t_pid())),
                     "eu edge": (b.edge_pid(), mem(b.edge_pid()))}
        start_kinds = {k: fd_kinds(p) for k, (p, _) in start_mem.items()}
        b.phases()
        time.sleep(1)
        end_mem = {"R": (b.r_pid, mem(b.r_pid)), "T": (b.t_pid(), mem(b.t_pid())),
                   "eu edge": (b.edge_pid(), mem(b.edge_pid()))}
        end_kinds = {k: fd_kinds(p) for k, (p, _) in end_mem.items()}
    finally:
        b.procs.stop_all()
        netns_down()
        try:
            os.remove(os.path.join(a.work, "pids"))  # all stopped: nothing left for chaos.sh's trap
        except OSError:
            pass
    took = time.time() - started
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    print(f"""Run {date} on {os.cpu_count()} cores (Linux {os.uname().release}), the release binary, by
`bash bench/chaos.sh`; {took / 60:.1f} min for everything after the build. Load: `loadgen steady`
(bench/loadgen, one thread), keep-alive HTTP/1.1 `GET /v1/orders/{{id}}`, paced: {LOAD_R[1]} req/s
over {LOAD_R[0]} connections to R, {LOAD_T[1]} req/s over {LOAD_T[0]} HTTPS connections (a new one,
full handshake, every 10 requests) to T, {LOAD_MESH[1]} req/s over {LOAD_MESH[0]} connections to the
mesh's eu edge (a third of them for each of eu, us and ap ids). Every router: `timeouts: {{ connect_ms: {CONNECT_MS}, response_headers_ms:
{HEADERS_MS} }}`, retries and health at their defaults (2 retries, eject after 5 failures for
1 s, doubling); the mesh edges also check each other (`{MESH_CHECKS.strip()}`). A request is *no answer* when nothing whole came within {CLIENT_TIMEOUT_MS} ms
(the config's worst case is {BOUND_MS} ms: 3 connects and the headers' wait); *closed*: the
connection ended before a whole answer; *other*: 4xx and connect/TLS errors other than a refusal;
5xx are split by status and the router's problem slug. Each client connection waits for its
answer and sends one region's ids only: a slot missed while it waits is skipped, not sent, so a
stalled region shows fewer requests in its row rather than a pile-up in the others'.
Times in the notes are the requests' send times, in seconds from the phase's start; p99 and max
are of answered requests (write to last byte). R and T are single routers (region eu, two echo
upstreams E1 and E2); the mesh is three edges over mTLS + HTTP/2 as bench/mesh.sh, the us edge in
a network namespace behind `loadgen delay` (latency) with nftables drops in the namespace (loss
and partition, both directions). RSS/fds are those of the router the load went through (R's pid
changes with each upgrade).
""")
    print(b.markdown())
    print()
    print("| router | pid at start → at end | RSS MiB start → end | fds start → end | fds at the end vs the start |")
    print("|---|---|---:|---:|---|")
    for k in ("R", "T", "eu edge"):
        (p0, m0), (p1, m1) = start_mem.get(k, (None, None)), end_mem.get(k, (None, None))
        d = fd_diff(start_kinds[k], end_kinds[k]) or "the same"
        print(f"| {k} | {p0} → {p1} | {fmt_mem(m0, m1, 0)} | {fmt_mem(m0, m1, 1)} | {d} |")


if __name__ == "__main__":
    main()
