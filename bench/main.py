"""Runs the benchmark scenarios on a running local cluster and writes the report. Called by scripts/bench,
which builds everything and starts the cluster first."""

import argparse
import json
import os
import sys
import time

import fleet_ring
import kro
import metacontroller
import report
import scale
import scenarios
import sharding
import shell_operator
import webhooks
from kube import Api

# How much each scenario measures. The full profile is what bench/RESULTS.md comes from.
PROFILES = {
    "full": {
        "idle": {"sizes": [100, 1000], "window": 60, "windows": 2},
        "reaction": {"count": 200, "reps": 2},
        "convergence": {"sizes": [1000, 5000, 20000], "reps": {1000: 2, 5000: 1, 20000: 1},
                        # at 20,000 only samplectl's defaults against the floor: the peers take minutes there.
                        "only_ours": [20000]},
        "listing": {"objects": 10000, "runs": 5},
        "footprint": {"sizes": [1000, 10000], "reps": 2},
        "restart": {"count": 1000, "reps": 5, "settle": 120},
        "sizing": {"sizes": [2000, 5000], "value_kib": 4},
        "hooks": {"count": 100, "sizes": [1000], "window": 60},
        "metacontroller": {"count": 100, "runs": 3, "size": 1000, "controllers": 10, "per_controller": 100,
                           "window": 60},
        "scale": {"sizes": [10000, 50000, 100000], "peer_sizes": [10000, 50000]},
        "scale_poll": {"sizes": [100000]},
        "sharding": {"size": 20000, "members": [1, 2, 4]},
        "failover": {"sizes": [20000, 100000]},
        "fleet_ring": {"controllers": 10, "per_controller": 1000, "members": [1, 2, 4], "probes": 100},
        "kro": {"count": 200, "size": 1000, "window": 60, "few": 20, "big_crds": 200},
        "shell_operator": {"count": 100, "size": 100000},
        "webhooks": {"reviews": 4000, "clients": 8, "idle": 1000},
    },
    "quick": {
        "idle": {"sizes": [100], "window": 15, "windows": 2},
        "reaction": {"count": 30, "reps": 1},
        "convergence": {"sizes": [300], "reps": {300: 1}},
        "listing": {"objects": 2000, "runs": 2},
        "footprint": {"sizes": [500], "reps": 1},
        "restart": {"count": 300, "reps": 1, "settle": 60},
        "sizing": {"sizes": [300], "value_kib": 4},
        "hooks": {"count": 20, "sizes": [200], "window": 15},
        "metacontroller": {"count": 20, "runs": 1, "size": 200, "controllers": 10, "per_controller": 10,
                           "window": 15},
        "scale": {"sizes": [2000], "peer_sizes": [2000]},
        "scale_poll": {"sizes": [2000]},
        "sharding": {"size": 1000, "members": [1, 2]},
        "failover": {"sizes": [1000]},
        "fleet_ring": {"controllers": 10, "per_controller": 30, "members": [1, 2], "probes": 20},
        "kro": {"count": 10, "size": 200, "window": 15, "few": 10, "big_crds": 200},
        "shell_operator": {"count": 20, "size": 2000},
        "webhooks": {"reviews": 400, "clients": 8, "idle": 1000},
    },
}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--profile", choices=PROFILES, default="full")
    ap.add_argument("--cluster-dir")
    ap.add_argument("--bin", action="append", default=[], help="NAME=PATH of samplectl, kubectl, loop, peer")
    ap.add_argument("--out", required=True, help="directory for RESULTS.md, results.json and the charts")
    ap.add_argument("--only", help="comma-separated scenarios to run (default: all)")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite RESULTS.md and the charts from the results.json in --out, measuring nothing")
    args = ap.parse_args()
    if args.report_only:
        with open(os.path.join(args.out, "results.json")) as f:
            report.write(json.load(f), args.out)
        return
    bins = dict(b.split("=", 1) for b in args.bin)
    profile = PROFILES[args.profile]
    only = args.only.split(",") if args.only else list(profile)
    os.makedirs(args.out, exist_ok=True)
    log_dir = os.path.join(args.out, "logs") if args.profile == "quick" else "target/bench/logs"
    env = dict(os.environ, KUBECONFIG=os.path.join(args.cluster_dir, "kubeconfig"), NO_COLOR="1")
    bench = scenarios.Bench(Api(args.cluster_dir), env, bins, log_dir)

    started = time.monotonic()

    def log(message):
        print(f"[{time.monotonic() - started:6.0f}s] {message}", file=sys.stderr, flush=True)

    results = {"profile": args.profile, "settings": profile, "timings": {}}
    previous = os.path.join(args.out, "results.json")
    merging = args.only and os.path.exists(previous)
    if merging:
        # --only measures some scenarios again and keeps the others' results, each section saying
        # which commit it was measured on.
        with open(previous) as f:
            results = json.load(f)
        results["settings"] = dict(results.get("settings", {}), **{name: profile[name] for name in only})
    environment = report.environment(bins)
    for name in only:
        t0 = time.monotonic()
        log(f"{name} ...")
        module = {"metacontroller": metacontroller, "kro": kro, "scale": scale, "scale_poll": scale, "sharding": sharding,
                  "failover": sharding, "fleet_ring": fleet_ring,
                  "shell_operator": shell_operator, "webhooks": webhooks}.get(
            name, scenarios
        )
        results[name] = getattr(module, name.replace("idle", "idle_cost"))(bench, **profile[name], log=log)
        results["timings"][name] = time.monotonic() - t0
        results.setdefault("measured_on", {})[name] = {"commit": environment["commit"], "date": environment["date"]}
    if not merging:
        results["environment"] = environment
        results["total_seconds"] = time.monotonic() - started
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
    report.write(results, args.out)
    log(f"done; report in {os.path.join(args.out, 'RESULTS.md')}")


if __name__ == "__main__":
    main()
