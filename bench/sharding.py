"""Scenario 11: the controller sharded across members (`reconcile --watch --shard-ring`). For each ring size,
`size` Samples created in one burst while the members run: time until every Sample is Ready, then each
member's resident memory and the bytes it received on its connections (watch streams and every answer, over
TLS, as the kernel counts them per socket), against one unsharded controller doing the same. Then, on a ring of two converged
members, how long a join, a graceful leave (SIGTERM) and a SIGKILL take to settle: until every Sample is
labelled for a live member with none being drained, and, after a kill, until every ConfigMap is labelled
for the member its Sample is on (what the surviving member's reconciles write). The coordinator is killed
apart from the other members (another member must first take the coordinator's Lease over). Nothing here
asserts anything."""

import collections
import concurrent.futures
import re
import subprocess
import threading
import time

from kube import Watch, delete_namespace, fresh_namespace, is_ready, namespaced, samples_path
from scale import nothing_lost
from scenarios import Seen

RING = "bench"
MEMBER_LABEL = f"shard.samplectl.io/{RING}"
DRAIN_LABEL = f"drain.shard.samplectl.io/{RING}"
# How many of a killed member's Samples are changed right after the kill, to time their service.
PROBES = 200
# How long the bench waits, after a kill, for the labels (then the children) to follow.
FOLLOW_WAIT = 900


class Labels:
    """Each object's member and drain labels (and a ConfigMap's testString), as a watch sees them; waiting
    for a condition over all."""

    def __init__(self):
        self.now = {}
        # How many objects hold each (member, drain) pair: a wait's condition is read over these few
        # pairs, not over every object, since it is tested again at every event (a relabelling of
        # 100,000 objects would otherwise cost the bench N^2 and it, not the members, would be timed).
        self.pairs = collections.Counter()
        self.values = {}
        self.cond = threading.Condition()

    def _count(self, pair, step):
        self.pairs[pair] += step
        if not self.pairs[pair]:
            del self.pairs[pair]

    def __call__(self, kind, obj, at):
        name = obj["metadata"]["name"]
        labels = obj["metadata"].get("labels") or {}
        with self.cond:
            before = self.now.pop(name, None)
            if before is not None:
                self._count(before, -1)
            if kind == "DELETED":
                self.values.pop(name, None)
            else:
                pair = (labels.get(MEMBER_LABEL), labels.get(DRAIN_LABEL))
                self.now[name] = pair
                self._count(pair, 1)
                self.values[name] = (obj.get("data") or {}).get("testString")
            self.cond.notify_all()

    def wait_values(self, settled, timeout):
        """Waits until settled(dict of name -> testString) holds; returns when it did."""
        with self.cond:
            if not self.cond.wait_for(lambda: settled(self.values), timeout):
                raise TimeoutError("not served in time")
        return time.monotonic()

    def held_by(self, member):
        with self.cond:
            return sorted(name for name, (m, _) in self.now.items() if m == member)

    def wait(self, settled, timeout):
        """Waits until settled(the (member, drain) pairs the objects hold, each once) holds; returns when
        it did."""
        with self.cond:
            if not self.cond.wait_for(lambda: settled(list(self.pairs)), timeout):
                raise TimeoutError("the ring did not settle")
        return time.monotonic()

    def count(self, member):
        with self.cond:
            return sum(1 for m, _ in self.now.values() if m == member)


def read_bytes(proc):
    """Bytes the process has received on its open TCP connections (`ss`: the kernel's count per socket,
    TLS included). Its connections to the API server are long-lived (watches, and HTTP/1 keep-alive for
    the rest), so this is nearly everything it was sent; /proc/PID/io does not count socket reads."""
    out = subprocess.run(["ss", "-tinpH"], capture_output=True, text=True, check=True).stdout.splitlines()
    mine, total = f"pid={proc.proc.pid},", 0
    for line, details in zip(out, out[1:]):
        if mine in line:
            found = re.search(r"bytes_received:(\d+)", details)
            total += int(found.group(1)) if found else 0
    return total


def member(bench, ns, name):
    extra = ["--shard-ring", RING, "--shard-member", name, "--leader-election-namespace", ns]
    return bench.start("watch", ns, f"sharding-{ns}-{name}", extra=extra)


def incarnation(proc, name, timeout=60):
    """The incarnation a member process labels its Samples with (`m0_k3x9qa`), from its log."""
    pattern = re.compile(rf"member {re.escape(name)} of the shard ring \S+ as (\S+)")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(proc.log_path) as f:
            found = pattern.search(f.read())
        if found:
            return found.group(1)
        time.sleep(0.2)
    raise TimeoutError(f"{proc.log_path}: {name} never held its Lease")


def name_of(label):
    """A member's name from its incarnation's label (`m0_k3x9qa` -> `m0`)."""
    return label.rsplit("_", 1)[0] if label else label


def on(live):
    """Every object on one of the incarnations `live`, none being drained."""
    return lambda labels: all(m in live and d is None for m, d in labels)


def coordinator(bench, ns):
    """The coordinating member's name."""
    lease = bench.api.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{RING}")
    return name_of(lease["spec"].get("holderIdentity"))


def ring_changes(bench, ns, members, size, log):
    """On the converged ring m0, m1: a join, a graceful leave, a SIGKILL of a member, and one of the
    coordinator, each timed until it settles."""
    out = {}
    samples, maps = Labels(), Labels()
    managed = namespaced(ns, "configmaps") + "?labelSelector=app.kubernetes.io%2Fmanaged-by%3Dsamplectl"
    watches = [Watch(bench.api, samples_path(ns), samples), Watch(bench.api, managed, maps)]
    for w in watches:
        w.wait_listed(timeout=120)

    # Each member's incarnation: a member started again is a new one, which the labels name.
    ids = {name: incarnation(p, name) for name, p in members.items()}

    def start(name):
        members[name] = member(bench, ns, name)
        ids[name] = incarnation(members[name], name)

    def live(*names):
        return {ids[n] for n in names}

    t0 = time.monotonic()
    start("m2")
    joined = lambda l: on(live("m0", "m1", "m2"))(l) and any(m == ids["m2"] for m, _ in l)  # noqa: E731
    out["join_seconds"] = samples.wait(joined, 600) - t0
    time.sleep(3)
    out["join_moved"] = samples.count(ids["m2"])
    log(f"sharding: a join moved {out['join_moved']} of {size} in {out['join_seconds']:.1f}s")

    t0 = time.monotonic()
    members.pop("m2").stop()
    out["leave_seconds"] = samples.wait(on(live("m0", "m1")), 600) - t0
    log(f"sharding: a graceful leave settled in {out['leave_seconds']:.1f}s")

    for case in ("member", "coordinator"):
        start("m2")
        joined = lambda l: on(live("m0", "m1", "m2"))(l) and any(m == ids["m2"] for m, _ in l)  # noqa: E731
        samples.wait(joined, 600)
        time.sleep(3)
        leader = coordinator(bench, ns)
        victim = leader if case == "coordinator" else next(m for m in ("m2", "m1", "m0") if m != leader)
        survivors = live(*({"m0", "m1", "m2"} - {victim}))
        held = samples.count(ids[victim])
        t0 = time.monotonic()
        members[victim].proc.kill()
        members.pop(victim).stop()
        out[f"kill_{case}_labels_seconds"] = samples.wait(on(survivors), 600) - t0
        out[f"kill_{case}_children_seconds"] = maps.wait(on(survivors), 600) - t0
        out[f"kill_{case}_held"] = held
        log(f"sharding: SIGKILL of the {case} ({victim}, {held} Samples): labelled elsewhere after "
            f"{out[f'kill_{case}_labels_seconds']:.1f}s, children after {out[f'kill_{case}_children_seconds']:.1f}s")
        # The ring back to m0, m1 for the next case.
        if "m2" in members:
            members.pop("m2").stop()
        for name in ("m0", "m1"):
            if name not in members:
                start(name)
        samples.wait(on(live("m0", "m1")), 600)
    for w in watches:
        w.stop()
    return out


def probe(bench, ns, names, value):
    """Changes the testString of each Sample in `names` (16 at a time)."""
    def patch(name):
        bench.api.request("PATCH", f"{samples_path(ns)}/{name}", {"testString": value},
                          content_type="application/merge-patch+json")
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(patch, names))


def settle(wait, timeout):
    """wait(timeout), or None when it timed out."""
    try:
        return wait(timeout)
    except TimeoutError:
        return None


# Seconds of near-idle CPU in every member before a kill: a member's renewals and the odd Event stay
# under the 2% settle() allows.
QUIET = 5.0
# samplectl's default --resync, which the members run with: each looks at every parent again this often
# from its start, and a parent whose children it looked for that long ago looks for them again. At
# 100,000 Samples those lists keep the API server busy for a minute or two, so each kill's place in this
# cycle goes into the results beside its figures.
RESYNC = 600.0


def into_cycle(since_start, period=RESYNC):
    """Seconds since the last resync of members started `since_start` seconds ago (none before the first)."""
    return since_start % period if since_start >= period else None


def failover(bench, sizes, log, probes=PROBES):
    """Three members over `size` Samples; a member that does not coordinate is killed (SIGKILL), then the
    coordinator, each at rest: every member has been quiet for QUIET seconds (the burst's Events and
    its last writes done, and after the first kill the labels and children followed). Right after each
    kill, `probes` of the victim's Samples, spread over its share, are changed: failover is the time from
    the kill until every probe's ConfigMap holds the change (its Samples served again), against the aim
    of 1.2 x (lease duration + retry period). Then, how long the labels take to follow (every Sample
    labelled for a survivor) and the children (every ConfigMap)."""
    out = {}
    for size in sizes:
        ns = f"bench-failover-{size}"
        fresh_namespace(bench.api, ns)
        samples, maps = Labels(), Labels()
        managed = namespaced(ns, "configmaps") + "?labelSelector=app.kubernetes.io%2Fmanaged-by%3Dsamplectl"
        watches = [Watch(bench.api, samples_path(ns), samples), Watch(bench.api, managed, maps)]
        for w in watches:
            w.wait_listed(timeout=120)
        members_started = time.monotonic()
        procs = {f"m{i}": member(bench, ns, f"m{i}") for i in range(3)}
        ids = {name: incarnation(p, name) for name, p in procs.items()}
        time.sleep(3)
        started = time.monotonic()
        bench.create_samples(ns, [f"s-{i:06}" for i in range(size)])
        patience = max(600, size // 20)
        maps.wait_values(lambda v: len(v) >= size and all(x is not None for x in v.values()), patience * 2)
        samples.wait(on(set(ids.values())), patience)
        row = {"converge_seconds": time.monotonic() - started, "rss_mib": {n: p.rss_mib() for n, p in procs.items()}}
        log(f"failover {size}: converged in {row['converge_seconds']:.0f}s over 3 members")
        for case in ("member", "coordinator"):
            leader = coordinator(bench, ns)
            victim = leader if case == "coordinator" else next(m for m in sorted(procs) if m != leader)
            survivors = {ids[n] for n in procs if n != victim}
            t_rest = time.monotonic()
            for p in procs.values():
                p.settle(quiet=QUIET, timeout=patience)
            rest = time.monotonic() - t_rest
            log(f"failover {size}: members at rest after {rest:.0f}s; killing the {case}")
            held = samples.held_by(ids[victim])
            chosen = held[:: max(1, len(held) // probes)][:probes]
            value = f"after the {case} was killed"
            t0 = time.monotonic()
            procs[victim].proc.kill()
            cycle = into_cycle(t0 - members_started)
            procs.pop(victim).stop()
            probe(bench, ns, chosen, value)
            changed = time.monotonic() - t0
            served = maps.wait_values(lambda v: all(v.get(p) == value for p in chosen), patience) - t0  # noqa: B023
            # The labels following are not what failover waits for: waited for up to FOLLOW_WAIT each.
            labelled = settle(lambda t: samples.wait(on(survivors), t), FOLLOW_WAIT)  # noqa: B023
            children = settle(lambda t: maps.wait(on(survivors), t), FOLLOW_WAIT)  # noqa: B023
            result = {
                "rest_seconds": rest,
                "into_resync_seconds": cycle,
                "held": len(held),
                "probes": len(chosen),
                "probes_changed_seconds": changed,
                "served_seconds": served,
                "labels_seconds": labelled - t0 if labelled else None,
                "children_seconds": children - t0 if children else None,
                "survivor_peak_rss_mib": {n: p.peak_rss_mib() for n, p in procs.items()},
            }
            row[f"kill_{case}"] = result
            after = lambda x: f"{x:.1f}s" if x is not None else "not within the wait"  # noqa: E731
            when = f"{cycle:.0f}s into a resync" if cycle is not None else "before the first resync"
            log(f"failover {size}: SIGKILL of the {case} ({victim}, {len(held)} Samples, {when}): "
                f"{len(chosen)} changed within {changed:.1f}s, all served after {served:.1f}s; labels followed after "
                f"{after(result['labels_seconds'])}, children after {after(result['children_seconds'])}")
        total, row["not_ready"], row["configmaps_wrong"] = nothing_lost(bench, ns)
        out[str(size)] = row
        for w in watches:
            w.stop()
        for p in procs.values():
            p.stop()
        delete_namespace(bench.api, ns, timeout=1800)
    return out


def sharding(bench, size, members, log):
    out = {}
    for k in [0] + members:
        ns = f"bench-shard-{k}"
        fresh_namespace(bench.api, ns)
        ready = Seen(is_ready)
        watch = Watch(bench.api, samples_path(ns), ready)
        watch.wait_listed()
        if k == 0:
            procs = {"unsharded": bench.start("watch", ns, f"sharding-{ns}")}
        else:
            procs = {f"m{i}": member(bench, ns, f"m{i}") for i in range(k)}
        time.sleep(3)
        started = time.monotonic()
        bench.create_samples(ns, [f"s-{i:06}" for i in range(size)])
        converge = ready.wait_count(size, timeout=3600) - started
        for p in procs.values():
            p.settle(timeout=900)
        total, not_ready, wrong = nothing_lost(bench, ns)
        row = {
            "converge_seconds": converge,
            "rss_mib": {name: p.rss_mib() for name, p in procs.items()},
            "peak_rss_mib": {name: p.peak_rss_mib() for name, p in procs.items()},
            "read_mib": {name: read_bytes(p) / 2**20 for name, p in procs.items()},
            "not_ready": not_ready,
            "configmaps_wrong": wrong,
        }
        if k:
            row["coordinator"] = coordinator(bench, ns)
            row["held"] = {}
            for s in bench.api.request("GET", samples_path(ns))["items"]:
                m = name_of((s["metadata"].get("labels") or {}).get(MEMBER_LABEL, "-"))
                row["held"][m] = row["held"].get(m, 0) + 1
        log(f"sharding {k or 'unsharded'}: converged {size} in {converge:.0f}s, RSS {row['rss_mib']}, "
            f"read MiB {row['read_mib']}, held {row.get('held')}, coordinator {row.get('coordinator')}")
        if k == 2:
            out["changes"] = ring_changes(bench, ns, procs, size, log)
            total, row["not_ready_after_changes"], row["configmaps_wrong_after_changes"] = nothing_lost(bench, ns)
        out[str(k)] = row
        watch.stop()
        for p in procs.values():
            p.stop()
        delete_namespace(bench.api, ns)
    return out
