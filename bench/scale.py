"""Scenario 10: one controller process over 10,000 to 100,000 Samples and their ConfigMaps. Per size: the time
to converge a burst from nothing, resident memory once converged, after a fresh start on the converged set,
and at its peak through an API server restart with etcd moving on (every watch relists); how long a fresh
start takes until every Sample has been looked at, the writes it sends (none are needed), and how soon a
Sample created during that start-up is Ready. The controller-runtime peer runs the same steps at the sizes
it is given. Nothing here asserts anything."""

import datetime
import os
import re
import time

from kube import Watch, delete_namespace, fresh_namespace, is_ready, namespaced, sample_body, samples_path
from procs import Proc
from scenarios import Seen, audit_verbs, restart_apiserver

# samplectl's line once every parent of the first list has been reconciled (drive/watch/mod.rs).
LOOKED_AT = re.compile(r"all (\d+) samples looked at, ([0-9.]+)s after the start")
# ... and once it has listed them all (the caches are complete, the sweep begins).
LISTED = re.compile(r"listed (\d+) samples and their children in ([0-9.]+)s")
RELISTED = "the watch of Samples is back"
# samplectl's default --concurrency, given to the peer as MaxConcurrentReconciles.
WORKERS = 8


def listed(bench, path):
    """Every object at `path`, by pages of 500 (a list of 100,000 in one response is what the API server
    and this bench should not be asked for)."""
    items, token = [], ""
    while True:
        sep = "&" if "?" in path else "?"
        page = bench.api.request("GET", f"{path}{sep}limit=500" + (f"&continue={token}" if token else ""))
        items.extend(page["items"])
        token = page["metadata"].get("continue")
        if not token:
            return items


def nothing_lost(bench, ns):
    """How many Samples are not Ready, and how many have no ConfigMap holding their testString."""
    samples = listed(bench, samples_path(ns))
    maps = {m["metadata"]["name"]: (m.get("data") or {}) for m in listed(bench, namespaced(ns, "configmaps"))}
    not_ready = sum(1 for s in samples if not is_ready(s))
    wrong = sum(1 for s in samples if maps.get(s["metadata"]["name"], {}).get("testString") != s.get("testString"))
    return len(samples), not_ready, wrong


def start(bench, driver, ns, label):
    """samplectl with its default concurrency, the peer with as many workers."""
    return bench.start(driver, ns, label, workers=WORKERS)


def wait_for_line(proc, pattern, timeout):
    """Waits until the controller's log has a line matching `pattern`; returns the match."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc.check_alive()
        with open(proc.log_path) as f:
            for line in f:
                found = re.search(pattern, line)
                if found:
                    return found
        time.sleep(0.2)
    raise TimeoutError(f"{proc.log_path}: no {pattern!r} within {timeout}s")


def reset_peak(proc):
    """Starts VmHWM again from the current RSS (Linux: clear_refs 5)."""
    with open(f"/proc/{proc.proc.pid}/clear_refs", "w") as f:
        f.write("5")


def settle(proc, driver):
    """Waits until the controller is done with what it started on. The poll driver is never idle (it lists
    every parent's metadata each second: about a quarter of a core at 100,000), so it is given 20 s."""
    if driver == "poll":
        time.sleep(20)
    else:
        proc.settle(timeout=900)


def one_size(bench, driver, n, log):
    ns = f"bench-scale-{driver}-{n}"
    fresh_namespace(bench.api, ns)
    ready = Seen(is_ready)
    watch = Watch(bench.api, samples_path(ns), ready)
    watch.wait_listed()
    out = {}

    # Converge a burst from nothing.
    proc = start(bench, driver, ns, f"scale-{driver}-{n}-burst")
    started = time.monotonic()
    bench.create_samples(ns, [f"s-{i:06}" for i in range(n)])
    out["create_seconds"] = time.monotonic() - started
    out["converge_seconds"] = ready.wait_count(n, timeout=3600) - started
    time.sleep(3)
    settle(proc, driver)
    out["converged_rss_mib"], out["burst_peak_rss_mib"] = proc.rss_mib(), proc.peak_rss_mib()
    proc.stop()
    log(f"scale {driver} {n}: converged in {out['converge_seconds']:.0f}s, {out['converged_rss_mib']:.0f} MiB")

    # A fresh start on the converged set, with new Samples created while it looks at everything.
    audit = os.path.join(bench.api.cluster_dir, "audit.log")
    offset, since = os.path.getsize(audit), datetime.datetime.now(datetime.timezone.utc)
    proc = start(bench, driver, ns, f"scale-{driver}-{n}-fresh")
    t0 = time.monotonic()
    reactions, i = [], 0
    time.sleep(0.5)
    while True:
        name = f"new-{i:03}"
        bench.api.request("POST", samples_path(ns), sample_body(name, "new"))
        created = time.monotonic()
        reactions.append((created - t0, ready.wait(name, timeout=600) - created))
        i += 1
        if driver == "watch":
            with open(proc.log_path) as f:
                if LOOKED_AT.search(f.read()) and i >= 5:
                    break
        elif i >= 25:
            break
        time.sleep(0.2)
    if driver == "watch":
        out["startup_seconds"] = float(wait_for_line(proc, LOOKED_AT, 900).group(2))
        out["listed_seconds"] = float(wait_for_line(proc, LISTED, 60).group(2))
    settle(proc, driver)
    out["quiet_seconds"] = time.monotonic() - t0
    out["fresh_rss_mib"], out["fresh_peak_rss_mib"] = proc.rss_mib(), proc.peak_rss_mib()
    # A Sample created before the caches are complete waits for them (no controller reconciles from an
    # incomplete cache); those created during the sweep show whether new work waits behind it.
    listed_at = out.get("listed_seconds", 0.0) + 0.3
    out["new_sample_ready_seconds"] = [took for at, took in reactions if at > listed_at]
    out["new_sample_ready_while_listing_seconds"] = [took for at, took in reactions if at <= listed_at]
    reactions = [took for _, took in reactions]
    with open(audit) as f:
        f.seek(offset)
        verbs = audit_verbs(f, driver, since, datetime.datetime.now(datetime.timezone.utc), by_resource=True)
    writes = {v: c for v, c in verbs.items() if v.split()[0] in ("CREATE", "UPDATE", "PATCH", "DELETE")}
    out["startup_writes"] = writes
    out["startup_writes_for_others"] = sum(writes.values()) - 3 * len(reactions)
    log(f"scale {driver} {n}: fresh start quiet in {out['quiet_seconds']:.0f}s, {out['fresh_rss_mib']:.0f} MiB, "
        f"new Sample Ready (created while listing / after) {out['new_sample_ready_while_listing_seconds']} / "
        f"{out['new_sample_ready_seconds']}, writes {writes}")

    # A relist of everything: the API server restarts while etcd moves on.
    reset_peak(proc)
    before = proc.rss_mib()
    restart_apiserver(bench)
    if driver == "watch":
        wait_for_line(proc, RELISTED, 600)
    else:
        time.sleep(20)
    time.sleep(3)
    settle(proc, driver)
    out["relist_before_rss_mib"], out["relist_peak_rss_mib"] = before, proc.peak_rss_mib()
    out["relist_after_rss_mib"] = proc.rss_mib()
    proc.check_alive()
    proc.stop()
    watch.stop()
    total, not_ready, wrong = nothing_lost(bench, ns)
    out.update({"samples": total, "not_ready": not_ready, "configmaps_wrong": wrong})
    log(f"scale {driver} {n}: relist peak {out['relist_peak_rss_mib']:.0f} MiB from {before:.0f}; "
        f"{total} Samples, {not_ready} not Ready, {wrong} ConfigMaps wrong")
    delete_namespace(bench.api, ns, timeout=1800)
    return out


def scale(bench, sizes, peer_sizes, log):
    out = {}
    for n in sizes:
        out[f"{n}/watch"] = one_size(bench, "watch", n, log)
        if n in peer_sizes:
            out[f"{n}/peer"] = one_size(bench, "peer", n, log)
    return out


def scale_poll(bench, sizes, log):
    """The same for the poll driver (`reconcile`, a tick a second), a scenario of its own so that it can be
    measured apart (`scripts/bench --only scale_poll`): its memory must not grow with a tick's work."""
    return {f"{n}/poll": one_size(bench, "poll", n, log) for n in sizes}
