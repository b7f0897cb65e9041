"""Scenario 12: kro v0.9.4 as a peer. Both engines run the same ResourceGraphDefinition, stored in the
cluster: an instance API with three children in two waves (a ConfigMap; a Deployment and a headless
Service that read its name) and a status field. samplectl runs as `reconcile --from-cluster --watch`, kro
as its own binary out of the cluster with the kubeconfig, once with its defaults and once tuned (workers,
client and queue limits raised). One engine at a time; each starts from no instance CRD. Rows: reaction
(instance created -> seen ACTIVE, which kro and samplectl both say only once every child exists), a burst
of instances to ACTIVE, requests per minute once converged, resident memory; then resident memory with a
few instances, without and with 200 large unrelated CRDs installed (kro #724)."""

import concurrent.futures
import contextlib
import json
import os
import subprocess
import time

from kube import ApiError, Watch, delete_namespace, fresh_namespace, namespaced
from procs import Proc
from scenarios import Seen, requests_over

RGDS = "/apis/kro.run/v1alpha1/resourcegraphdefinitions"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
RGD_NAME = "bench-app"
GROUP_VERSION = "kro.run/v1alpha1"
PLURAL = "benchapps"
INSTANCE_CRD = f"{PLURAL}.kro.run"
BIG_CRD_LABEL = "samplectl-bench=big-crd"
# Out of the cluster: no metrics or probe listeners (their default ports may be taken); client and
# queue limits are kro's own unless tuned.
KRO_ARGS = ["--metrics-bind-address=0", "--health-probe-bind-address=0"]
KRO_TUNED = ["--dynamic-controller-concurrent-reconciles=16", "--client-qps=1000", "--client-burst=1000",
             "--dynamic-controller-rate-limiter-rate-limit=1000", "--dynamic-controller-rate-limiter-burst-limit=1000"]
ENGINES = {
    "samplectl": lambda bins: [bins["samplectl"], "reconcile", "--from-cluster", "--watch"],
    "kro": lambda bins: [bins["kro"], *KRO_ARGS],
    "kro-tuned": lambda bins: [bins["kro"], *KRO_ARGS, *KRO_TUNED],
}

RGD = {
    "apiVersion": "kro.run/v1alpha1", "kind": "ResourceGraphDefinition", "metadata": {"name": RGD_NAME},
    "spec": {
        "schema": {
            "apiVersion": "v1alpha1", "kind": "BenchApp",
            "spec": {"image": 'string | default="nginx:1.27"', "port": "integer | default=8080",
                     "greeting": 'string | default="hello"'},
            "status": {"configName": "${config.metadata.name}"},
        },
        "resources": [
            {"id": "config", "template": {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "${schema.metadata.name}-config"},
                "data": {"greeting": "${schema.spec.greeting}", "port": "${string(schema.spec.port)}"}}},
            {"id": "deployment", "template": {
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "${schema.metadata.name}"},
                "spec": {"replicas": 1,
                         "selector": {"matchLabels": {"app": "${schema.metadata.name}"}},
                         "template": {"metadata": {"labels": {"app": "${schema.metadata.name}"}},
                                      "spec": {"containers": [{
                                          "name": "web", "image": "${schema.spec.image}",
                                          "envFrom": [{"configMapRef": {"name": "${config.metadata.name}"}}],
                                          "ports": [{"containerPort": "${schema.spec.port}"}]}]}}}}},
            {"id": "service", "template": {
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "${schema.metadata.name}",
                             "annotations": {"bench/config": "${config.metadata.name}"}},
                # Headless: the bench cluster's service range is a /24.
                "spec": {"clusterIP": "None", "selector": {"app": "${schema.metadata.name}"},
                         "ports": [{"port": "${schema.spec.port}"}]}}},
        ],
    },
}


def instance(name):
    return {"apiVersion": GROUP_VERSION, "kind": "BenchApp", "metadata": {"name": name}, "spec": {}}


def active(obj):
    return (obj.get("status") or {}).get("state") == "ACTIVE"


def big_crd(i, fields=60):
    """An unrelated CRD of about 100 KiB, as large operators install by the hundred."""
    props = {f"field{j:02}": {"type": "object", "description": "A setting of this made-up API. " * 4,
                              "properties": {f"sub{k}": {"type": "string", "description": "One of its values. " * 6}
                                             for k in range(6)}}
             for j in range(fields)}
    plural = f"bigthings{i:03}"
    return plural, {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.bench.example.com", "labels": {"samplectl-bench": "big-crd"}},
        "spec": {"group": "bench.example.com", "scope": "Namespaced",
                 "names": {"kind": f"BigThing{i:03}", "plural": plural, "singular": f"bigthing{i:03}"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                   "spec": {"type": "object", "properties": props}}}}}]}}


class Engine:
    """One engine running the bench RGD: started, its RGD and instance CRD made ready, then stopped with
    the RGD, its instances and the CRD removed, so that the next one starts from nothing."""

    def __init__(self, bench, name, label):
        self.bench, self.name = bench, name
        bench.api.apply(f"{RGDS}/{RGD_NAME}", RGD, "samplectl-bench")
        self.proc = Proc(ENGINES[name](bench.bins), bench.env, os.path.join(bench.log_dir, f"kro-{label}.log"))
        deadline = time.monotonic() + 120
        while True:
            rgd = bench.api.request("GET", f"{RGDS}/{RGD_NAME}")
            if (rgd.get("status") or {}).get("state") == "Active" and bench.api.exists(f"{CRDS}/{INSTANCE_CRD}"):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name}: the RGD not Active after 120 s: {rgd.get('status')}")
            self.proc.check_alive()
            time.sleep(0.2)

    def stop(self, namespaces):
        self.proc.check_alive()
        self.proc.stop()
        api = self.bench.api
        # Nothing runs the finalizers any more: taken off, then everything deleted.
        unfinalize = lambda path: api.request("PATCH", path, {"metadata": {"finalizers": None}},
                                              content_type="application/merge-patch+json")
        for ns in namespaces:
            items = api.request("GET", namespaced(ns, PLURAL, GROUP_VERSION))["items"]
            paths = [namespaced(ns, PLURAL, GROUP_VERSION) + "/" + i["metadata"]["name"] for i in items]
            with concurrent.futures.ThreadPoolExecutor(16) as pool:
                list(pool.map(unfinalize, paths))
            delete_namespace(api, ns)
        unfinalize(f"{RGDS}/{RGD_NAME}")
        api.request("DELETE", f"{RGDS}/{RGD_NAME}")
        api.request("DELETE", f"{CRDS}/{INSTANCE_CRD}")
        while api.exists(f"{CRDS}/{INSTANCE_CRD}") or api.exists(f"{RGDS}/{RGD_NAME}"):
            time.sleep(0.5)


def create(api, ns, names, threads=16):
    def one(name):
        api.request("POST", namespaced(ns, PLURAL, GROUP_VERSION), instance(name))
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, names))


def children_of(api, ns, names):
    """How many of the instances' three children exist, counted by the bench (not the engine)."""
    configs = {i["metadata"]["name"] for i in api.request("GET", namespaced(ns, "configmaps"))["items"]}
    deployments = {i["metadata"]["name"] for i in api.request("GET", namespaced(ns, "deployments", "apps/v1"))["items"]}
    services = {i["metadata"]["name"] for i in api.request("GET", namespaced(ns, "services"))["items"]}
    return sum((f"{n}-config" in configs) + (n in deployments) + (n in services) for n in names)


@contextlib.contextmanager
def engine_in(bench, engine, ns, label):
    """`engine` running the bench RGD for instances in a fresh namespace `ns`, and the bench's own watch
    of them there (which instances it has seen ACTIVE); all of it removed after."""
    fresh_namespace(bench.api, ns)
    running = Engine(bench, engine, label)
    seen = Seen(active)
    watch = Watch(bench.api, namespaced(ns, PLURAL, GROUP_VERSION), seen)
    watch.wait_listed()
    try:
        yield running, seen
    finally:
        watch.stop()
        running.stop([ns])


def rows(bench, engine, count, size, window, log):
    """Reaction over `count` instances created one at a time, then `size` in a burst to ACTIVE, requests
    per minute and memory once converged."""
    out = {}
    ns = f"bench-kro-{engine}"
    with engine_in(bench, engine, ns, f"{engine}-rows") as (running, seen):
        create(bench.api, ns, ["warm-up"])
        seen.wait("warm-up", timeout=120)
        latencies = []
        for i in range(count):
            name = f"r-{i:03}"
            bench.api.request("POST", namespaced(ns, PLURAL, GROUP_VERSION), instance(name))
            created = time.monotonic()
            latencies.append(max(0.0, seen.wait(name, timeout=120) - created))
        out["reaction"] = latencies
        log(f"kro scenario, {engine} reaction: median {sorted(latencies)[len(latencies) // 2] * 1000:.0f} ms")

        names = [f"c-{i:05}" for i in range(size)]
        started = time.monotonic()
        create(bench.api, ns, names)
        out["converge_seconds"] = seen.wait_count(count + 1 + size, timeout=3600) - started
        out["children"] = children_of(bench.api, ns, names)
        running.proc.settle()
        agent = "kro" if engine.startswith("kro") else "watch"
        out["idle_requests_per_min"], out["idle_requests"] = requests_over(bench, agent, window)
        out["rss_mib"] = running.proc.rss_mib()
        out["peak_rss_mib"] = running.proc.peak_rss_mib()
        log(f"kro scenario, {engine}: {size} instances ACTIVE in {out['converge_seconds']:.1f}s "
            f"({out['children']} children); idle {out['idle_requests_per_min']:.1f} requests/min; "
            f"{out['rss_mib']:.0f} MiB")
    return out


def memory_with(bench, engine, few, label, log):
    """Resident memory once `few` instances are ACTIVE and the engine is quiet."""
    ns = f"bench-kro-mem-{engine}"
    with engine_in(bench, engine, ns, f"{engine}-{label}") as (running, seen):
        create(bench.api, ns, [f"m-{i:03}" for i in range(few)])
        seen.wait_count(few, timeout=600)
        running.proc.settle()
        rss = running.proc.rss_mib()
        peak = running.proc.peak_rss_mib()
    log(f"kro scenario, {engine} {label}: {rss:.0f} MiB (peak {peak:.0f})")
    return {"rss_mib": rss, "peak_rss_mib": peak}


def install_big_crds(bench, n):
    def one(i):
        plural, crd = big_crd(i)
        bench.api.apply(f"{CRDS}/{plural}.bench.example.com", crd, "samplectl-bench")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(n)))
    size = len(json.dumps(big_crd(0)[1]))
    return size


def remove_big_crds(bench):
    try:
        bench.api.request("DELETE", f"{CRDS}?labelSelector={BIG_CRD_LABEL}")
    except ApiError:
        pass


def kro(bench, count, size, window, few, big_crds, log):
    engines = ["samplectl", "kro", "kro-tuned"] if "kro" in bench.bins else ["samplectl"]
    if "kro" not in bench.bins:
        log("kro: no binary (its module could not be built); only samplectl is measured")
    subprocess.run([bench.bins["samplectl"], "install-crd", "--kro"], env=bench.env, check=True,
                   stdout=subprocess.DEVNULL)
    out = {"engines": engines, "kro_args": KRO_ARGS, "kro_tuned_args": KRO_TUNED, "few": few, "big_crds": big_crds}
    for engine in engines:
        out[engine] = rows(bench, engine, count, size, window, log)
    for engine in engines:
        out[engine]["few_rss"] = memory_with(bench, engine, few, "few", log)
    try:
        out["big_crd_bytes"] = install_big_crds(bench, big_crds)
        time.sleep(5)
        for engine in engines:
            out[engine]["big_crds_rss"] = memory_with(bench, engine, few, f"{big_crds}-crds", log)
    finally:
        remove_big_crds(bench)
    return out
