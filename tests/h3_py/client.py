"""An HTTP/3 client for the router's tests, on aioquic (an independent QUIC and HTTP/3
implementation, from PyPI; .ci/run installs it into target/pyenv).

Usage: client.py PLAN_JSON  (or `-` to read the plan from stdin). Prints one JSON object.

The plan:
  {"host": "127.0.0.1", "port": 8443, "sni": "localhost", "ca": "certs/ca.pem",
   "ticket_in": "t.bin",     # resume this session (0-RTT when it allows early data)
   "ticket_out": "t.bin",    # save the session ticket the router sends
   "early": true,            # send the first steps before the handshake completes
   "steps": [
     {"op": "request", "method": "GET", "path": "/x", "headers": {"k": "v"}, "body": "..."},
                             # "header_lines": [["k", "v1"], ["k", "v2"]] for a name sent twice
                             # "end": false leaves the body unfinished (a stalled upload)
     {"op": "requests", "count": 20, ...request fields...},   # concurrently, one stream each
     {"op": "requests", "list": [request, request]},          # these, concurrently
     {"op": "sleep", "ms": 100},
     {"op": "rapid_reset", "count": 500, "path": "/x"},     # HEADERS, then RESET_STREAM
     {"op": "wait_closed", "ms": 5000},                      # until the router closes it
     {"op": "raw_stream", "hex": "0003616263"},             # these bytes on a new stream
     {"op": "overrun_streams", "count": 200, "path": "/x"},  # past the router's MAX_STREAMS
     {"op": "signal", "file": "f"},                          # create f (for the test)
     {"op": "wait_file", "file": "g", "ms": 10000}           # until the test creates g
   ]}

A plan may start with a flood of connection attempts from one socket that never answers:
  "flood": {"initials": 500}   # Initial packets of 500 connections, then the steps

The result: {"handshake": {"early_data_accepted", "session_resumed"} or null,
             "results": [{"status", "headers", "body", "ms"} or {"error"} per request step],
             "closed": {"error_code", "reason", "after_ms"} or null}
"""

import asyncio
import json
import os
import pickle
import ssl
import sys
import time

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, HandshakeCompleted, StreamReset


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.streams = {}
        self.handshake = None
        self.closed = None
        self.closed_event = asyncio.Event()
        self.started = time.monotonic()

    def quic_event_received(self, event):
        if isinstance(event, HandshakeCompleted):
            self.handshake = {
                "early_data_accepted": event.early_data_accepted,
                "session_resumed": event.session_resumed,
            }
        elif isinstance(event, ConnectionTerminated):
            self.closed = {
                "error_code": event.error_code,
                "reason": event.reason_phrase,
                "after_ms": int((time.monotonic() - self.started) * 1000),
            }
            self.closed_event.set()
            for stream in self.streams.values():
                if not stream["done"].done():
                    stream["done"].set_result({"error": "connection closed"})
        elif isinstance(event, StreamReset):
            stream = self.streams.get(event.stream_id)
            if stream and not stream["done"].done():
                stream["done"].set_result({"error": f"reset {event.error_code:#x}"})
        for h3_event in self.h3.handle_event(event):
            stream = self.streams.get(getattr(h3_event, "stream_id", None))
            if stream is None:
                continue
            if isinstance(h3_event, HeadersReceived):
                if stream["status"] is None:
                    stream["headers"] = {k.decode(): v.decode() for k, v in h3_event.headers}
                    stream["status"] = int(stream["headers"].pop(":status"))
                else:
                    stream["trailers"] = {k.decode(): v.decode() for k, v in h3_event.headers}
            elif isinstance(h3_event, DataReceived):
                stream["body"] += h3_event.data
            if getattr(h3_event, "stream_ended", False) and not stream["done"].done():
                stream["done"].set_result(
                    {
                        "status": stream["status"],
                        "headers": stream["headers"],
                        "trailers": stream.get("trailers"),
                        "body": stream["body"].decode("utf-8", "replace"),
                        "ms": int((time.monotonic() - stream["started"]) * 1000),
                    }
                )

    def start(self, plan, step, end=True):
        stream_id = self._quic.get_next_available_stream_id()
        headers = [
            (b":method", step.get("method", "GET").encode()),
            (b":scheme", b"https"),
            (b":authority", plan.get("sni", "localhost").encode()),
            (b":path", step.get("path", "/").encode()),
        ] + [(k.lower().encode(), v.encode()) for k, v in step.get("headers", {}).items()] + [
            # Field lines as a list, for a name sent twice: [[name, value], ...].
            (k.lower().encode(), v.encode()) for k, v in step.get("header_lines", [])
        ]
        body = step.get("body")
        self.h3.send_headers(stream_id, headers, end_stream=end and body is None)
        if body is not None:
            self.h3.send_data(stream_id, body.encode(), end_stream=end)
        done = asyncio.get_running_loop().create_future()
        self.streams[stream_id] = {
            "status": None, "headers": {}, "body": b"", "done": done, "started": time.monotonic()
        }
        return stream_id, done


def flood(plan, configuration, count):
    """Sends the first flight (the Initial packets) of `count` connections from one socket,
    and answers nothing: each asks the router to start a handshake."""
    import socket

    from aioquic.quic.connection import QuicConnection

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    addr = (plan["host"], plan["port"])
    sent = 0
    for _ in range(count):
        conn = QuicConnection(configuration=configuration)
        conn.connect(addr, now=time.monotonic())
        for data, _ in conn.datagrams_to_send(now=time.monotonic()):
            sock.sendto(data, addr)
            sent += 1
    sock.close()
    return sent


async def run(plan):
    configuration = QuicConfiguration(alpn_protocols=H3_ALPN, is_client=True)
    configuration.server_name = plan.get("sni", "localhost")
    configuration.verify_mode = ssl.CERT_REQUIRED
    configuration.load_verify_locations(plan["ca"])
    configuration.idle_timeout = plan.get("idle_timeout_s", 30.0)
    if plan.get("ticket_in"):
        with open(plan["ticket_in"], "rb") as f:
            configuration.session_ticket = pickle.load(f)

    def save_ticket(ticket):
        if plan.get("ticket_out"):
            with open(plan["ticket_out"], "wb") as f:
                pickle.dump(ticket, f)

    timeout = plan.get("timeout_s", 10.0)
    out = {"results": []}
    if plan.get("flood"):
        out["flood_sent"] = flood(plan, configuration, plan["flood"]["initials"])
    async with connect(
        plan["host"],
        plan["port"],
        configuration=configuration,
        create_protocol=Client,
        session_ticket_handler=save_ticket,
        wait_connected=not plan.get("early", False),
    ) as client:
        for step in plan["steps"]:
            op = step["op"]
            if op == "request":
                _, done = client.start(plan, step, end=step.get("end", True))
                client.transmit()
                try:
                    out["results"].append(await asyncio.wait_for(done, timeout))
                except asyncio.TimeoutError:
                    out["results"].append({"error": "timeout"})
            elif op == "requests":
                each = step.get("list") or [step] * step["count"]
                pending = [client.start(plan, one)[1] for one in each]
                client.transmit()
                for done in pending:
                    try:
                        out["results"].append(await asyncio.wait_for(done, timeout))
                    except asyncio.TimeoutError:
                        out["results"].append({"error": "timeout"})
            elif op == "sleep":
                await asyncio.sleep(step["ms"] / 1000)
            elif op == "rapid_reset":
                # Within the stream credit the router gives back as streams close (HTTP/2's
                # Rapid Reset kept within SETTINGS_MAX_CONCURRENT_STREAMS the same way).
                deadline = time.monotonic() + 10
                for _ in range(step["count"]):
                    while (
                        client._quic.get_next_available_stream_id() // 4
                        >= client._quic._remote_max_streams_bidi
                        and not client.closed
                        and time.monotonic() < deadline
                    ):
                        await asyncio.sleep(0.001)
                    if client.closed or time.monotonic() >= deadline:
                        break
                    stream_id, _ = client.start(plan, step, end=False)
                    client._quic.reset_stream(stream_id, 0x10C)  # H3_REQUEST_CANCELLED
                    client._quic.stop_stream(stream_id, 0x10C)
                    client.transmit()
                    await asyncio.sleep(0)
            elif op == "raw_stream":
                stream_id = client._quic.get_next_available_stream_id()
                done = asyncio.get_running_loop().create_future()
                client.streams[stream_id] = {"status": None, "headers": {}, "body": b"", "done": done}
                client._quic.send_stream_data(stream_id, bytes.fromhex(step["hex"]), end_stream=True)
                client.transmit()
                try:
                    out["results"].append(await asyncio.wait_for(done, step.get("timeout_s", 3)))
                except asyncio.TimeoutError:
                    out["results"].append({"error": "timeout"})
            elif op == "overrun_streams":
                # Ignore the router's stream limit, as a flooding client would.
                client._quic._remote_max_streams_bidi = 1 << 40
                for _ in range(step["count"]):
                    if client.closed:
                        break
                    client.start(plan, step)
                    client.transmit()
                    await asyncio.sleep(0)
                try:
                    await asyncio.wait_for(client.closed_event.wait(), 3)
                except asyncio.TimeoutError:
                    pass
            elif op == "signal":
                open(step["file"], "w").close()
            elif op == "wait_file":
                deadline = time.monotonic() + step.get("ms", 10000) / 1000
                while not os.path.exists(step["file"]) and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
            elif op == "wait_closed":
                try:
                    await asyncio.wait_for(client.closed_event.wait(), step["ms"] / 1000)
                except asyncio.TimeoutError:
                    pass
            else:
                raise SystemExit(f"unknown op {op}")
        # Room for the last NewSessionTicket before the connection closes.
        if plan.get("ticket_out"):
            await asyncio.sleep(0.2)
        out["handshake"] = client.handshake
        out["closed"] = client.closed
    return out


def main():
    source = sys.argv[1] if len(sys.argv) > 1 else "-"
    if source in ("-h", "--help"):
        print(__doc__)
        return
    plan = json.load(sys.stdin) if source == "-" else json.loads(source)
    print(json.dumps(asyncio.run(run(plan))))


if __name__ == "__main__":
    main()
