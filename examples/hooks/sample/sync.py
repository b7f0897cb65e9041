#!/usr/bin/env python3
"""The built-in Sample controller written as a hook, standard library only: the same ConfigMap and the same
Ready condition samplectl's own Sample sync answers (src/controller/sample.rs). The benchmark runs it
beside the built-in sync to measure what a process per reconcile costs:

    samplectl reconcile --gvr example.com/v1alpha1/samples --child v1/configmaps \
        --hook "python3 examples/hooks/sample/sync.py"

and as a long-running hook, a request per line, to measure what the process per reconcile was:

    samplectl reconcile --gvr example.com/v1alpha1/samples --child v1/configmaps \
        --hook-process "python3 examples/hooks/sample/sync.py --lines"

The lastTransitionTime of Ready moves only when its status flips, as in the built-in sync.
"""

import datetime
import json
import sys


def sync(request):
    sample = request["parent"]
    meta = sample["metadata"]
    generation = meta.get("generation", 0)
    value = sample.get("testString")
    if value is None:
        value = ""
    labels = {"samples.example.com/name": meta["name"]} if len(meta["name"]) <= 63 else {}
    if isinstance(value, str):
        ready, reason = True, "ConfigMapReady"
        message = f"ConfigMap {meta.get('namespace', '')}/{meta['name']} holds testString"
        children = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": meta["name"], "labels": labels},
                     "data": {"testString": value}}]
    else:
        ready, reason = False, "InvalidTestString"
        message = "testString must be a string, not " + {bool: "a boolean", int: "a number", float: "a number",
                                                          list: "a list", dict: "an object"}[type(value)]
        children = list(request["children"].get("ConfigMap.v1", {}).values())
    flag = "True" if ready else "False"
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    current = next((c for c in (sample.get("status") or {}).get("conditions", []) if c.get("type") == "Ready"), None)
    transition = current["lastTransitionTime"] if current and current.get("status") == flag else now
    condition = {"type": "Ready", "status": flag, "reason": reason, "message": message,
                 "lastTransitionTime": transition, "observedGeneration": generation}
    return {"status": {"observedGeneration": generation, "conditions": [condition]}, "children": children}


if __name__ == "__main__":
    if sys.argv[1:] == ["--lines"]:
        # One request per line, one answer per line with the request's id, flushed at once: samplectl
        # waits for it.
        for line in sys.stdin:
            request = json.loads(line)
            print(json.dumps({"id": request["id"], **sync(request)}), flush=True)
    else:
        json.dump(sync(json.load(sys.stdin)), sys.stdout)
