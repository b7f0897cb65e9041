"""A minimal Kubernetes API client for the benchmarks: client-certificate TLS, JSON requests, watch streams
and the API server's Prometheus metrics, on the standard library alone.

The bench drives the cluster directly rather than through kubectl so that a create's timestamp is when the
API server answered, not when a kubectl process finished starting and exiting.
"""

import http.client
import json
import os
import re
import socket
import ssl
import threading
import time
import urllib.parse


class ApiError(Exception):
    def __init__(self, status, body):
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status


class Api:
    def __init__(self, cluster_dir):
        self.cluster_dir = cluster_dir
        ports = dict(line.split("=", 1) for line in open(os.path.join(cluster_dir, "ports")).read().split())
        self.port = int(ports["API_PORT"])
        pki = os.path.join(cluster_dir, "pki")
        self.ssl = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
        self.ssl.load_cert_chain(os.path.join(pki, "admin.crt"), os.path.join(pki, "admin.key"))
        self.local = threading.local()

    def _connect(self, timeout=60):
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ssl, timeout=timeout)

    def request(self, method, path, body=None, content_type="application/json", ok=(200, 201, 202)):
        """One request on this thread's keep-alive connection; the parsed JSON answer. A 429 (a new
        resource's watch cache still starting, or API priority and fairness pushing back) is retried."""
        for _ in range(60):
            try:
                return self._request(method, path, body, content_type, ok)
            except ApiError as err:
                if err.status != 429:
                    raise
                time.sleep(1)
        return self._request(method, path, body, content_type, ok)

    def _request(self, method, path, body, content_type, ok):
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = {"Accept": "application/json", "User-Agent": "samplectl-bench"}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in range(2):
            conn = getattr(self.local, "conn", None) or self._connect()
            self.local.conn = conn
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
                break
            except (http.client.HTTPException, OSError):
                conn.close()
                self.local.conn = None
                if attempt == 1:
                    raise
        if resp.status not in ok:
            raise ApiError(resp.status, raw.decode(errors="replace"))
        return json.loads(raw) if raw and raw[:1] in (b"{", b"[") else raw.decode()

    def exists(self, path):
        try:
            self.request("GET", path)
            return True
        except ApiError as err:
            if err.status == 404:
                return False
            raise

    def apply(self, path, body, manager):
        """Server-side apply, forced, as the controllers do it."""
        query = urllib.parse.urlencode({"fieldManager": manager, "force": "true"})
        return self.request("PATCH", f"{path}?{query}", body, content_type="application/apply-patch+yaml")

    def metrics(self):
        """The API server's own counters: {(metric, frozenset(labels)): value}."""
        text = self.request("GET", "/metrics", ok=(200,))
        out = {}
        for line in text.splitlines():
            if line.startswith("#") or not line:
                continue
            m = METRIC_LINE.match(line)
            if m:
                labels = frozenset(LABEL.findall(m.group(2) or ""))
                out[(m.group(1), labels)] = float(m.group(3))
        return out


class Watch:
    """Lists `path`, then streams its changes into on_event(type, object, monotonic time) on a thread until
    stop(). The initial list arrives as ADDED events; `listed` is set once it has, and every later change
    is then certain to be seen. Reopens the watch when the server ends it, and lists again when the server
    no longer has the changes since the last version seen (410 Gone: a watch fallen behind a burst of
    changes larger than the API server's watch cache): what the new list shows comes as ADDED events, and
    what it no longer shows as DELETED."""

    def __init__(self, api, path, on_event):
        self.api, self.path, self.on_event = api, path, on_event
        self.listed = threading.Event()
        self.stopping = threading.Event()
        self.conn = None
        self.error = None
        # What the list and the watch have shown, as (namespace, name): the ones a new list no longer shows
        # are reported deleted.
        self.known = set()
        # How often it was cut (or its list failed) after its first list, and started over with a list.
        self.restarts = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @staticmethod
    def _key(obj):
        meta = obj.get("metadata", {})
        return (meta.get("namespace"), meta.get("name"))

    def _list(self):
        """Lists the path into on_event; returns the list's resourceVersion."""
        listed = self.api.request("GET", self.path)
        shown = set()
        for item in listed.get("items", []):
            shown.add(self._key(item))
            self.on_event("ADDED", item, time.monotonic())
        for namespace, name in self.known - shown:
            self.on_event("DELETED", {"metadata": {"namespace": namespace, "name": name}}, time.monotonic())
        self.known = shown
        return listed["metadata"]["resourceVersion"]

    def _run(self):
        version = None
        while not self.stopping.is_set():
            try:
                version = self._follow(version)
            except Exception as err:  # noqa: BLE001 - reported by wait_listed / stop unless we caused it
                if self.stopping.is_set():
                    return
                if not self.listed.is_set():
                    self.error = err
                    self.listed.set()
                    return
                # A stream cut or a list that failed (a relist of 100,000 objects under load can outlast
                # the request's timeout): listed again, so that what changed meanwhile is not missed, where
                # a watch that ended here would leave its readers waiting on what it last saw.
                self.restarts += 1
                if self.conn is not None:
                    self.conn.close()
                version = None
                time.sleep(1)

    def _follow(self, version):
        """Lists when `version` is None, then follows the changes until stopped; returns the last version."""
        if version is None:
            version = self._list()
            self.listed.set()
        sep = "&" if "?" in self.path else "?"
        while not self.stopping.is_set():
            self.conn = self.api._connect()
            query = f"{sep}watch=1&allowWatchBookmarks=true&resourceVersion={version}&timeoutSeconds=240"
            headers = {"Accept": "application/json", "User-Agent": "samplectl-bench"}
            self.conn.request("GET", self.path + query, headers=headers)
            resp = self.conn.getresponse()
            if resp.status == 410:
                resp.read()
                version = self._list()
                continue
            if resp.status != 200:
                raise ApiError(resp.status, resp.read().decode(errors="replace"))
            for line in iter(resp.readline, b""):
                event = json.loads(line)
                obj = event["object"]
                if event["type"] == "ERROR":
                    # The stream ends after it; from the same version, every watch would end so again.
                    if obj.get("code") == 410:
                        version = self._list()
                    break
                version = obj.get("metadata", {}).get("resourceVersion", version)
                if event["type"] == "BOOKMARK":
                    continue
                if event["type"] == "DELETED":
                    self.known.discard(self._key(obj))
                else:
                    self.known.add(self._key(obj))
                self.on_event(event["type"], obj, time.monotonic())
            self.conn.close()
        return version

    def wait_listed(self, timeout=60):
        if not self.listed.wait(timeout) or self.error:
            raise RuntimeError(f"watch on {self.path} did not start: {self.error}")

    def stop(self):
        self.stopping.set()
        conn = self.conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.thread.join(10)


METRIC_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def namespaced(ns, resource, group_version="v1"):
    base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    return f"{base}/namespaces/{ns}/{resource}"


def samples_path(ns):
    return namespaced(ns, "samples", "example.com/v1alpha1")


def sample_body(name, value):
    return {"apiVersion": "example.com/v1alpha1", "kind": "Sample", "metadata": {"name": name}, "testString": value}


def is_ready(sample):
    conditions = (sample.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def fresh_namespace(api, ns):
    delete_namespace(api, ns)
    api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})


def delete_namespace(api, ns, timeout=600):
    """Deletes a namespace and waits until it is gone, so that the next measurement does not pay for the
    namespace controller's clean-up."""
    try:
        api.request("DELETE", f"/api/v1/namespaces/{ns}")
    except ApiError as err:
        if err.status != 404:
            raise
    deadline = time.monotonic() + timeout
    while api.exists(f"/api/v1/namespaces/{ns}"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"namespace {ns} still there after {timeout}s")
        time.sleep(0.5)
