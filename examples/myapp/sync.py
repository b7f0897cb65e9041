#!/usr/bin/env python3
"""The MyApp controller's sync hook, in metacontroller's CompositeController protocol, standard library only.

    python3 examples/myapp/sync.py --serve 8010

A MyApp wants a Deployment running `spec.image` on `spec.port` with `spec.env` and `spec.resources`, a
Service of `spec.serviceType` in front of it, and, while `spec.autoScaling.enabled`, a HorizontalPodAutoscaler
that scales the Deployment between minReplicas and maxReplicas on CPU (the Deployment's replicas are then the
autoscaler's). Its status reports the Deployment's availableReplicas and is Ready once they reach the wanted
count. Everything a kubebuilder reconciler does for it with a client, owner references, a watch per type and
a status update, samplectl does from this answer.
"""

import http.server
import json
import sys


def sync(request):
    app = request["parent"]
    name = app["metadata"]["name"]
    spec = app.get("spec") or {}
    port = int(spec.get("port", 8080))
    scaling = spec.get("autoScaling") or {}
    autoscaled = bool(scaling.get("enabled"))
    labels = {"app.kubernetes.io/name": "myapp", "app.kubernetes.io/instance": name}

    container = {
        "name": "app",
        "image": spec["image"],
        "ports": [{"name": "http", "containerPort": port}],
        "env": spec.get("env") or [],
        "resources": spec.get("resources") or {},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }
    if not autoscaled:
        deployment["spec"]["replicas"] = int(spec.get("replicas", 1))
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "type": spec.get("serviceType", "ClusterIP"),
            "selector": labels,
            "ports": [{"name": "http", "port": 80, "targetPort": port}],
        },
    }
    children = [deployment, service]
    if autoscaled:
        children.append({
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                "minReplicas": int(scaling.get("minReplicas", 1)),
                "maxReplicas": int(scaling.get("maxReplicas", 5)),
                "metrics": [{
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": int(scaling.get("targetCPUUtilization", 80))},
                    },
                }],
            },
        })

    observed = request["children"].get("Deployment.apps/v1", {}).get(name) or {}
    available = int((observed.get("status") or {}).get("availableReplicas", 0))
    wanted = int(scaling.get("minReplicas", 1)) if autoscaled else int(spec.get("replicas", 1))
    ready = available >= wanted
    status = {
        "availableReplicas": available,
        "conditions": [{
            "type": "Ready",
            "status": "True" if ready else "False",
            "reason": "Available" if ready else "Progressing",
            "message": f"{available} of {wanted} replicas available",
        }],
    }
    return {"status": status, "children": children}


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
        print(json.dumps(sync(json.load(sys.stdin))))
