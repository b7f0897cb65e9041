"""Scenario 11c: many controllers sharded across members (`reconcile --from-cluster --watch --shard-ring`).
Ten CompositeControllers stored in the cluster, each over a parent type of its own, with the same URL hook
(the sample hook of section 9, served by this process), `per_controller` parents each, run by 1, 2 and 4
members of one ring. For each ring size: the members started, then every parent created in one burst by 16
clients; converge is until every parent's ConfigMap exists (the bench lists them every half second); then
each member's resident memory once quiet. On rings of two members or more, a member that does not
coordinate is killed (SIGKILL) and `probes` of its parents, spread over its share and over the ten types,
are changed at once: failover is until every probe's ConfigMap holds the change. Nothing here asserts
anything."""

import concurrent.futures
import os
import subprocess
import time

from kube import delete_namespace, fresh_namespace, namespaced
from metacontroller import CRDS, HookServer, controller, kind_crd, put_controllers
from procs import Proc
from sharding import MEMBER_LABEL, RING, coordinator, incarnation, name_of

GROUP = "bench.example.com/v1"
TARGET = "samplectl-bench=fleet-ring"


def member(bench, ns, name):
    args = [bench.bins["samplectl"], "reconcile", "--from-cluster", "--watch", "-n", ns,
            "--target-label-selector", TARGET,
            "--shard-ring", RING, "--shard-member", name, "--leader-election-namespace", ns]
    return Proc(args, bench.env, os.path.join(bench.log_dir, f"fleet-ring-{ns}-{name}.log"))


def configmaps(bench, ns):
    """Each parent's ConfigMap's testString, by the parent's name (the sample hook labels it so)."""
    listed = bench.api.request("GET", namespaced(ns, "configmaps") + "?labelSelector=samples.example.com/name")
    return {c["metadata"]["name"]: (c.get("data") or {}).get("testString") for c in listed["items"]}


def wait_configmaps(bench, ns, settled, timeout, procs):
    deadline = time.monotonic() + timeout
    while True:
        now = configmaps(bench, ns)
        if settled(now):
            return time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{ns}: not settled within {timeout}s ({len(now)} ConfigMaps)")
        for p in procs.values():
            p.check_alive()
        time.sleep(0.5)


def parents_by_member(bench, ns, controllers):
    """(type index, name) of every parent, by the member its label names."""
    held = {}
    for i in range(controllers):
        for p in bench.api.request("GET", namespaced(ns, f"parents{i}", GROUP))["items"]:
            m = (p["metadata"].get("labels") or {}).get(MEMBER_LABEL)
            held.setdefault(m, []).append((i, p["metadata"]["name"]))
    return held


def fleet_ring(bench, controllers, per_controller, members, probes, log):
    subprocess.run([bench.bins["samplectl"], "install-crd", "--metacontroller"], env=bench.env, check=True,
                   stdout=subprocess.DEVNULL)
    hook = HookServer()
    out = {"controllers": controllers, "per_controller": per_controller}
    try:
        for i in range(controllers):
            plural, crd = kind_crd(i)
            bench.api.apply(f"{CRDS}/{plural}.bench.example.com", crd, "samplectl-bench")
        time.sleep(3)
        ccs = [controller(f"parents{i}", "bench.example.com", "v1", f"parents{i}") for i in range(controllers)]
        for cc in ccs:
            cc["metadata"]["labels"] = dict([TARGET.split("=")])
        put_controllers(bench.api, ccs)
        for k in members:
            out[str(k)] = ring(bench, k, controllers, per_controller, probes, log)
    finally:
        put_controllers(bench.api, [])
        hook.stop()
    return out


def ring(bench, k, controllers, per_controller, probes, log):
    ns = f"bench-fleet-ring-{k}"
    fresh_namespace(bench.api, ns)
    procs = {f"m{i}": member(bench, ns, f"m{i}") for i in range(k)}
    ids = {name: incarnation(p, name) for name, p in procs.items()}
    time.sleep(3)
    parents = [(i, j) for i in range(controllers) for j in range(per_controller)]

    def create(pair):
        i, j = pair
        bench.api.request("POST", namespaced(ns, f"parents{i}", GROUP),
                          {"apiVersion": GROUP, "kind": f"Parent{i}", "metadata": {"name": f"p{i}-{j:04}"},
                           "testString": "first"})

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(create, parents))
    total = len(parents)
    converged = wait_configmaps(bench, ns, lambda now: len(now) >= total, 1800, procs) - started
    for p in procs.values():
        p.settle(timeout=600)
    row = {
        "converge_seconds": converged,
        "rss_mib": {name: p.rss_mib() for name, p in procs.items()},
        "peak_rss_mib": {name: p.peak_rss_mib() for name, p in procs.items()},
    }
    held = parents_by_member(bench, ns, controllers)
    row["held"] = {name_of(m): len(v) for m, v in held.items()}
    log(f"fleet ring of {k}: {total} parents of {controllers} controllers converged in {converged:.1f}s; "
        f"RSS {row['rss_mib']} MiB; held {row['held']}")
    if k > 1:
        leader = coordinator(bench, ns)
        victim = next(m for m in sorted(procs) if m != leader)
        share = sorted(held.get(ids[victim], []))
        chosen = share[:: max(1, len(share) // probes)][:probes]
        t0 = time.monotonic()
        procs[victim].proc.kill()
        procs.pop(victim).stop()

        def change(pair):
            i, name = pair
            bench.api.request("PATCH", namespaced(ns, f"parents{i}", GROUP) + f"/{name}",
                              {"testString": "after the kill"}, content_type="application/merge-patch+json")

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            list(pool.map(change, chosen))
        names = [name for _, name in chosen]
        served = wait_configmaps(bench, ns, lambda now: all(now.get(n) == "after the kill" for n in names), 900,
                                 procs) - t0
        row["kill"] = {"victim": victim, "held": len(share), "probes": len(chosen), "served_seconds": served}
        log(f"fleet ring of {k}: SIGKILL of {victim} ({len(share)} parents): {len(chosen)} changed parents "
            f"served again after {served:.1f}s")
    for p in procs.values():
        p.stop()
    delete_namespace(bench.api, ns)
    return row
