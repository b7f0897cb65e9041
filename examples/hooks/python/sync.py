#!/usr/bin/env python3
"""A sync hook for Greetings, in metacontroller's CompositeController protocol, standard library only.

Run by samplectl as a command (the request on stdin, the answer on stdout):

    samplectl reconcile --gvr hooks.example.com/v1/greetings --child v1/configmaps \
        --hook "python3 examples/hooks/python/sync.py" --finalize

or as a webhook (`python3 sync.py --serve 8000`, then `--hook-url http://127.0.0.1:8000/sync`).

A Greeting wants `spec.copies` ConfigMaps named NAME-0, NAME-1, ... holding `spec.message`. Its status
counts the ConfigMaps that hold the message now and is Ready when all of them do. When the Greeting is
deleted (with --finalize), it asks for no ConfigMaps and says it is finalized once they are gone.
"""

import http.server
import json
import sys


def sync(request):
    parent = request["parent"]
    name = parent["metadata"]["name"]
    spec = parent.get("spec") or {}
    message = spec.get("message", "")
    copies = int(spec.get("copies", 1))
    observed = request["children"].get("ConfigMap.v1", {})

    if request.get("finalizing"):
        # Everything is asked to go; done once nothing is left.
        print(f"finalizing: {len(observed)} ConfigMaps left", file=sys.stderr)
        return {"children": [], "finalized": not observed}

    desired = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{name}-{i}", "labels": {"greeting": name}},
            "data": {"message": message},
        }
        for i in range(copies)
    ]
    holding = sum(1 for cm in observed.values() if (cm.get("data") or {}).get("message") == message)
    ready = holding == copies and len(observed) == copies
    status = {
        "copies": holding,
        "conditions": [
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "reason": "AllCopies" if ready else "Pending",
                "message": f"{holding} of {copies} ConfigMaps hold the message",
            }
        ],
    }
    return {"status": status, "children": desired}


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        body = json.dumps(sync(request)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), Handler).serve_forever()
    else:
        json.dump(sync(json.load(sys.stdin)), sys.stdout)
