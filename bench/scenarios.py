"""The five measurements. Each returns plain data (lists of numbers per driver and repetition); report.py
turns them into tables, ratios and charts. Nothing here asserts anything."""

import base64
import collections
import concurrent.futures
import contextlib
import datetime
import http.client
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
import uuid

from kube import (ApiError, Watch, delete_namespace, fresh_namespace, is_ready, namespaced, sample_body,
                  samples_path)
from procs import Proc

# The labels and field owner of samplectl's ConfigMaps (src/reconcile/sample.rs), used by the floor client.
MANAGED = {"app.kubernetes.io/managed-by": "samplectl"}


class Bench:
    def __init__(self, api, env, bins, log_dir):
        self.api, self.env, self.bins, self.log_dir = api, env, bins, log_dir

    def start(self, driver, ns, label, concurrency=None, workers=None, extra=()):
        """A controller (or the original loop) working on namespace `ns`; `extra` are more samplectl flags."""
        b = self.bins
        if driver == "loop":
            args = [b["loop"], "-kubeconfig", self.env["KUBECONFIG"]]
        elif driver == "poll":
            args = [b["samplectl"], "reconcile", "-n", ns]
        elif driver in ("watch", "watch-before"):
            args = [b["samplectl" if driver == "watch" else "samplectl-before"], "reconcile", "--watch", "-n", ns]
            if concurrency:
                args += ["--concurrency", str(concurrency)]
        elif driver == "peer":
            args = [b["peer"], "-namespace", ns, "-kubeconfig", self.env["KUBECONFIG"]]
            if workers:
                args += ["-workers", str(workers)]
        else:
            raise ValueError(driver)
        return Proc(args + list(extra), self.env, os.path.join(self.log_dir, f"{label}.log"))

    def run_floor(self, ns, prefix, count, workers, creates_only=False):
        """The compiled burst floor: creates `count` Samples and writes each one's ConfigMap, Event and
        status, reading nothing; with `creates_only`, the creates alone, for a controller to answer."""
        subprocess.run([self.bins["floor"], "-kubeconfig", self.env["KUBECONFIG"], "-namespace", ns,
                        "-prefix", prefix, "-count", str(count), "-workers", str(workers)]
                       + (["-creates-only"] if creates_only else []),
                       env=self.env, check=True, stdout=subprocess.DEVNULL)

    def create_samples(self, ns, names, threads=16):
        """Creates Samples as fast as `threads` concurrent clients can: one burst."""
        def create(name):
            self.api.request("POST", samples_path(ns), sample_body(name, f"value of {name}"))
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            list(pool.map(create, names))

    def converge(self, ns):
        """Brings every Sample in `ns` to Ready with samplectl's one-pass mode, before an idle or memory
        measurement."""
        for _ in range(5):
            done = subprocess.run([self.bins["samplectl"], "reconcile", "--once", "-n", ns, "--concurrency", "32"],
                                  env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if done.returncode == 0:
                return
        raise RuntimeError(f"Samples in {ns} did not converge")


class Seen:
    """The first time an independent watch saw each object by name, and waiting for one."""

    def __init__(self, want=lambda obj: True):
        self.want = want
        self.at = {}
        self.cond = threading.Condition()

    def __call__(self, kind, obj, at):
        if kind in ("ADDED", "MODIFIED") and self.want(obj):
            with self.cond:
                self.at.setdefault(obj["metadata"]["name"], at)
                self.cond.notify_all()

    def wait(self, name, timeout=60):
        with self.cond:
            if not self.cond.wait_for(lambda: name in self.at, timeout):
                raise TimeoutError(f"{name} not seen within {timeout}s")
            return self.at[name]

    def wait_count(self, n, timeout):
        with self.cond:
            if not self.cond.wait_for(lambda: len(self.at) >= n, timeout):
                raise TimeoutError(f"{len(self.at)} of {n} seen within {timeout}s")
            return max(self.at.values())


def request_delta(before, after):
    """Requests to resources by verb, and bytes the API server sent for them, between two metric snapshots.
    Bytes are the bodies of GET and LIST answers plus watch events: the API server measures no others.
    Requests to non-resource paths (discovery, /readyz, /metrics) are counted apart: at idle they are
    kube-controller-manager's periodic discovery and the bench's own metric reads."""
    verbs, sent, other = collections.Counter(), 0.0, 0.0
    for (name, labels), value in after.items():
        d = value - before.get((name, labels), 0.0)
        labels = dict(labels)
        if d <= 0:
            continue
        if not labels.get("resource"):
            other += d if name == "apiserver_request_total" else 0
        elif name == "apiserver_request_total":
            verbs[labels["verb"]] += d
        elif name in ("apiserver_response_sizes_sum", "apiserver_watch_events_sizes_sum"):
            sent += d
    return dict(verbs), sent, other


def idle_cost(bench, sizes, window, windows, log):
    """Scenario 1: converged Samples, one driver at a time, requests and bytes per one-minute window."""
    out = {}
    for n in sizes:
        ns = f"bench-idle-{n}"
        fresh_namespace(bench.api, ns)
        bench.create_samples(ns, [f"s-{i:05}" for i in range(n)])
        bench.converge(ns)
        # kube-controller-manager renews a few dozen watches every few minutes and its garbage collector
        # looks up owners now and then: it is paused while idle cost is measured, so that the bytes the API
        # server sends (which its metrics cannot attribute to a client) are the client's.
        with paused(os.path.join(bench.api.cluster_dir, "kube-controller-manager.pid")):
            out.update(idle_windows(bench, n, ns, window, windows, log))
        delete_namespace(bench.api, ns)
    return out


@contextlib.contextmanager
def paused(pid_file):
    pid = int(open(pid_file).read())
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


# How each client names itself in the User-Agent header; "none" stands for everyone but the bench.
USER_AGENTS = {"loop": "original-loop/", "poll": "samplectl/", "watch": "samplectl/", "peer": "controller-runtime/",
               "metacontroller": "metacontroller/", "kro": "kro/"}
BENCH_AGENT = "samplectl-bench"


def audit_verbs(lines, driver, start, end, by_resource=False):
    """Requests a client sent between start and end (UTC datetimes), by verb (and resource), from audit
    log lines: each request's RequestReceived event (its ResponseComplete, logged too, is not counted)."""
    prefix = USER_AGENTS.get(driver)
    verbs = collections.Counter()
    for line in lines:
        event = json.loads(line)
        if event.get("stage", "RequestReceived") != "RequestReceived":
            continue
        agent = event.get("userAgent", "")
        mine = agent.startswith(prefix) if prefix else not agent.startswith(BENCH_AGENT)
        received = datetime.datetime.fromisoformat(event["requestReceivedTimestamp"])
        if mine and start <= received < end:
            resource = (event.get("objectRef") or {}).get("resource", "(discovery)")
            verbs[f"{event['verb'].upper()} {resource}" if by_resource else event["verb"].upper()] += 1
    return dict(verbs)


def requests_over(bench, driver, window):
    """Requests per minute `driver` (by user agent) sends over the next `window` seconds, from the audit
    log, and their count by verb and resource."""
    audit = os.path.join(bench.api.cluster_dir, "audit.log")
    offset, start_at = os.path.getsize(audit), datetime.datetime.now(datetime.timezone.utc)
    time.sleep(window)
    end = datetime.datetime.now(datetime.timezone.utc)
    with open(audit) as f:
        f.seek(offset)
        verbs = audit_verbs(f, driver, start_at, end, by_resource=True)
    return sum(verbs.values()) * 60.0 / (end - start_at).total_seconds(), verbs


def idle_windows(bench, n, ns, window, windows, log):
    """One client at a time in namespace `ns`, after its start-up, for `windows` windows: its requests
    from the API server's audit log (by User-Agent), bytes sent from the API server's metrics."""
    out = {}
    audit = os.path.join(bench.api.cluster_dir, "audit.log")
    for driver in ("none", "loop", "poll", "watch", "peer"):
        offset, started = os.path.getsize(audit), datetime.datetime.now(datetime.timezone.utc)
        proc = None if driver == "none" else bench.start(driver, ns, f"idle-{n}-{driver}")
        startup = {}
        if proc:
            time.sleep(10)
            if driver in ("watch", "peer"):
                proc.settle()  # start-up (lists, the first pass) is not idle cost; pollers never go quiet
            with open(audit) as f:
                f.seek(offset)
                now = datetime.datetime.now(datetime.timezone.utc)
                startup = audit_verbs(f, driver, started, now, by_resource=True)
        runs = []
        for _ in range(windows):
            offset = os.path.getsize(audit)
            start = datetime.datetime.now(datetime.timezone.utc)
            before = bench.api.metrics()
            time.sleep(window)
            _, sent, _ = request_delta(before, bench.api.metrics())
            end = datetime.datetime.now(datetime.timezone.utc)
            with open(audit) as f:
                f.seek(offset)
                verbs = audit_verbs(f, driver, start, end)
            scale = 60.0 / (end - start).total_seconds()
            runs.append({"verbs": {v: c * scale for v, c in verbs.items()}, "bytes": sent * scale,
                         "startup": startup})
        if proc:
            proc.check_alive()
            proc.stop()
        out[f"{n}/{driver}"] = runs
        log(f"idle {n} {driver}: {runs}")
    return out


def reaction(bench, count, reps, log):
    """Scenario 2: Samples created one at a time; create returned -> ConfigMap seen by our own watch."""
    out = {}
    for driver in ("floor", "minimal", "poll", "watch", "peer"):
        out[driver] = []
        for rep in range(reps):
            ns = f"bench-react-{driver}-{rep}"
            fresh_namespace(bench.api, ns)
            floor = driver == "floor"
            seen = Seen()
            watch = Watch(bench.api, samples_path(ns) if floor else namespaced(ns, "configmaps"), seen)
            watch.wait_listed()
            proc = minimal = None
            if driver == "minimal":
                minimal = Floor(bench.api, ns, 1)
            elif not floor:
                proc = bench.start(driver, ns, f"reaction-{driver}-{rep}")
            bench.api.request("POST", samples_path(ns), sample_body("warm-up", "x"))
            seen.wait("warm-up", timeout=120)
            latencies = []
            for i in range(count):
                if driver == "poll":
                    # Spread creates evenly over the poll period: back to back, each would land just
                    # after the tick that found the previous one, and every wait would be nearly 1 s.
                    time.sleep(random.uniform(0, 1))
                name = f"r-{i:03}"
                bench.api.request("POST", samples_path(ns), sample_body(name, str(i)))
                created = time.monotonic()
                latencies.append(max(0.0, seen.wait(name, timeout=60) - created))
            watch.stop()
            if minimal:
                minimal.stop()
            if proc:
                proc.check_alive()
                proc.stop()
            delete_namespace(bench.api, ns)
            out[driver].append(latencies)
            log(f"reaction {driver} rep {rep}: median {sorted(latencies)[len(latencies) // 2] * 1000:.1f} ms")
    return out


class Floor:
    """The minimal client of the reaction scenario: for each new Sample, apply its ConfigMap, record an
    Event and write its status, with `concurrency` workers, and read nothing but one watch on Samples."""

    def __init__(self, api, ns, concurrency):
        self.api, self.ns = api, ns
        self.todo = queue.Queue()
        self.workers = [threading.Thread(target=self._work, daemon=True) for _ in range(concurrency)]
        for w in self.workers:
            w.start()
        self.watch = Watch(api, samples_path(ns), self._seen)
        self.watch.wait_listed()

    def _seen(self, kind, obj, _at):
        if kind == "ADDED" and not is_ready(obj):
            self.todo.put(obj)

    def _work(self):
        while (sample := self.todo.get()) is not None:
            try:
                self._write(sample)
            except ApiError as err:
                print(f"floor: {err}")

    def _write(self, sample):
        meta = sample["metadata"]
        name, uid = meta["name"], meta["uid"]
        owner = {"apiVersion": sample["apiVersion"], "kind": "Sample", "name": name, "uid": uid,
                 "controller": True, "blockOwnerDeletion": True}
        cm = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": name, "namespace": self.ns, "ownerReferences": [owner],
                           "labels": dict(MANAGED, **{"samples.example.com/name": name})},
              "data": {"testString": sample.get("testString", "")}}
        self.api.apply(f"{namespaced(self.ns, 'configmaps')}/{name}", cm, "floor")
        now = datetime.datetime.now(datetime.timezone.utc)
        event = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
                 "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": self.ns},
                 "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "reportingController": "floor",
                 "reportingInstance": "bench", "action": "Reconcile", "reason": "ConfigMapCreated",
                 "note": f"ConfigMap {name} created", "type": "Normal",
                 "regarding": {"apiVersion": sample["apiVersion"], "kind": "Sample", "name": name,
                               "namespace": self.ns, "uid": uid}}
        self.api.request("POST", namespaced(self.ns, "events", "events.k8s.io/v1"), event)
        status = {"apiVersion": sample["apiVersion"], "kind": "Sample", "metadata": {"name": name, "namespace": self.ns},
                  "status": {"observedGeneration": meta.get("generation", 1), "conditions": [{
                      "type": "Ready", "status": "True", "reason": "ConfigMapReady",
                      "message": f"ConfigMap {self.ns}/{name} holds testString",
                      "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                      "observedGeneration": meta.get("generation", 1)}]}}
        self.api.apply(f"{samples_path(self.ns)}/{name}/status", status, "floor")

    def stop(self):
        self.watch.stop()
        for _ in self.workers:
            self.todo.put(None)


# Concurrent creators of a burst, as in every other scenario's bursts.
CREATORS = 16
BEFORE_LABEL = "samplectl watch at 2e8ffbe, before the compact caches, concurrency 8"
CONVERGENCE_SETUPS = [
    # (label, driver, options)
    ("samplectl watch, concurrency 8 (default)", "watch", {"concurrency": 8}),
    ("samplectl watch, concurrency 32", "watch", {"concurrency": 32}),
    # samplectl before the watch driver's compact caches (scripts/bench builds it), for the burst pace
    # before and after them in one run.
    (BEFORE_LABEL, "watch-before", {"concurrency": 8}),
    ("controller-runtime, 1 worker (default)", "peer", {}),
    ("controller-runtime, 8 workers", "peer", {"workers": 8}),
    ("floor (compiled), 32 workers", "floor", {"workers": 32}),
]


def convergence(bench, sizes, reps, log, only_ours=()):
    """Scenario 3: n Samples created in one burst with the controller already running; time from the
    first create to the last Sample reported Ready, as our own watch on Samples sees it. For the sizes in
    `only_ours`, samplectl's defaults and the floor only."""
    out = {}
    for n in sizes:
        for label, driver, opts in CONVERGENCE_SETUPS:
            if n in only_ours and not (driver in ("floor", "watch-before")
                                       or label.endswith("(default)") and driver == "watch"):
                continue
            if driver == "watch-before" and "samplectl-before" not in bench.bins:
                continue
            runs = []
            for rep in range(reps.get(n, 1)):
                ns = f"bench-converge-{n}-{rep}"
                fresh_namespace(bench.api, ns)
                ready = Seen(is_ready)
                watch = Watch(bench.api, samples_path(ns), ready)
                watch.wait_listed()
                if driver == "floor":
                    # The compiled floor (bench/peers/floor) sends the creates itself, each followed at
                    # once by the three writes; its warm-up is one Sample of its own.
                    proc = None
                    bench.run_floor(ns, "warm-up-", 1, opts["workers"])
                    started = time.monotonic()
                    bench.run_floor(ns, "c-", n, opts["workers"])
                    created = time.monotonic() - started
                else:
                    proc = bench.start(driver, ns, f"converge-{n}-{driver}-{rep}", **opts)
                    bench.api.request("POST", samples_path(ns), sample_body("warm-up", "x"))
                    ready.wait("warm-up", timeout=120)
                    started = time.monotonic()
                    # The same creates as the floor's, from the same compiled client: Python creators
                    # would take CPU from the API server that the floor's own creates do not.
                    bench.run_floor(ns, "c-", n, CREATORS, creates_only=True)
                    created = time.monotonic() - started
                done = ready.wait_count(n + 1, timeout=3600) - started
                peak = proc.peak_rss_mib() if proc else None
                watch.stop()
                if proc:
                    proc.check_alive()
                    proc.stop()
                delete_namespace(bench.api, ns)
                runs.append({"seconds": done, "created_in": created, "peak_rss_mib": peak})
                log(f"convergence {n} {label} rep {rep}: {done:.1f}s (creates took {created:.1f}s)")
            out[f"{n}/{label}"] = runs
    return out


def listing(bench, objects, runs, log):
    """Scenario 4: `samplectl list` against `kubectl get` on many ConfigMaps, wall time and peak memory."""
    ns = "bench-list"
    fresh_namespace(bench.api, ns)

    def create(i):
        bench.api.request("POST", namespaced(ns, "configmaps"), {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"bench-{i:05}", "labels": {"app": "bench"}},
            "data": {"index": str(i), "text": "x" * 64}})
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(create, range(objects)))
    cases = {
        "table": ([bench.bins["samplectl"], "list", "configmaps", "-n", ns],
                  [bench.bins["kubectl"], "get", "configmaps", "-n", ns]),
        "-o json": ([bench.bins["samplectl"], "list", "configmaps", "-n", ns, "-o", "json"],
                    [bench.bins["kubectl"], "get", "configmaps", "-n", ns, "-o", "json"]),
    }
    out = {}
    for output, (ours, theirs) in cases.items():
        for tool, cmd in (("samplectl", ours), ("kubectl", theirs)):
            timed(cmd, bench.env)  # warm-up: discovery cache, page cache
            out[f"{output}/{tool}"] = [timed(cmd, bench.env) for _ in range(runs)]
            log(f"list {output} {tool}: {out[f'{output}/{tool}']}")
    delete_namespace(bench.api, ns)
    return out


def timed(cmd, env):
    done = subprocess.run(["/usr/bin/time", "-f", "%e %M", *cmd], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=True)
    wall, rss_kb = done.stderr.strip().splitlines()[-1].split()
    return {"seconds": float(wall), "peak_rss_mib": int(rss_kb) / 1024}


def footprint(bench, sizes, reps, log):
    """Scenario 5: resident memory of samplectl watch and the peer once they hold n converged Samples
    (and their ConfigMaps) and have gone quiet."""
    out = {}
    for n in sizes:
        ns = f"bench-memory-{n}"
        fresh_namespace(bench.api, ns)
        bench.create_samples(ns, [f"m-{i:05}" for i in range(n)])
        bench.converge(ns)
        for driver in ("watch", "peer"):
            runs = []
            for rep in range(reps):
                proc = bench.start(driver, ns, f"memory-{n}-{driver}-{rep}")
                time.sleep(3)
                proc.settle()
                runs.append({"rss_mib": proc.rss_mib(), "peak_rss_mib": proc.peak_rss_mib()})
                proc.stop()
            out[f"{n}/{driver}"] = runs
            log(f"memory {n} {driver}: {runs}")
        delete_namespace(bench.api, ns)
    return out


RESTART_SETUPS = [
    # (label, driver, options)
    ("samplectl poll", "poll", {}),
    ("samplectl watch", "watch", {}),
    ("controller-runtime, 8 workers", "peer", {"workers": 8}),
]


def etcd_bump(cluster_dir):
    """Writes a key no resource lives under, as the other clients of a busy cluster keep writing: etcd's
    revision moves on while the API server restarts, so a watch resumed across the restart gets 410 Gone
    and relists, as it does in any real cluster."""
    ports = dict(line.split("=", 1) for line in open(os.path.join(cluster_dir, "ports")).read().split())
    body = json.dumps({"key": base64.b64encode(b"/samplectl-bench/bump").decode(), "value": "eA=="}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", int(ports["ETCD_PORT"]), timeout=5)
    try:
        conn.request("POST", "/v3/kv/put", body=body)
        conn.getresponse().read()
    finally:
        conn.close()


def restart_apiserver(bench):
    """Restarts kube-apiserver while another client keeps writing to etcd, so that every watch resumed
    across the restart ends in 410 Gone and a relist."""
    restarting = threading.Event()

    def bump():
        while not restarting.is_set():
            etcd_bump(bench.api.cluster_dir)
            time.sleep(0.1)
    bumper = threading.Thread(target=bump)
    bumper.start()
    subprocess.run(["scripts/local-cluster", "restart", "apiserver"], env=bench.env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    restarting.set()
    bumper.join()


def create_through_outage(api, ns, names, threads, created):
    """Creates each Sample, retrying through an API server outage until it exists; `created` counts them."""
    lock = threading.Lock()

    def create(name):
        while True:
            try:
                api.request("POST", samples_path(ns), sample_body(name, f"value of {name}"))
                break
            except ApiError as err:
                if err.status == 409:  # created before the connection broke
                    break
                if err.status < 500:
                    raise
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.2)
        with lock:
            created[0] += 1
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(create, names))


def ready_count(api, ns):
    """How many Samples in `ns` are Ready, by a list (a watch would not survive the restart)."""
    while True:
        try:
            items = api.request("GET", samples_path(ns))["items"]
            return len(items), sum(1 for s in items if is_ready(s))
        except (OSError, http.client.HTTPException, ApiError):
            time.sleep(0.5)


def restart(bench, count, reps, settle, log):
    """Scenario 6: `count` Samples created in one burst (4 clients) with the controller running; once a
    third of them exist the API server is restarted, with writes to etcd going on meanwhile; the creates cut
    off are sent again until every Sample exists. Measured: how many Samples are still not Ready `settle`
    seconds after the last create, and the time from the first create until every one is Ready."""
    out = {}
    for label, driver, opts in RESTART_SETUPS:
        runs = []
        for rep in range(reps):
            ns = f"bench-restart-{driver}-{rep}"
            fresh_namespace(bench.api, ns)
            proc = bench.start(driver, ns, f"restart-{driver}-{rep}", **opts)
            bench.api.request("POST", samples_path(ns), sample_body("warm-up", "x"))
            while ready_count(bench.api, ns)[1] < 1:
                time.sleep(0.2)
            created = [0]
            started = time.monotonic()
            creator = threading.Thread(
                target=create_through_outage,
                args=(bench.api, ns, [f"r-{i:05}" for i in range(count)], 4, created))
            creator.start()
            while created[0] < count // 3:
                time.sleep(0.01)
            restart_apiserver(bench)
            creator.join()
            created_at = time.monotonic()
            done = None
            while time.monotonic() < created_at + settle:
                total, ready = ready_count(bench.api, ns)
                if total == count + 1 and ready == total:
                    done = time.monotonic() - started
                    break
                time.sleep(0.5)
            total, ready = ready_count(bench.api, ns)
            proc.check_alive()
            proc.stop()
            delete_namespace(bench.api, ns)
            runs.append({"unreconciled": total - ready, "seconds": done})
            seconds = "never" if done is None else f"{done:.1f}s"
            log(f"restart {label} rep {rep}: {total - ready} of {total} not Ready after {settle}s; all Ready: {seconds}")
        out[label] = runs
    return out


def sizing(bench, sizes, value_kib, log):
    """Scenario 7: what the shipped Deployment's memory limit holds. `samplectl reconcile --watch` (all
    namespaces, as the Deployment runs it) over n Samples whose testString is `value_kib` KiB, so each
    Sample and each ConfigMap is that big: resident memory once converged, and the peak (VmHWM) after a
    relist of everything, when the watcher holds the old store and the new list at once (an API server
    restart with etcd moving on, as in scenario 6)."""
    out = {}
    value = "x" * (value_kib * 1024)
    for n in sizes:
        ns = f"bench-sizing-{n}"
        fresh_namespace(bench.api, ns)

        def create(i):
            bench.api.request("POST", samples_path(ns), sample_body(f"s-{i:05}", value))
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            list(pool.map(create, range(n)))
        proc = Proc([bench.bins["samplectl"], "reconcile", "--watch"], bench.env,
                    os.path.join(bench.log_dir, f"sizing-{n}.log"))
        while ready_count(bench.api, ns)[1] < n:
            time.sleep(1)
        time.sleep(3)
        proc.settle()
        converged, startup_peak = proc.rss_mib(), proc.peak_rss_mib()
        restart_apiserver(bench)
        # The relists, and every Sample looked at again.
        time.sleep(20)
        proc.settle()
        run = {"rss_mib": proc.rss_mib(), "converged_rss_mib": converged, "startup_peak_rss_mib": startup_peak,
               "peak_rss_mib": proc.peak_rss_mib(), "ready": ready_count(bench.api, ns)[1]}
        proc.check_alive()
        proc.stop()
        delete_namespace(bench.api, ns)
        out[str(n)] = run
        log(f"sizing {n} Samples of {value_kib} KiB: {run}")
    return out


# The Sample controller as a hook (examples/hooks/sample/sync.py): the same writes as the built-in sync, with
# a Python process per reconcile. The interpreter is named by its real path: `python3` on PATH may be a
# version manager's shim (pyenv's is a shell script), which would be measured instead of the hook.
PYTHON = os.path.realpath(sys.executable)
SAMPLE_HOOK = ["--gvr", "example.com/v1alpha1/samples", "--child", "v1/configmaps",
               "--hook", f"{PYTHON} -S examples/hooks/sample/sync.py"]
# The same hook long-running (`--hook-process`): one Python process serving a request per line, with up to
# --concurrency of them while every one is busy.
SAMPLE_HOOK_PROCESS = SAMPLE_HOOK[:-2] + ["--hook-process", f"{PYTHON} -S examples/hooks/sample/sync.py --lines"]
HOOK_SETUPS = [("built-in", []), ("hook", SAMPLE_HOOK), ("hook-process", SAMPLE_HOOK_PROCESS)]


def one_at_a_time(bench, ns, count, start, warm_up_timeout=120, marks=None):
    """Reaction in a fresh namespace `ns`: the controller `start(ns)` gives, one warm-up Sample, then `count`
    Samples created one at a time, each timed from its create returning to its ConfigMap seen by the bench's
    own watch. The namespace is deleted after; returns the latencies in seconds. With `marks`, a dict, each
    Sample's name is mapped to the wall-clock time its create returned and its latency."""
    fresh_namespace(bench.api, ns)
    seen = Seen()
    watch = Watch(bench.api, namespaced(ns, "configmaps"), seen)
    watch.wait_listed()
    proc = start(ns)
    bench.api.request("POST", samples_path(ns), sample_body("warm-up", "x"))
    seen.wait("warm-up", timeout=warm_up_timeout)
    latencies = []
    for i in range(count):
        name = f"r-{i:03}"
        bench.api.request("POST", samples_path(ns), sample_body(name, str(i)))
        created, wall = time.monotonic(), time.time()
        latencies.append(max(0.0, seen.wait(name, timeout=60) - created))
        if marks is not None:
            marks[name] = (wall, latencies[-1])
    watch.stop()
    proc.check_alive()
    proc.stop()
    delete_namespace(bench.api, ns)
    return latencies


def burst(bench, ns, n, start, warm_up_timeout=120):
    """Convergence in a fresh namespace `ns`: the controller `start(ns)` gives, one warm-up Sample Ready, then
    `n` Samples created in one burst; returns the seconds until all are Ready and the controller, still
    running, for the caller to measure and stop (and the namespace to delete)."""
    fresh_namespace(bench.api, ns)
    ready = Seen(is_ready)
    watch = Watch(bench.api, samples_path(ns), ready)
    watch.wait_listed()
    proc = start(ns)
    bench.api.request("POST", samples_path(ns), sample_body("warm-up", "x"))
    ready.wait("warm-up", timeout=warm_up_timeout)
    started = time.monotonic()
    bench.create_samples(ns, [f"c-{i:05}" for i in range(n)])
    done = ready.wait_count(n + 1, timeout=3600) - started
    watch.stop()
    return done, proc


def hook_call_ms(runs=20):
    """What one call of the sample hook costs on its own: a Python process started, fed one request, read."""
    request = json.dumps({"parent": {"apiVersion": "example.com/v1alpha1", "kind": "Sample",
                                     "metadata": {"name": "s", "namespace": "ns", "generation": 1},
                                     "testString": "x"},
                          "children": {"ConfigMap.v1": {}}, "finalizing": False}).encode()
    took = []
    for _ in range(runs):
        t0 = time.monotonic()
        subprocess.run([PYTHON, "-S", "examples/hooks/sample/sync.py"], input=request, check=True,
                       stdout=subprocess.DEVNULL)
        took.append((time.monotonic() - t0) * 1000)
    return took


def hooks(bench, count, sizes, window, log):
    """Scenario 8: the built-in Sample sync against the same controller run as a hook, both with --watch:
    reaction time (Samples created one at a time), convergence of n Samples created in a burst, and the
    requests a converged controller sends per minute."""
    out = {"call_ms": hook_call_ms()}
    log(f"hooks: one call of the sample hook, median {sorted(out['call_ms'])[len(out['call_ms']) // 2]:.1f} ms")
    audit = os.path.join(bench.api.cluster_dir, "audit.log")
    for label, extra in HOOK_SETUPS:
        latencies = one_at_a_time(
            bench, f"bench-hook-react-{label}", count,
            lambda ns: bench.start("watch", ns, f"hooks-reaction-{label}", extra=extra))
        out[f"reaction/{label}"] = latencies
        log(f"hooks reaction {label}: median {sorted(latencies)[len(latencies) // 2] * 1000:.1f} ms")

        for n in sizes:
            ns = f"bench-hook-converge-{n}-{label}"
            done, proc = burst(bench, ns, n, lambda ns: bench.start("watch", ns, f"hooks-converge-{n}-{label}",
                                                                    extra=extra))
            time.sleep(5)
            offset, start = os.path.getsize(audit), datetime.datetime.now(datetime.timezone.utc)
            time.sleep(window)
            end = datetime.datetime.now(datetime.timezone.utc)
            with open(audit) as f:
                f.seek(offset)
                verbs = audit_verbs(f, "watch", start, end)
            per_minute = sum(verbs.values()) * 60.0 / (end - start).total_seconds()
            proc.check_alive()
            peak = proc.peak_rss_mib()
            proc.stop()
            delete_namespace(bench.api, ns)
            out[f"converge/{n}/{label}"] = {"seconds": done, "idle_requests_per_min": per_minute,
                                             "peak_rss_mib": peak}
            log(f"hooks convergence {n} {label}: {done:.1f}s; idle {per_minute:.1f} requests/min")
    return out
