"""Scenario 9: metacontroller v4.17.2 as a peer. Both engines run the same CompositeController objects,
stored in the cluster, with the same URL hook (examples/hooks/sample/sync.py served over HTTP by this
module): samplectl as `reconcile --from-cluster --watch`, metacontroller as its own binary out of the
cluster with the kubeconfig. One engine runs at a time. Rows: reaction time, convergence of n Samples
created in a burst, requests per minute once converged, resident memory with ten controllers loaded; and
samplectl's built-in Sample sync beside the same controller as a URL hook."""

import concurrent.futures
import datetime
import http.server
import importlib.util
import json
import os
import socket
import subprocess
import threading
import time

from kube import delete_namespace, fresh_namespace, namespaced
from procs import Proc
from scenarios import Floor, burst, one_at_a_time, requests_over

HOOK_PORT = 18099
HOOK_URL = f"http://127.0.0.1:{HOOK_PORT}/sync"
CC = "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
# metacontroller limits its own client to 5 requests/s (bursts of 10) unless told otherwise; lifted here so
# that the engines are compared, not a throttle (samplectl's client has none).
METACONTROLLER_ARGS = ["--metrics-address=0", "--health-probe-bind-address=0", "--discovery-interval=20s",
                       "--client-go-qps=1000", "--client-go-burst=1000", "--zap-log-level=info"]


def _sample_sync():
    spec = importlib.util.spec_from_file_location("sample_sync", "examples/hooks/sample/sync.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.sync


class HookServer:
    """The sample hook as a webhook, in this process, on threads."""

    def __init__(self):
        sync = _sample_sync()
        # When each parent's calls came and were answered, by the bench's clock: {(namespace, name):
        # [(received, answered), ...]}. Taken around the whole exchange, so that the engines' stages can be
        # told apart from the hook's own time.
        calls = self.calls = {}

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                super().setup()
                # Headers and body go out in two writes; without this, Nagle's algorithm holds the body
                # for the client's delayed ACK (40 ms) on every call, whichever engine calls.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_POST(self):
                received = time.time()
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                body = json.dumps(sync(request)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                meta = request.get("parent", {}).get("metadata", {})
                calls.setdefault((meta.get("namespace"), meta.get("name")), []).append((received, time.time()))

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", HOOK_PORT), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def controller(name, group, version, plural):
    return {"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": name},
            # The parents have no spec.selector, which metacontroller requires unless it makes one.
            "spec": {"generateSelector": True,
                     "parentResource": {"apiVersion": f"{group}/{version}", "resource": plural},
                     "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                                         "updateStrategy": {"method": "InPlace"}}],
                     "hooks": {"sync": {"webhook": {"url": HOOK_URL}}}}}


def kind_crd(i):
    """One of the ten parent types of the memory row: like a Sample, any fields, a status subresource."""
    plural = f"parents{i}"
    return plural, {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.bench.example.com"},
        "spec": {"group": "bench.example.com", "scope": "Namespaced",
                 "names": {"kind": f"Parent{i}", "plural": plural, "singular": f"parent{i}"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object",
                                                              "x-kubernetes-preserve-unknown-fields": True}}}]}}


# samplectl's trace of each reaction's stages (src/controller/stages.rs), in JSON log lines with their times.
STAGES_ENV = {"RUST_LOG": "warn,samplectl=info,samplectl::stages=trace"}
STAGES = ["received", "queued", "started", "synced", "create sent", "create answered"]


def start(bench, engine, ns, label, stages=False):
    env = bench.env
    if engine == "samplectl":
        args = [bench.bins["samplectl"], "reconcile", "--from-cluster", "--watch", "-n", ns]
    elif engine == "built-in":
        args = [bench.bins["samplectl"], "reconcile", "--watch", "-n", ns]
    else:
        args = [bench.bins["metacontroller"], "--kubeconfig", bench.env["KUBECONFIG"], *METACONTROLLER_ARGS]
    if stages and engine != "metacontroller":
        args.extend(["--log-format", "json"])
        env = dict(bench.env, **STAGES_ENV)
    return Proc(args, env, os.path.join(bench.log_dir, f"metacontroller-{label}.log"))


def stage_times(log_path, marks):
    """Each Sample's stages from samplectl's JSON log, as seconds after its create returned, with `seen`
    (its ConfigMap seen by the bench) last: {name: {stage: seconds}}. The first time each stage is reached
    counts (a later one is a re-reconcile of the same parent, or its ConfigMap of the same name)."""
    reached = {}
    with open(log_path) as f:
        for line in f:
            if '"samplectl::stages"' not in line:
                continue
            entry = json.loads(line)
            at = datetime.datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00")).timestamp()
            reached.setdefault(entry["name"], {}).setdefault(entry["stage"], at)
    out = {}
    for name, (created, latency) in marks.items():
        times = {stage: at - created for stage, at in reached.get(name, {}).items()}
        times["seen"] = latency
        out[name] = times
    return out


def put_controllers(api, controllers):
    """Stores exactly these CompositeControllers (by name), deleting any other."""
    existing = api.request("GET", CC)["items"]
    wanted = {c["metadata"]["name"] for c in controllers}
    for cc in existing:
        if cc["metadata"]["name"] not in wanted:
            api.request("DELETE", f"{CC}/{cc['metadata']['name']}")
    for cc in controllers:
        api.apply(f"{CC}/{cc['metadata']['name']}", cc, "samplectl-bench")


def engines(bench):
    return ["samplectl", "metacontroller"] if "metacontroller" in bench.bins else ["samplectl"]


def metacontroller(bench, count, size, controllers, per_controller, window, log, runs=1):
    if "metacontroller" not in bench.bins:
        log("metacontroller: no binary (set METACONTROLLER_SRC to a v4.17.2 checkout); only samplectl is measured")
    subprocess.run([bench.bins["samplectl"], "install-crd", "--metacontroller"], env=bench.env, check=True,
                   stdout=subprocess.DEVNULL)
    hook = HookServer()
    out = {"engines": engines(bench), "metacontroller_args": METACONTROLLER_ARGS}
    try:
        put_controllers(bench.api, [controller("samples", "example.com", "v1alpha1", "samples")])
        for engine in engines(bench) + ["built-in"]:
            out[engine] = samples_rows(bench, engine, count, runs, size, window, log, hook)
        minimal, _, neutral = reaction_runs(bench, "minimal", count, runs, log)
        out["minimal"] = {"reaction_runs": minimal, "neutral_stages": neutral}
        put_controllers(bench.api, [])
        for i in range(controllers):
            plural, crd = kind_crd(i)
            bench.api.apply(f"{CRDS}/{plural}.bench.example.com", crd, "samplectl-bench")
        time.sleep(3)
        put_controllers(bench.api, [controller(f"parents{i}", "bench.example.com", "v1", f"parents{i}")
                                    for i in range(controllers)])
        for engine in engines(bench):
            out[engine]["ten_controllers"] = ten_controllers(bench, engine, controllers, per_controller, log)
    finally:
        put_controllers(bench.api, [])
        hook.stop()
    return out


class Minimal:
    """The minimal client of scenario 2 (watch Samples, apply each one's ConfigMap, read nothing), in the
    bench's process, started and stopped as an engine is."""

    def __init__(self, bench, ns):
        self.floor = Floor(bench.api, ns, 1)

    def check_alive(self):
        pass

    def stop(self):
        self.floor.stop()


def reaction_runs(bench, engine, count, runs, log, hook=None):
    """`runs` reaction runs, each in a fresh namespace with the engine started afresh: the latencies of each,
    samplectl's own stage trace (its last run), and every run's engine-neutral trace (`neutral_stages`)."""
    out, stages, neutral = [], None, {}
    audit = os.path.join(bench.api.cluster_dir, "audit.log")
    for run in range(runs):
        # samplectl's stages are traced in its last run only, so that the runs before show what tracing costs.
        traced = engine == "samplectl" and run == runs - 1
        label = f"reaction-{engine}-{run}"
        ns = f"bench-mc-react-{engine}-{run}"

        def begin(ns):
            return Minimal(bench, ns) if engine == "minimal" else start(bench, engine, ns, label, stages=traced)
        marks = {}
        offset = os.path.getsize(audit) if os.path.exists(audit) else None
        latencies = one_at_a_time(bench, ns, count, begin, warm_up_timeout=180, marks=marks)
        if traced:
            stages = stage_times(os.path.join(bench.log_dir, f"metacontroller-{label}.log"), marks)
        if offset is not None:
            calls = hook.calls if hook else {}
            for name, times in neutral_stages(audit, offset, ns, marks, calls).items():
                neutral[f"{run}/{name}"] = times
        out.append(latencies)
        log(f"metacontroller scenario, {engine} reaction run {run}: median "
            f"{sorted(latencies)[len(latencies) // 2] * 1000:.1f} ms")
    return out, stages, neutral


# The stages every engine's reaction goes through, as seen from outside it: by the hook server, by the API
# server's audit log and by the bench's watch.
NEUTRAL_STAGES = ["hook called", "hook answered", "create received", "create answered", "seen"]


def neutral_stages(audit, offset, ns, marks, calls):
    """Each Sample's reaction in `ns`, as seconds after its create returned to the bench: when the hook
    server got the engine's first call for it and answered, when the API server received its ConfigMap's
    first write and answered it (the audit log's ResponseComplete events after `offset`: requestReceived
    and stage timestamps), and when the bench's watch saw the ConfigMap. {name: {stage: seconds}}; the
    same clock throughout (one machine)."""
    writes = {}
    with open(audit) as f:
        f.seek(offset)
        for line in f:
            if '"ResponseComplete"' not in line or f'"namespace":"{ns}"' not in line:
                continue
            event = json.loads(line)
            ref = event.get("objectRef") or {}
            if (event.get("stage") != "ResponseComplete" or ref.get("namespace") != ns
                    or ref.get("resource") != "configmaps" or event.get("verb") not in ("create", "patch")):
                continue
            times = [datetime.datetime.fromisoformat(event[k]).timestamp()
                     for k in ("requestReceivedTimestamp", "stageTimestamp")]
            writes.setdefault(ref.get("name"), times)
    out = {}
    for name, (created, latency) in marks.items():
        times = {"seen": latency}
        if (ns, name) in calls:
            times["hook called"], times["hook answered"] = (t - created for t in calls[(ns, name)][0])
        if name in writes:
            times["create received"], times["create answered"] = (t - created for t in writes[name])
        out[name] = times
    return out


def samples_rows(bench, engine, count, runs, size, window, log, hook):
    """Reaction (Samples created one at a time: create returned -> ConfigMap seen, over `runs` runs), then
    convergence of `size` Samples created in a burst (-> all Ready), requests per minute after that, and
    memory."""
    rows = {}
    rows["reaction_runs"], rows["stages"], rows["neutral_stages"] = reaction_runs(bench, engine, count, runs, log,
                                                                                  hook)
    rows["reaction"] = [x for run in rows["reaction_runs"] for x in run]

    # The burst `runs` times too (a single one varies by a second or two here); the last run's engine,
    # still running, is measured idle.
    rows["converge_runs"] = []
    for run in range(runs):
        if run:
            proc.stop()
            delete_namespace(bench.api, ns)
        ns = f"bench-mc-converge-{engine}-{run}"
        seconds, proc = burst(bench, ns, size, lambda ns: start(bench, engine, ns, f"converge-{engine}-{run}"),
                              warm_up_timeout=180)
        rows["converge_runs"].append(seconds)
    rows["converge_seconds"] = sorted(rows["converge_runs"])[len(rows["converge_runs"]) // 2]
    proc.settle()
    rows["idle_requests_per_min"] = idle_requests(bench, engine, window)
    rows["rss_mib"] = proc.rss_mib()
    rows["peak_rss_mib"] = proc.peak_rss_mib()
    proc.check_alive()
    proc.stop()
    delete_namespace(bench.api, ns)
    log(f"metacontroller scenario, {engine}: {size} converged in {rows['converge_seconds']:.1f}s; "
        f"idle {rows['idle_requests_per_min']:.1f} requests/min; {rows['rss_mib']:.0f} MiB")
    return rows


def idle_requests(bench, engine, window):
    """Requests per minute the engine sends while nothing changes."""
    return requests_over(bench, "metacontroller" if engine == "metacontroller" else "watch", window)[0]


def ten_controllers(bench, engine, controllers, per_controller, log):
    """`controllers` CompositeControllers over as many parent types, `per_controller` parents each, all
    converged: resident memory once quiet, and how long they took."""
    ns = f"bench-mc-ten-{engine}"
    fresh_namespace(bench.api, ns)
    for i in range(controllers):
        path = namespaced(ns, f"parents{i}", "bench.example.com/v1")
        bench.api.request("POST", path, {"apiVersion": "bench.example.com/v1", "kind": f"Parent{i}",
                                         "metadata": {"name": f"warm-up-{i}"}, "testString": "x"})
    parents = [(i, j) for i in range(controllers) for j in range(per_controller)]

    def create(pair):
        i, j = pair
        bench.api.request("POST", namespaced(ns, f"parents{i}", "bench.example.com/v1"),
                          {"apiVersion": "bench.example.com/v1", "kind": f"Parent{i}",
                           "metadata": {"name": f"p{i}-{j:04}"}, "testString": f"{i}/{j}"})

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(create, parents))
    started = time.monotonic()
    proc = start(bench, engine, ns, f"ten-{engine}")
    total = len(parents) + controllers
    deadline = time.monotonic() + 1800
    while True:
        have = len(bench.api.request("GET", namespaced(ns, "configmaps") + "?labelSelector=samples.example.com/name")
                   ["items"])
        if have >= total:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{engine}: {have} of {total} ConfigMaps")
        proc.check_alive()
        time.sleep(1)
    took = time.monotonic() - started
    proc.settle()
    rss = proc.rss_mib()
    proc.stop()
    delete_namespace(bench.api, ns)
    log(f"metacontroller scenario, {engine} with {controllers} controllers: {total} parents in {took:.1f}s, "
        f"{rss:.0f} MiB")
    return {"parents": total, "seconds": took, "rss_mib": rss}
