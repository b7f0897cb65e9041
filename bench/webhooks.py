"""Scenario 14: a validating webhook under idle connections. samplectl runs one shell hook bound as a
validating webhook (`kubernetesValidating`, served over TLS on 127.0.0.1, its configuration registered
with a namespace selector that matches nothing, so the cluster's own writes are not reviewed) that
allows everything. The bench posts AdmissionReviews of a 1 KiB ConfigMap straight to the server from
`clients` keep-alive connections, and measures reviews answered per second and each review's latency:
first alone, then while `idle` other connections are held open and silent, as a slow or hostile client
holds them (plain TCP that never starts its TLS handshake; then TLS connections that never send a
request), each reopened as soon as the server closes it."""

import concurrent.futures
import http.client
import json
import os
import resource
import select
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import uuid

from procs import Proc
from shell_operator import free_port
from stats import pct

NAME = "bench.samplectl.example.com"
PATH = "/hooks/bench-samplectl-example-com"

HOOK = f"""#!/usr/bin/env bash
if [[ $1 == --config ]]; then cat <<EOF
configVersion: v1
kubernetesValidating:
- name: {NAME}
  namespace: {{labelSelector: {{matchLabels: {{kubernetes.io/metadata.name: bench-webhooks-matches-nothing}}}}}}
  rules:
  - {{apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [configmaps], scope: Namespaced}}
EOF
exit 0; fi
echo '{{"allowed": true}}' > "$VALIDATING_RESPONSE_PATH"
"""


def certificates(work):
    """A CA and a server certificate for 127.0.0.1 it signed, made with openssl."""
    def run(*args):
        subprocess.run(["openssl", *args], cwd=work, check=True, capture_output=True)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=bench-ca",
        "-keyout", "ca.key", "-out", "ca.crt")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", "tls.key", "-out", "tls.csr")
    with open(os.path.join(work, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "1",
        "-extfile", "san.ext", "-out", "tls.crt")


def review(ns):
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bench", "namespace": ns},
           "data": {"value": "x" * 1024}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                        "name": "bench", "namespace": ns, "operation": "CREATE", "object": obj,
                        "userInfo": {"username": "bench"}}}


class Idle:
    """`count` connections held open and silent, each reopened once the server closes it."""

    def __init__(self, port, count, tls_context):
        self.port, self.count, self.tls = port, count, tls_context
        self.socks, self.reopened, self.stop = [], 0, threading.Event()
        for _ in range(count):
            self.socks.append(self._open())
        self.thread = threading.Thread(target=self._keep, daemon=True)
        self.thread.start()

    def _open(self):
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        if self.tls:
            sock = self.tls.wrap_socket(sock, server_hostname="127.0.0.1")
        sock.setblocking(False)
        return sock

    def _keep(self):
        while not self.stop.is_set():
            readable, _, _ = select.select(self.socks, [], [], 0.2)
            for sock in readable:
                try:
                    data = sock.recv(1)
                except (ssl.SSLWantReadError, BlockingIOError):
                    continue
                except OSError:
                    data = b""
                if not data:
                    sock.close()
                    self.socks[self.socks.index(sock)] = self._open()
                    self.reopened += 1

    def close(self):
        self.stop.set()
        self.thread.join()
        for sock in self.socks:
            sock.close()


def measure(port, context, ns, clients, reviews):
    """Reviews answered per second, and each one's latency, from `clients` keep-alive connections."""
    left = iter(range(reviews))
    lock = threading.Lock()

    def client():
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=60)
        latencies = []
        while True:
            with lock:
                if next(left, None) is None:
                    break
            body = json.dumps(review(ns))
            start = time.monotonic()
            conn.request("POST", PATH + "?timeout=10s", body, {"Content-Type": "application/json"})
            answer = json.loads(conn.getresponse().read())
            latencies.append(time.monotonic() - start)
            if not answer["response"]["allowed"]:
                raise RuntimeError(f"refused: {answer}")
        conn.close()
        return latencies

    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        latencies = [x for part in pool.map(lambda _: client(), range(clients)) for x in part]
    return {"seconds": time.monotonic() - start, "latencies": latencies}


def webhooks(bench, reviews, clients, idle, log):
    # Both ends hold a descriptor per idle connection.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * idle + 1024)), hard))
    work = tempfile.mkdtemp(prefix="bench-webhooks-")
    hooks, tmp = os.path.join(work, "hooks"), os.path.join(work, "tmp")
    os.makedirs(hooks)
    with open(os.path.join(hooks, "allow.sh"), "w") as f:
        f.write(HOOK)
    os.chmod(os.path.join(hooks, "allow.sh"), 0o755)
    certificates(work)
    port = free_port()
    configuration = "bench-webhooks"
    args = [bench.bins["samplectl"], "reconcile", "--hooks-dir", hooks, "--tmp-dir", tmp,
            "--validating-webhook-configuration-name", configuration,
            "--validating-webhook-url", f"https://127.0.0.1:{port}",
            "--validating-webhook-listen-address", "127.0.0.1", "--validating-webhook-listen-port", str(port),
            "--validating-webhook-server-cert", os.path.join(work, "tls.crt"),
            "--validating-webhook-server-key", os.path.join(work, "tls.key"),
            "--validating-webhook-ca", os.path.join(work, "ca.crt")]
    proc = Proc(args, bench.env, os.path.join(bench.log_dir, "webhooks.log"))
    context = ssl.create_default_context(cafile=os.path.join(work, "ca.crt"))
    results = {"reviews": reviews, "clients": clients, "idle": idle, "runs": {}}
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                measure(port, context, "bench", 1, 1)
                break
            except (OSError, http.client.HTTPException):
                proc.check_alive()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        measure(port, context, "bench", clients, 4 * clients)  # warm up
        for label, holder in (("none idle", None), ("idle TCP, no handshake", False),
                              ("idle TLS, no request", True)):
            held = holder is not None and Idle(port, idle, context if holder else None)
            try:
                run = measure(port, context, "bench", clients, reviews)
            finally:
                if held:
                    run["reopened"] = held.reopened
                    held.close()
            # Kept as percentiles: thousands of latencies would make most of results.json.
            lat = [x * 1000 for x in run.pop("latencies")]
            run.update(count=len(lat), per_second=len(lat) / run["seconds"],
                       **{f"p{p}_ms": pct(lat, p) for p in (50, 90, 99)})
            log(f"webhooks, {label}: {run['per_second']:.0f} reviews/s, p50 {run['p50_ms']:.1f} ms, "
                f"p99 {run['p99_ms']:.1f} ms" + (f", {run['reopened']} idle connections reopened" if held else ""))
            results["runs"][label] = run
        results["rss_mib"] = proc.rss_mib()
        return results
    finally:
        proc.stop()
        bench.api.request("DELETE", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/"
                          f"{configuration}-hooks", ok=(200, 202, 404))
        shutil.rmtree(work, ignore_errors=True)
