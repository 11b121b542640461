"""Python's readings of a corpus of requests, for tests/differential.rs.

Reads {"paths": [...], "queries": [...], "name": "order_id", "json": [{"body": ..., "pointer": [...]}]}
as JSON on stdin; prints, in the same order, what Python's standard library reads:

- a path: urllib.parse.unquote (as WSGI servers hand PATH_INFO to Flask and Django), then
  cleaned as Go's path.Clean and Werkzeug's merge_slashes do (dot segments removed, slashes
  merged, no trailing slash); latin-1 so that every byte survives;
- a query: urllib.parse.parse_qsl (split at & only since Python 3.9.2, + a space), the first
  and the last value of the parameter (Flask's args.get reads the first, Django's
  QueryDict.get the last);
- a JSON body: json.loads (the last of duplicate members wins, as JavaScript and Go), the
  value at the pointer: a string, an integer's digits, or null when absent or another type.
"""
import json
import sys
from urllib.parse import parse_qsl, unquote


def clean(path):
    out = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if out:
                out.pop()
            continue
        out.append(segment)
    return "/" + "/".join(out)


def query(q, name):
    values = [v for k, v in parse_qsl(q, keep_blank_values=True, encoding="latin-1") if k == name]
    first = values[0] if values else ""
    last = values[-1] if values else ""
    return [first, last]


def at(body, pointer):
    try:
        value = json.loads(body)
    except ValueError:
        return {"error": True}
    for key in pointer:
        if not isinstance(value, dict) or key not in value:
            return {"value": None}
        value = value[key]
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return {"value": None}
    return {"value": str(value)}


def main():
    corpus = json.load(sys.stdin)
    name = corpus["name"]
    out = {
        "paths": [clean(unquote(p, encoding="latin-1")) for p in corpus["paths"]],
        "queries": [query(q, name) for q in corpus["queries"]],
        "json": [at(c["body"], c["pointer"]) for c in corpus.get("json", [])],
    }
    json.dump(out, sys.stdout)


main()
