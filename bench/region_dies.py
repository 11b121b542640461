#!/usr/bin/env python3
"""A region dies under load (issue 62): bench/region_dies.sh's orchestrator.

    python3 bench/region_dies.py --work DIR --bin target/release/iuid-router
                                                  # normally through bench/region_dies.sh

Three regions, eu, us and ap, each two `iuid-router echo` upstreams (separate processes, so
they can be `kill -9`ed); the router with ap failing over to eu for reads
(`failover: { region: eu, serves: reads, overprovisioning: 1.4 }`) and active health checks
every 500 ms. A paced load of keep-alive HTTP/1.1 requests, 80 % `GET` and 20 % `POST` of
`/v1/orders/{id}`, to ids of all three regions, runs for WARM + 3 x PHASE seconds:

    warm-up (not counted) | before (PHASE s) | ap dark (PHASE s) | after restart (PHASE s)
                          ^                  ^ kill -9 of both   ^ both restarted
                                               ap upstreams

The load client is here (asyncio, raw sockets) and not `bench/loadgen steady`, which only
sends GETs and does not report an answer's headers: every request is judged by its status,
its `X-Iuid-Failover` and `Retry-After`, its problem type, and the upstream that served it
(the echo's body names it: each upstream is started as `echo --region <region>-<a|b>`), and
timed from the first byte written to the last byte read. Each connection sends one region's
ids on a fixed schedule; a slot that comes while the previous answer is still awaited is
skipped (and counted), not queued, so a stalled request does not pile up others behind it.
The router's own view (`GET /admin/regions`: ap's upstreams in rotation, its health share)
is polled every POLL_S in the same loop, so "the router knows ap is dark" has a time. The
CPU time of the router, each region's echoes, the client and every other process on the
machine is taken per phase: on two shared cores, a p99 of about a millisecond moves with
whatever else runs, and the report says how much else ran.

Prints a Markdown report (how it ran, the table, one line per acceptance criterion) on
stdout, progress on stderr; writes every request to WORK/requests.jsonl, the admin polls to
WORK/polls.jsonl and each criterion's outcome to WORK/summary.json
(`region_dies.py --summarize A/summary.json B/summary.json …` tabulates several runs).
Standard library only. Loopback ports 18300-18315.
"""

import argparse
import asyncio
import gc
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone

ROUTER, ADMIN = 18300, 18301
UPSTREAMS = {"eu": (18310, 18311), "us": (18312, 18313), "ap": (18314, 18315)}
COUNTRY = {"eu": 1, "us": 2, "ap": 3}
REGIONS = ("eu", "us", "ap")

CONNECT_MS, HEADERS_MS = 1000, 2000
CHECK_INTERVAL_MS, CHECK_TIMEOUT_MS = 500, 200
OVERPROVISIONING = 1.4
CLIENT_TIMEOUT_S = 6.0
POLL_S = 0.05

# The acceptance bounds (issue 62).
DARK_503_MS = 50          # a write's 503 once the region is known dark
P99_VS_HEALTHY = 2.0      # ap reads' p99 against the healthy regions'
P99_DRIFT = 0.20          # eu/us p99 against before the kill
FAILBACK_MS = CHECK_INTERVAL_MS
# Left out, before and after each fault action, for the p99 comparison shown beside the criterion.
QUIET_S = (0.1, 0.5)

started = time.time()


def log(*a):
    print(f"[region-dies {time.time() - started:6.1f}s]", *a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Processes


class Procs:
    def __init__(self, work):
        self.work = work
        self.p = {}
        self.adopted = {}

    def note(self, pid):
        with open(os.path.join(self.work, "pids"), "a") as f:
            f.write(f"{pid}\n")

    def start(self, name, argv):
        logf = open(os.path.join(self.work, f"{name}.log"), "ab")
        proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        logf.close()
        self.p[name] = proc
        self.note(proc.pid)
        return proc

    def adopt(self, name, pid):
        """A process another one started (the agent's echoes): its CPU is counted, it is stopped."""
        self.adopted[name] = pid
        self.note(pid)

    def stop_all(self):
        for pid in self.adopted.values():
            try:
                os.kill(pid, signal.SIGTERM)  # normally gone with the agent already
            except ProcessLookupError:
                pass
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


def http_get(url, timeout=2):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return None, str(e)


def router_yaml(access_log=False):
    return f"""listen: 127.0.0.1:{ROUTER}
admin_listen: 127.0.0.1:{ADMIN}
region: eu
routing_table: routing-table.yaml
routes: [ {{ path: "/v1/orders/{{id}}" }} ]
timeouts: {{ connect_ms: {CONNECT_MS}, response_headers_ms: {HEADERS_MS} }}
health_check: {{ path: /healthz, interval_ms: {CHECK_INTERVAL_MS}, timeout_ms: {CHECK_TIMEOUT_MS} }}
access_log: {'true' if access_log else 'false'}
"""


def table_yaml():
    ups = {r: ", ".join(f'"http://127.0.0.1:{p}"' for p in UPSTREAMS[r]) for r in REGIONS}
    return f"""version: region-dies-62
regions:
  eu: {{ upstreams: [{ups['eu']}] }}
  us: {{ upstreams: [{ups['us']}] }}
  ap:
    upstreams: [{ups['ap']}]
    failover: {{ region: eu, serves: reads, overprovisioning: {OVERPROVISIONING} }}
countries: {{ 1: eu, 2: us, 3: ap }}
default_region: eu
"""


def echo_name(region, i):
    return f"{region}-{'ab'[i]}"


# ---------------------------------------------------------------------------------------------
# HTTP/1.1 on raw sockets


class Closed(Exception):
    pass


async def read_answer(reader):
    """(status, headers as a dict of lower-case names, body bytes) of one answer."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        raise Closed("closed before the answer's head" if not e.partial else "closed in the head")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    status = int(parts[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    try:
        if "content-length" in headers:
            body = await reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")  # no trailers expected
                    break
                chunks.append(await reader.readexactly(size))
                await reader.readexactly(2)
            body = b"".join(chunks)
        elif status in (204, 304) or 100 <= status < 200:
            body = b""
        else:
            body = await reader.read()  # to the end of the connection
            headers["connection"] = "close"
    except asyncio.IncompleteReadError:
        raise Closed("closed in the body")
    return status, headers, body


class Load:
    """The paced load: CONNS connections per region, RATE requests/s per region."""

    def __init__(self, ids, rate, conns, write_share, duration, seed=62):
        self.ids = ids
        self.rate = rate
        self.conns = conns
        self.write_share = write_share
        self.duration = duration
        self.records = []   # dicts, one per request sent
        self.skipped = {r: 0 for r in REGIONS}
        self.connects = {r: 0 for r in REGIONS}
        self.rng = random.Random(seed)

    def request(self, region, method, n):
        ident = self.ids[region][n % len(self.ids[region])]
        if method == "GET":
            return (f"GET /v1/orders/{ident} HTTP/1.1\r\nHost: 127.0.0.1:{ROUTER}\r\n"
                    f"User-Agent: region-dies\r\n\r\n").encode()
        body = json.dumps({"order": ident, "qty": n % 7 + 1}).encode()
        return (f"POST /v1/orders/{ident} HTTP/1.1\r\nHost: 127.0.0.1:{ROUTER}\r\n"
                f"User-Agent: region-dies\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode() + body

    async def conn_task(self, region, k, t0):
        loop = asyncio.get_running_loop()
        interval = self.conns / self.rate
        offset = interval * k / self.conns + interval * REGIONS.index(region) / (self.conns * len(REGIONS))
        rng = random.Random(f"{region}-{k}")
        reader = writer = None
        slot = 0
        n = 0
        while True:
            at = t0 + offset + slot * interval
            now = loop.time()
            if at - t0 >= self.duration:
                break
            if now > at + interval:  # missed while the last answer was awaited
                missed = int((now - at) / interval)
                self.skipped[region] += missed
                slot += missed
                continue
            if at > now:
                await asyncio.sleep(at - now)
            slot += 1
            n += 1
            method = "POST" if rng.random() < self.write_share else "GET"
            rec = {"region": region, "access": "write" if method == "POST" else "read",
                   "conn": k, "sent": None, "ms": None, "status": None, "error": None,
                   "failover": None, "retry_after": None, "slug": None, "served_by": None,
                   "upstream_saw": None}
            if writer is None:
                try:
                    reader, writer = await asyncio.open_connection("127.0.0.1", ROUTER)
                    self.connects[region] += 1
                except OSError as e:
                    rec["sent"] = loop.time() - t0
                    rec["error"] = f"connect: {e.strerror or e}"
                    self.records.append(rec)
                    continue
            wire = self.request(region, method, n)
            start = loop.time()
            rec["sent"] = start - t0
            try:
                writer.write(wire)
                status, headers, body = await asyncio.wait_for(read_answer(reader), CLIENT_TIMEOUT_S)
                rec["ms"] = (loop.time() - start) * 1000
                rec["status"] = status
                rec["failover"] = headers.get("x-iuid-failover")
                rec["retry_after"] = headers.get("retry-after")
                m = re.match(rb"region: (\S+)", body)
                rec["served_by"] = m.group(1).decode() if m else None
                # The echo lists the request's headers: X-Iuid-Failover as the upstream got it.
                m = re.search(rb"(?im)^x-iuid-failover: *(\S+)", body) if m else None
                rec["upstream_saw"] = m.group(1).decode() if m else None
                if status >= 400:
                    m = re.search(rb'"type"\s*:\s*"[^"]*?([a-z0-9-]+)"', body)
                    rec["slug"] = m.group(1).decode() if m else body[:80].decode("latin-1")
                if headers.get("connection", "").lower() == "close":
                    writer.close()
                    reader = writer = None
            except asyncio.TimeoutError:
                rec["error"] = "timeout"
            except Closed as e:
                rec["error"] = str(e)
            except ConnectionResetError:
                rec["error"] = "reset"
            except OSError as e:
                rec["error"] = f"os: {e}"
            if rec["error"]:
                rec["ms"] = (loop.time() - start) * 1000
                if writer is not None:
                    writer.close()
                reader = writer = None
            self.records.append(rec)
        if writer is not None:
            writer.close()


async def admin_poll(t0, until, polls):
    """Every POLL_S: ap's upstreams in rotation and health share, as the router sees them."""
    loop = asyncio.get_running_loop()
    while loop.time() - t0 < until:
        t = loop.time() - t0
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", ADMIN)
            writer.write(f"GET /admin/regions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
            status, _, body = await asyncio.wait_for(read_answer(reader), 2)
            writer.close()
            ap = next(r for r in json.loads(body)["regions"] if r["name"] == "ap")
            polls.append({"t": t, "in_rotation": ap["in_rotation"], "share": ap["health_share"],
                          "kept": (ap.get("failover") or {}).get("kept")})
        except (OSError, asyncio.TimeoutError, Closed, ValueError, StopIteration, KeyError) as e:
            polls.append({"t": t, "error": str(e)})
        await asyncio.sleep(POLL_S)


async def wait_listening(port, t0, deadline_s=5):
    """Seconds from t0 when the port first accepted a connection (None if never)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while loop.time() < end:
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
            t = loop.time() - t0
            w.close()
            return t
        except OSError:
            await asyncio.sleep(0.002)
    return None


class Cpu:
    """CPU time of this bench's processes by group (the router, each region's echoes, the
    load client) and of the whole machine, at marks: per phase, how hard each worked, and
    what other processes took meanwhile (it skews the latencies)."""

    GROUPS = ("router", "eu", "us", "ap", "client")

    def __init__(self, procs):
        self.procs = procs
        self.seen = {}  # pid -> (group, its CPU seconds last seen); a dead one keeps its last
        self.marks = []

    def sample(self):
        tck = os.sysconf("SC_CLK_TCK")
        pids = [(name, proc.pid) for name, proc in self.procs.p.items()] + list(self.procs.adopted.items())
        for name, pid in pids:
            try:
                f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
                if f[0] != "Z":
                    self.seen[pid] = (name.split("-")[0], (int(f[11]) + int(f[12])) / tck)
            except (OSError, IndexError, ValueError):
                pass
        t = os.times()
        self.seen["self"] = ("client", t.user + t.system)

    def mark(self):
        self.sample()
        x = [int(v) for v in open("/proc/stat").readline().split()[1:]]
        totals = {g: 0.0 for g in self.GROUPS}
        for g, sec in self.seen.values():
            totals[g] = totals.get(g, 0.0) + sec
        totals["machine"] = (sum(x) - x[3] - x[4]) / os.sysconf("SC_CLK_TCK")  # all but idle, iowait
        self.marks.append((time.monotonic(), totals))

    @staticmethod
    def between(m0, m1):
        """Per group, ms of CPU per second of the span; `others`: the machine less ours."""
        wall = m1[0] - m0[0]
        d = {g: (m1[1][g] - m0[1].get(g, 0.0)) for g in m1[1]}
        ours = sum(d[g] for g in Cpu.GROUPS)
        out = {g: 1000 * d[g] / wall for g in Cpu.GROUPS}
        out["others"] = 1000 * max(0.0, d["machine"] - ours) / wall
        out["wall"] = wall
        return out


# ---------------------------------------------------------------------------------------------
# The run


class Bench:
    def __init__(self, a):
        self.a = a
        self.work = a.work
        self.bin = os.path.abspath(a.bin)
        self.procs = Procs(self.work)
        self.events = {}

    async def agent_says(self, command):
        self.agent.stdin.write(command.encode() + b"\n")
        await self.agent.stdin.drain()
        return (await self.agent.stdout.readline()).decode().strip()

    def start_echo(self, region, i):
        name = echo_name(region, i)
        return self.procs.start(name, [self.bin, "echo", "--region", name, "--listen",
                                       f"127.0.0.1:{UPSTREAMS[region][i]}"])

    def setup(self):
        for r in REGIONS:
            for i in range(2):
                self.start_echo(r, i)
        with open(os.path.join(self.work, "routing-table.yaml"), "w") as f:
            f.write(table_yaml())
        cfg = os.path.join(self.work, "router.yaml")
        with open(cfg, "w") as f:
            f.write(router_yaml(self.a.access_log))
        check = subprocess.run([self.bin, "check", "--config", cfg], capture_output=True, text=True)
        if check.returncode != 0:
            raise SystemExit(f"iuid-router check refused the config:\n{check.stdout}{check.stderr}")
        self.procs.start("router", [self.bin, "serve", "--config", cfg])
        for _ in range(100):
            if http_get(f"http://127.0.0.1:{ADMIN}/readyz", timeout=1)[0] == 200:
                break
            time.sleep(0.1)
        else:
            raise SystemExit("the router never got ready")
        # Every upstream in rotation (the active checks have passed) before the load.
        for _ in range(100):
            st, body = http_get(f"http://127.0.0.1:{ADMIN}/admin/regions")
            if st == 200 and all(r["in_rotation"] == 2 for r in json.loads(body)["regions"]):
                break
            time.sleep(0.1)
        else:
            raise SystemExit(f"not every upstream in rotation: {body}")
        self.ids = {}
        for r in REGIONS:
            out = subprocess.run([self.bin, "mint", "--country", str(COUNTRY[r]), "--count", "16"],
                                 check=True, capture_output=True, text=True).stdout.split()
            self.ids[r] = out
        # Each region answers from its own upstreams.
        for r in REGIONS:
            st, body = http_get(f"http://127.0.0.1:{ROUTER}/v1/orders/{self.ids[r][0]}")
            if st != 200 or not body.startswith(f"region: {r}-"):
                raise SystemExit(f"{r}: unexpected answer {st} {body[:200]}")

    async def run(self):
        a = self.a
        gc.disable()  # no collector pause in the measured latencies
        loop = asyncio.get_running_loop()
        duration = a.warm + 3 * a.phase
        self.load = Load(self.ids, a.rate, a.conns, a.write_share, duration)
        self.polls = []
        # The kill and the restart are done by a helper process: a fork, or the wait for a
        # dying process, in this one would stall the load's loop (and show as the router's
        # latency). Started before the load.
        self.agent = await asyncio.create_subprocess_exec(
            sys.executable, os.path.abspath(__file__), "--agent", self.bin, self.work,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        self.procs.note(self.agent.pid)
        t0 = loop.time() + 0.2
        self.events["t0_unix"] = time.time() + (t0 - loop.time())
        self.cpu = Cpu(self.procs)
        tasks = [asyncio.create_task(self.load.conn_task(r, k, t0)) for r in REGIONS for k in range(a.conns)]
        tasks.append(asyncio.create_task(admin_poll(t0, duration + 0.5, self.polls)))
        t_kill = a.warm + a.phase
        t_restart = t_kill + a.phase
        await asyncio.sleep(t0 + a.warm - loop.time())
        self.cpu.mark()
        await asyncio.sleep(t0 + t_kill - loop.time())
        self.cpu.mark()  # with the ap echoes' CPU before they die
        ap_pids = [self.procs.p[echo_name("ap", i)].pid for i in range(2)]
        answer = await self.agent_says(f"kill {ap_pids[0]} {ap_pids[1]}")
        # The signals' time, on the load's clock: the phase boundary.
        self.events["kill"] = float(answer.split()[1]) - self.events["t0_unix"] + 0.0
        log(f"kill -9 of ap-a and ap-b at {self.events['kill']:.3f} s")
        await asyncio.sleep(t0 + t_restart - loop.time())
        self.cpu.mark()
        self.events["restart"] = loop.time() - t0
        names = [echo_name("ap", i) for i in range(2)]
        answer = await self.agent_says("start " + " ".join(f"{n} {p}" for n, p in zip(names, UPSTREAMS["ap"])))
        for name, pid in zip(names, answer.split()[1:]):
            self.procs.adopt(name, int(pid))
        log(f"ap-a and ap-b restarted at {self.events['restart']:.3f} s")
        listening = await asyncio.gather(*(wait_listening(p, t0) for p in UPSTREAMS["ap"]))
        self.events["listening"] = listening
        await asyncio.gather(*tasks)
        self.cpu.mark()
        self.agent.stdin.close()  # it stops the echoes it started, and exits
        await self.agent.wait()
        gc.enable()
        with open(os.path.join(self.work, "requests.jsonl"), "w") as f:
            for rec in self.load.records:
                f.write(json.dumps(rec) + "\n")
        with open(os.path.join(self.work, "polls.jsonl"), "w") as f:
            for p in self.polls:
                f.write(json.dumps(p) + "\n")
        st, text = http_get(f"http://127.0.0.1:{ADMIN}/metrics")
        self.metrics = [l for l in text.splitlines()
                        if l.startswith(("iuid_router_failover_requests_total", "iuid_router_region_health_ratio",
                                         "iuid_router_retries_total", "iuid_router_retry"))] if st == 200 else []
        self.router_log = open(os.path.join(self.work, "router.log"), errors="replace").read()


# ---------------------------------------------------------------------------------------------
# The report


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    k = max(0, min(len(xs) - 1, int(round(p / 100 * len(xs) + 0.5)) - 1))
    return xs[k]


def pc(d):
    return "–" if d is None else f"{100 * d:+.0f} %"


def f1(x):
    return "–" if x is None else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def outcome(rec):
    if rec["error"]:
        return rec["error"]
    if 200 <= rec["status"] < 300:
        return "ok"
    return f"{rec['status']} {rec['slug']}"


def report(b):
    a = b.a
    recs = b.load.records
    t_kill, t_restart = b.events["kill"], b.events["restart"]
    t_end = a.warm + 3 * a.phase
    phases = (("before", a.warm, t_kill), ("ap dark", t_kill, t_restart), ("after restart", t_restart, t_end))

    def sel(region=None, access=None, lo=None, hi=None, pred=None):
        return [r for r in recs if (region is None or r["region"] == region)
                and (access is None or r["access"] == access)
                and (lo is None or r["sent"] >= lo) and (hi is None or r["sent"] < hi)
                and (pred is None or pred(r))]

    ok = lambda r: r["status"] is not None and 200 <= r["status"] < 300
    is503 = lambda r: r["status"] == 503 and r["slug"] == "region-unavailable"

    # When the router knew ap was dark, and when it had it back (its admin view).
    known_dark = next((p["t"] for p in b.polls if p["t"] >= t_kill and p.get("in_rotation") == 0), None)
    back_rot = next((p["t"] for p in b.polls if p["t"] >= t_restart and p.get("in_rotation", 0) > 0), None)
    first_503 = min((r["sent"] for r in sel("ap", "write", t_kill, t_restart, is503)), default=None)

    rows = []
    stats = {}
    for region in REGIONS:
        for access in ("read", "write"):
            for pname, lo, hi in phases:
                rs = sel(region, access, lo, hi)
                lat = [r["ms"] for r in rs if r["status"] is not None]
                oks = [r for r in rs if ok(r)]
                fo = sum(1 for r in rs if r["failover"])
                own = sum(1 for r in oks if (r["served_by"] or "").startswith(region + "-"))
                five03 = [r for r in rs if is503(r)]
                ra = sum(1 for r in five03 if r["retry_after"])
                errs = {}
                for r in rs:
                    o = outcome(r)
                    if o == "ok" or (region == "ap" and access == "write" and is503(r)):
                        continue
                    errs[o] = errs.get(o, 0) + 1
                stats[(region, access, pname)] = {"n": len(rs), "p50": pct(lat, 50), "p99": pct(lat, 99),
                                                  "max": max(lat, default=None), "errors": sum(errs.values()),
                                                  "err_kinds": errs, "503": len(five03), "ra": ra,
                                                  "lat": lat, "fo": fo, "own": own}
                c503 = f"{len(five03)} ({ra} with Retry-After)" if (region == "ap" and access == "write") else "–"
                err_txt = str(sum(errs.values())) + (f" ({', '.join(f'{k}×{v}' for k, v in sorted(errs.items()))})" if errs else "")
                rows.append([region, access, pname, len(rs), len(oks), own, fo, err_txt, c503,
                             f1(pct(lat, 50)), f1(pct(lat, 99)), f1(max(lat, default=None))])

    m = b.cpu.marks
    cpu = Cpu.between(m[0], m[-1])
    cpu_phases = [Cpu.between(m[i], m[i + 1]) for i in range(3)]
    out = []
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    built = os.path.getmtime(b.bin)
    # The commit checked out when the binary was built: the newest not after it (HEAD may
    # have moved on since).
    commit = subprocess.run(["git", "log", "-1", "--format=%h", f"--before=@{int(built)}"],
                            capture_output=True, text=True).stdout.strip()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    # Whether the binary is the commit's: uncommitted edits of src/ older than it went into it.
    edited = [l[3:] for l in subprocess.run(["git", "status", "--porcelain", "--", "src", "Cargo.toml", "Cargo.lock"],
                                            capture_output=True, text=True).stdout.splitlines()]
    into = [f for f in edited if os.path.exists(f) and os.path.getmtime(f) <= built]
    dirty = (f" with uncommitted edits of {', '.join(into)}" if into else
             f" (files edited in src/ since the build: {len(edited)}, not in it)" if edited else "")
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    out.append(f"""Run {date} on {os.cpu_count()} cores (Linux {os.uname().release}), the release binary
built {datetime.fromtimestamp(built, timezone.utc).strftime('%H:%M UTC')} from the working tree (the newest commit then: {commit}{'' if head == commit else f'; HEAD is {head} now'}){dirty}; load average at the end {load}. Regions eu, us, ap, two `iuid-router echo` upstreams each (separate processes); ap:
`failover: {{ region: eu, serves: reads, overprovisioning: {OVERPROVISIONING} }}`; router:
`health_check: {{ path: /healthz, interval_ms: {CHECK_INTERVAL_MS}, timeout_ms: {CHECK_TIMEOUT_MS} }}`,
`timeouts: {{ connect_ms: {CONNECT_MS}, response_headers_ms: {HEADERS_MS} }}`, retries and passive
health at their defaults. Load (bench/region_dies.py, Python asyncio, one process): {a.rate:g} req/s
per region ({3 * a.rate:g} in all) over {a.conns} keep-alive HTTP/1.1 connections per region,
{100 * (1 - a.write_share):.0f} % `GET` / {100 * a.write_share:.0f} % `POST` (a 40-byte JSON body) of `/v1/orders/{{id}}`,
client timeout {CLIENT_TIMEOUT_S:g} s; {a.warm:g} s warm-up (not counted), then {a.phase:g} s per phase:
`kill -9` of both ap upstreams at {t_kill:.2f} s, both restarted at {t_restart:.2f} s (listening at
{', '.join(f1(x) if x is None else f'{x:.3f}' for x in b.events['listening'])} s), the load until {t_end:g} s. Rows by the requests' send times.
Latency: first byte written to last byte read, of every answered request (for ap's writes in
the dark, mostly 503s). *own*: 2xx served by the region's own upstreams (the echo's body
names it); *failed over*: answers with `X-Iuid-Failover`; *errors*: non-2xx or no answer,
except ap's 503 `region-unavailable` writes, counted apart. Slots skipped while an answer
was awaited: {', '.join(f'{r} {b.load.skipped[r]}' for r in REGIONS)}; client connections opened: {', '.join(f'{r} {b.load.connects[r]}' for r in REGIONS)}.
CPU per phase, ms of CPU per second (the machine has {1000 * os.cpu_count()}):
{'; '.join(f"{name}: " + ', '.join(f"{g} {c[g]:.0f}" for g in Cpu.GROUPS + ("others",)) for name, c in zip(("before", "ap dark", "after restart"), cpu_phases))}
(*eu*, *us*, *ap*: the region's two echoes; *client*: this script; *others*: every other process on the machine).
""")
    head = ["region", "access", "phase", "requests", "2xx", "own", "failed over", "errors",
            "503 region-unavailable", "p50 ms", "p99 ms", "max ms"]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "|".join(["---"] * 3 + ["---:"] * 9) + "|")
    for row in rows:
        out.append("| " + " | ".join(str(c) for c in row) + " |")
    out.append("")

    # --- the criteria -----------------------------------------------------------------------
    crit = []
    summary = b.summary = {"_phases": {"warm": a.warm, "kill": t_kill, "restart": t_restart, "end": t_end,
                                       "t0_unix": b.events["t0_unix"]}}

    def line(key, met, text, value=None):
        """One criterion: its line, and (key: met, value) in the run's summary."""
        crit.append(f"- **{'met' if met else 'NOT met'}**: {text}")
        summary[key] = {"met": bool(met), "value": value}

    def after_kill(rs, n=8):
        t = ", ".join(f"{(r['sent'] - t_kill) * 1000:.1f}" for r in rs[:n])
        return t + (f" and {len(rs) - n} more" if len(rs) > n else "")

    # 1. ap writes in the dark: 503 region-unavailable with Retry-After, fast.
    w = sel("ap", "write", t_kill, t_restart)
    w503 = [r for r in w if is503(r)]
    w_other = [r for r in w if not is503(r)]
    no_ra = [r for r in w503 if not r["retry_after"]]
    ras = sorted({r["retry_after"] for r in w503 if r["retry_after"]})
    kinds = {}
    for r in w_other:
        kinds[outcome(r)] = kinds.get(outcome(r), 0) + 1
    line("ap writes dark: 503 + Retry-After", not w_other and not no_ra and w503,
         f"ap writes while dark: {len(w)} sent, {len(w503)} answered 503 `region-unavailable`, "
         f"{len(w503) - len(no_ra)} of them with `Retry-After` (values {', '.join(ras) or '–'}); other outcomes: "
         + (", ".join(f"{k}×{v}" for k, v in sorted(kinds.items())) or "none")
         + (f" (sent {after_kill(w_other)} ms after the kill signals)" if w_other else ""),
         f"{len(w503) - len(no_ra)}/{len(w)}")
    kd = known_dark if known_dark is not None else t_restart
    early = [r["ms"] for r in w503 if r["sent"] < kd]
    late = [r["ms"] for r in w503 if r["sent"] >= kd]
    line(f"ap write 503s once known dark ≤ {DARK_503_MS} ms", bool(late) and max(late) <= DARK_503_MS,
         f"ap write 503s once the router knew ap dark (its `/admin/regions` showed 0 in rotation at "
         f"{f1(known_dark)} s, {f1(None if known_dark is None else (known_dark - t_kill) * 1000)} ms after the kill; "
         f"the first 503 was sent {f1(None if first_503 is None else (first_503 - t_kill) * 1000)} ms after it): "
         f"{len(late)}, p50 {f1(pct(late, 50))} ms, p99 {f1(pct(late, 99))} ms, max {f1(max(late, default=None))} ms "
         f"(bound {DARK_503_MS} ms)", f"max {f1(max(late, default=None))} ms")
    line(f"ap write 503s before that ≤ {CONNECT_MS} ms", max(early, default=0) <= CONNECT_MS,
         f"ap write 503s before that: {len(early)}, max {f1(max(early, default=None))} ms (bound: connect timeout {CONNECT_MS} ms)",
         f"{len(early)}, max {f1(max(early, default=None))} ms")

    # 2. ap reads: no error from the kill on.
    rd = sel("ap", "read", t_kill, None)
    rd_err = [r for r in rd if not ok(r)]
    kinds = {}
    for r in rd_err:
        kinds[outcome(r)] = kinds.get(outcome(r), 0) + 1
    line("ap read errors from the kill", not rd_err, f"ap reads from the kill to the end: {len(rd)} sent, {len(rd_err)} client errors"
         + (f" ({', '.join(f'{k}×{v}' for k, v in sorted(kinds.items()))}, sent at "
            f"{after_kill(rd_err)} ms after the kill signals)" if rd_err else ""), f"{len(rd_err)} of {len(rd)}")
    dark_reads = sel("ap", "read", t_kill, t_restart)
    fo_dark = sum(1 for r in dark_reads if ok(r) and r["failover"] == "ap" and (r["served_by"] or "").startswith("eu-"))
    saw = sum(1 for r in dark_reads if r["upstream_saw"] == "ap")
    fo_all = sel("ap", "read", None, None, lambda r: r["failover"])
    saw_all = sum(1 for r in fo_all if r["upstream_saw"] == r["failover"])
    line("ap reads dark failed over", fo_dark == saw == len(dark_reads) and saw_all == len(fo_all),
         f"ap reads while dark answered by eu with `X-Iuid-Failover: ap`: {fo_dark} of {len(dark_reads)}; "
         f"the eu upstream got `X-Iuid-Failover: ap` with {saw} of them (with {saw_all} of all {len(fo_all)} "
         f"failed-over answers of the run)", f"{fo_dark}/{len(dark_reads)}, upstream saw {saw}")

    # 3. ap reads' p99 within 2x the healthy regions'.
    healthy = stats[("eu", "read", "ap dark")]["lat"] + stats[("us", "read", "ap dark")]["lat"]
    healthy_before = stats[("eu", "read", "before")]["lat"] + stats[("us", "read", "before")]["lat"]
    ap99 = stats[("ap", "read", "ap dark")]["p99"]
    h99 = pct(healthy, 99)
    line(f"ap read p99 dark ≤ {P99_VS_HEALTHY:g}× eu+us", ap99 is not None and h99 is not None and ap99 <= P99_VS_HEALTHY * h99,
         f"ap reads' p99 while dark {f1(ap99)} ms vs eu+us reads' p99 in the same phase {f1(h99)} ms "
         f"(×{f1(None if not h99 else ap99 / h99)}, bound ×{P99_VS_HEALTHY:g}); eu+us reads' p99 before the kill {f1(pct(healthy_before, 99))} ms",
         f"{f1(ap99)} vs {f1(h99)} ms")

    # 4. eu/us p99 unchanged within ±20 %.
    # Per region, reads and writes together (the criterion); each access alone in parentheses
    # (a fifth as many writes: their p99 is a few requests).
    def drift(region, access):
        """p99 of (region, access or both) per phase, and its change against before."""
        accesses = ("read", "write") if access is None else (access,)
        p99 = {p: pct([x for acc in accesses for x in stats[(region, acc, p)]["lat"]], 99) for p, _, _ in phases}
        base = p99["before"]
        d = {p: (None if not base or p99[p] is None else p99[p] / base - 1) for p in ("ap dark", "after restart")}
        return p99, d

    for region in ("eu", "us"):
        p99, d = drift(region, None)
        met = all(v is not None and abs(v) <= P99_DRIFT for v in d.values())
        errs = sum(stats[(region, acc, p)]["errors"] for acc in ("read", "write") for p, _, _ in phases)
        detail = []
        for access in ("read", "write"):
            q, e = drift(region, access)
            detail.append(f"{access}s {f1(q['before'])} → {f1(q['ap dark'])} ({pc(e['ap dark'])}) → "
                          f"{f1(q['after restart'])} ms ({pc(e['after restart'])})")
        # The same without the moments of the fault actions (a process killed or started on
        # the same two cores: a few requests of every region, eu/us/ap alike, wait for a CPU).
        steady = {name: pct([r["ms"] for r in sel(region, None, lo, hi) if r["status"]], 99)
                  for name, lo, hi in (("before", a.warm, t_kill - QUIET_S[0]),
                                       ("ap dark", t_kill + QUIET_S[1], t_restart - QUIET_S[0]),
                                       ("after restart", t_restart + QUIET_S[1], t_end))}
        sd = {k: None if not steady["before"] or steady[k] is None else steady[k] / steady["before"] - 1
              for k in ("ap dark", "after restart")}
        line(f"{region} p99 within ±{100 * P99_DRIFT:.0f} %", met and errs == 0,
             f"{region} p99 (reads and writes): before {f1(p99['before'])} ms, ap dark {f1(p99['ap dark'])} ms "
             f"({pc(d['ap dark'])}), after restart {f1(p99['after restart'])} ms ({pc(d['after restart'])}) "
             f"(bound ±{100 * P99_DRIFT:.0f} %; {'; '.join(detail)}); errors in all phases: {errs}. "
             f"Leaving out {QUIET_S[0] * 1000:.0f} ms before and {QUIET_S[1] * 1000:.0f} ms after the kill and the restart: "
             f"{f1(steady['before'])} → {f1(steady['ap dark'])} ({pc(sd['ap dark'])}) → "
             f"{f1(steady['after restart'])} ms ({pc(sd['after restart'])})",
             f"{pc(d['ap dark'])}, {pc(d['after restart'])}")
        summary[f"{region} p99, fault moments left out (not the criterion)"] = {
            "met": None, "value": f"{pc(sd['ap dark'])}, {pc(sd['after restart'])}"}

    # 5. Failback within one check interval.
    back_own = [r for r in sel("ap", "read", t_restart, None) if ok(r) and (r["served_by"] or "").startswith("ap-")]
    back_nofo = [r for r in sel("ap", "read", t_restart, None) if ok(r) and not r["failover"]]
    t_own = min((r["sent"] + r["ms"] / 1000 for r in back_own), default=None)
    t_nofo = min((r["sent"] for r in back_nofo), default=None)
    listen_t = max((x for x in b.events["listening"] if x is not None), default=None)
    ms = lambda t, since: None if t is None or since is None else (t - since) * 1000
    line(f"failback ≤ {FAILBACK_MS} ms", t_own is not None and ms(t_own, t_restart) <= FAILBACK_MS,
         f"first ap read served by ap again (answered) {f1(ms(t_own, t_restart))} ms after the restart "
         f"({f1(ms(t_own, listen_t))} ms after both were listening; the first sent without failover "
         f"{f1(ms(t_nofo, t_restart))} ms after the restart); the router's view had ap in rotation again "
         f"{f1(ms(back_rot, t_restart))} ms after it (bound: one check interval, {FAILBACK_MS} ms)",
         f"{f1(ms(t_own, t_restart))} ms")
    settled = t_restart + 1.0
    tail = sel("ap", "read", settled, None)
    tail_own = sum(1 for r in tail if ok(r) and (r["served_by"] or "").startswith("ap-"))
    line("ap reads on ap from restart + 1 s", tail and tail_own == len(tail),
         f"ap reads sent from 1 s after the restart to the end served by ap: {tail_own} of {len(tail)}",
         f"{tail_own}/{len(tail)}")
    fb = sel("ap", None, t_restart, None)
    fb_read_err = [r for r in fb if r["access"] == "read" and not ok(r)]
    fb_write = [r for r in fb if r["access"] == "write"]
    fb_w503 = [r for r in fb_write if is503(r)]
    fb_w_other = [r for r in fb_write if not ok(r) and not is503(r)]
    last_w503 = max((r["sent"] for r in fb_w503), default=None)
    line("errors during failback", not fb_read_err and not fb_w_other,
         f"errors during failback (ap, from the restart): reads {len(fb_read_err)}, writes other than 503 "
         f"{len(fb_w_other)}; writes answered 503 `region-unavailable` while the router still had ap dark: "
         f"{len(fb_w503)}" + (f" (the last sent {f1(ms(last_w503, t_restart))} ms after the restart)" if fb_w503 else ""),
         f"{len(fb_read_err) + len(fb_w_other)} (+{len(fb_w503)} write 503s)")
    # Not criteria: the router's view of ap over time, and how much p99 moves with no fault.
    def first_poll(after, pred):
        return next((p["t"] for p in b.polls if p["t"] >= after and "in_rotation" in p and pred(p)), None)
    r1 = first_poll(t_kill, lambda p: p["in_rotation"] < 2)
    r0 = first_poll(t_kill, lambda p: p["in_rotation"] == 0)
    b1 = first_poll(t_restart, lambda p: p["in_rotation"] > 0)
    b2 = first_poll(t_restart, lambda p: p["in_rotation"] == 2)
    mid = (a.warm + t_kill) / 2
    noise = []
    for region in ("eu", "us"):
        x = pct([r["ms"] for r in sel(region, None, a.warm, mid) if r["status"]], 99)
        y = pct([r["ms"] for r in sel(region, None, mid, t_kill) if r["status"]], 99)
        noise.append(f"{region} {f1(x)} → {f1(y)} ms ({'–' if not x or y is None else pc(y / x - 1)})")
        summary[f"{region} p99 no fault (control)"] = {"met": None, "value": "–" if not x or y is None else pc(y / x - 1)}
    summary["CPU of other processes (share of the machine)"] = {
        "met": None, "value": f"{cpu['others'] / (10 * os.cpu_count()):.0f} %"}
    crit.append(f"- (not a criterion) ap's upstreams in rotation as `/admin/regions` said it, polled every "
                f"{POLL_S * 1000:.0f} ms: one out {f1(ms(r1, t_kill))} ms and both out {f1(ms(r0, t_kill))} ms after the kill; "
                f"one back {f1(ms(b1, t_restart))} ms and both back {f1(ms(b2, t_restart))} ms after the restart")
    crit.append(f"- (not a criterion) how much p99 moves with no fault at all, first half of *before* against its "
                f"second half ({(mid - a.warm):.0f} s each, reads and writes): " + "; ".join(noise))
    out.append("\n".join(crit))
    out.append("")
    if b.metrics:
        out.append("The router's counters at the end: " + "; ".join(f"`{m}`" for m in b.metrics))
        out.append("")
    warns = [l for l in b.router_log.splitlines() if "WARN" in l or "ERROR" in l]
    if warns:
        out.append(f"The router's log: {len(warns)} warnings/errors, e.g.")
        out.append("```")
        out.extend(re.sub(r"\x1b\[[0-9;]*m", "", l)[:220] for l in warns[:8])
        out.append("```")
    return "\n".join(out)


def agent(binary, work):
    """`--agent BIN WORK`: kills and starts processes on the orchestrator's word, one line a
    command on stdin, one line of answer: `kill PID...` (SIGKILL) → `killed UNIX_TIME`; `start NAME
    PORT...` (`BIN echo --region NAME`) → `started PID...`. On EOF it stops what it started."""
    started = []
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "kill":
            for pid in cmd[1:]:
                os.kill(int(pid), signal.SIGKILL)
            print(f"killed {time.time():.6f}", flush=True)
        elif cmd[0] == "start":
            pids = []
            for name, port in zip(cmd[1::2], cmd[2::2]):
                with open(os.path.join(work, f"{name}.log"), "ab") as logf:
                    p = subprocess.Popen([binary, "echo", "--region", name, "--listen", f"127.0.0.1:{port}"],
                                         stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
                started.append(p)
                pids.append(str(p.pid))
            print("started " + " ".join(pids), flush=True)
    for p in started:
        p.terminate()
    for p in started:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def summarize(files):
    """A table of several runs' criteria (their WORK/summary.json): one row a criterion."""
    runs = [json.load(open(f)) for f in files]
    keys = [k for k in runs[0] if not k.startswith("_")]
    out = ["| criterion | " + " | ".join(f"run {i + 1}" for i in range(len(runs))) + " |",
           "|---|" + "---|" * len(runs)]
    for k in keys:
        cells = []
        for r in runs:
            c = r.get(k, {"met": None, "value": "–"})
            mark = "" if c["met"] is None else ("met" if c["met"] else "**NOT met**")
            cells.append(f"{mark}{': ' if mark and c['value'] else ''}{c['value'] or ''}")
        out.append(f"| {k} | " + " | ".join(cells) + " |")
    # The runs pooled: p99 of eu's and us's requests per phase (reads and writes), from
    # each run's requests.jsonl beside its summary.
    pooled = {}
    for f, r in zip(files, runs):
        reqs = os.path.join(os.path.dirname(f), "requests.jsonl")
        if "_phases" not in r or not os.path.exists(reqs):
            return "\n".join(out)
        ph = r["_phases"]
        bounds = (("before", ph["warm"], ph["kill"]), ("ap dark", ph["kill"], ph["restart"]),
                  ("after restart", ph["restart"], ph["end"]))
        for line in open(reqs):
            q = json.loads(line)
            if q["status"] is None:
                continue
            for name, lo, hi in bounds:
                if lo <= q["sent"] < hi:
                    pooled.setdefault((q["region"], name), []).append(q["ms"])
    out.append("")
    out.append(f"The {len(runs)} runs pooled: each region's requests (reads and writes) per phase, "
               "p50 / p95 / p99 in ms (requests; change of p95 and p99 against before):")
    out.append("")
    out.append("| region | before | ap dark | after restart |")
    out.append("|---|---:|---:|---:|")
    for region in REGIONS:
        base = pooled.get((region, "before"), [])
        cells = []
        for name in ("before", "ap dark", "after restart"):
            v = pooled.get((region, name), [])
            q = [pct(v, 50), pct(v, 95), pct(v, 99)]
            cell = f"{' / '.join(f1(x) for x in q)} ({len(v)}"
            if name != "before" and region != "ap" and base and v:
                cell += f"; {pc(q[1] / pct(base, 95) - 1)}, {pc(q[2] / pct(base, 99) - 1)}"
            cells.append(cell + ")")
        out.append(f"| {region} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main():
    if sys.argv[1:2] == ["--agent"]:
        agent(sys.argv[2], sys.argv[3])
        return
    if sys.argv[1:2] == ["--summarize"]:
        print(summarize(sys.argv[2:]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True)
    ap.add_argument("--bin", default="target/release/iuid-router")
    ap.add_argument("--rate", type=float, default=150, help="requests/s per region")
    ap.add_argument("--conns", type=int, default=4, help="connections per region")
    ap.add_argument("--write-share", type=float, default=0.2)
    ap.add_argument("--warm", type=float, default=2)
    ap.add_argument("--phase", type=float, default=10)
    ap.add_argument("--access-log", action="store_true",
                    help="the router's access log on (WORK/router.log), to compare its durations with the client's")
    a = ap.parse_args()
    b = Bench(a)
    try:
        b.setup()
        log(f"load: {a.rate:g} req/s per region for {a.warm + 3 * a.phase:g} s")
        asyncio.run(b.run())
    finally:
        b.procs.stop_all()
        try:
            os.remove(os.path.join(a.work, "pids"))
        except OSError:
            pass
    print(report(b))
    with open(os.path.join(a.work, "summary.json"), "w") as f:
        json.dump(b.summary, f, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()
