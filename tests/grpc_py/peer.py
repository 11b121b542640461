"""A real gRPC peer (grpcio, the C-core implementation) for tests/grpc_real.rs.

    python3 peer.py server PORT NAME     # serves /orders.v1.Orders/GetOrder and /Watch
    python3 peer.py call HOST:PORT METHOD ID [N]

No generated code: methods take and return raw bytes. The server answers GetOrder with
b"order <id> from <NAME>" and trailing metadata x-served-by: NAME; Watch (server streaming)
answers N messages. The client prints one JSON line: the status code, the messages and the
trailing metadata.
"""
import json
import sys
from concurrent import futures

import grpc


def field1(request: bytes) -> str:
    # The request is one length-delimited field 1 (a short string): tag, length, bytes.
    return request[2:2 + request[1]].decode()


def serve(port: str, name: str) -> None:
    def get_order(request, context):
        context.set_trailing_metadata((("x-served-by", name),))
        return f"order {field1(request)} from {name}".encode()

    def watch(request, context):
        context.set_trailing_metadata((("x-served-by", name),))
        for i in range(3):
            yield f"event {i} of {field1(request)}".encode()

    handlers = {
        "GetOrder": grpc.unary_unary_rpc_method_handler(get_order),
        "Watch": grpc.unary_stream_rpc_method_handler(watch),
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("orders.v1.Orders", handlers),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


def call(target: str, method: str, entity: str) -> None:
    request = bytes([0x0A, len(entity)]) + entity.encode()
    with grpc.insecure_channel(target) as channel:
        path = f"/orders.v1.Orders/{method}"
        try:
            if method == "Watch":
                stream = channel.unary_stream(path)(request, timeout=10)
                messages = [m.decode() for m in stream]
                trailing = dict(stream.trailing_metadata() or ())
                code = stream.code().value[0]
            else:
                response, rpc = channel.unary_unary(path).with_call(request, timeout=10)
                messages = [response.decode()]
                trailing = dict(rpc.trailing_metadata() or ())
                code = rpc.code().value[0]
            print(json.dumps({"code": code, "messages": messages, "trailing": trailing}))
        except grpc.RpcError as e:
            print(json.dumps({"code": e.code().value[0], "details": e.details(), "messages": [], "trailing": {}}))


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve(sys.argv[2], sys.argv[3])
    else:
        call(sys.argv[2], sys.argv[3], sys.argv[4])
