"""Scenario 13: shell-operator as a peer. Both runners run the same hooks directory: one hook, bound to
the ConfigMaps labelled `bench=shell` in a namespace of the scenario's own, `keepFullObjectsInMemory: false`
and a jqFilter keeping the name, called on Added; it writes each name it is given, with the time of the
run, to a file the bench reads. samplectl runs it as `reconcile --hooks-dir`, shell-operator (c8d19cb,
built from its source, see bench/RESULTS.md) as `start --hooks-dir` out of the cluster, when SO_BIN names
its binary. One runner at a time, each on a fresh namespace. Rows: reaction (create returned -> the hook
has written the name), one at a time; a burst of ConfigMaps created by 16 clients until the hook has
seen every one, with how many hook runs that took; resident memory with no object and with every
object of the burst watched, and per watched object."""

import concurrent.futures
import os
import shutil
import socket
import tempfile
import time

from kube import delete_namespace, fresh_namespace, namespaced
from procs import Proc

HOOK = """#!/usr/bin/env bash
if [[ $1 == --config ]]; then cat <<EOF
configVersion: v1
kubernetes:
- name: watched
  apiVersion: v1
  kind: ConfigMap
  namespace: {nameSelector: {matchNames: [$BENCH_NS]}}
  labelSelector: {matchLabels: {bench: shell}}
  jqFilter: .metadata.name
  keepFullObjectsInMemory: false
  executeHookOnEvent: [Added]
EOF
exit 0; fi
now=$(date +%s%N)
jq -r --arg t "$now" '.[] | select(.type == "Event") | "\\(.filterResult) \\($t)"' "$BINDING_CONTEXT_PATH" >> "$BENCH_OUT"
echo run >> "$BENCH_OUT.runs"
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def runner_args(bench, runner, hooks, tmp):
    if runner == "samplectl":
        return [bench.bins["samplectl"], "reconcile", "--hooks-dir", hooks, "--tmp-dir", tmp]
    return [bench.bins["shell-operator"], "start", "--hooks-dir", hooks, "--tmp-dir", tmp,
            "--kube-config", bench.env["KUBECONFIG"], "--log-type", "json",
            "--listen-address", "127.0.0.1", "--listen-port", str(free_port()),
            "--validating-webhook-listen-port", str(free_port()),
            "--conversion-webhook-listen-port", str(free_port()),
            "--debug-unix-socket", os.path.join(tmp, "debug.socket")]


def lines(path):
    try:
        with open(path) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def wait_for(check, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.002)
    raise TimeoutError(what)


def configmap(name):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"bench": "shell"}},
            "data": {"value": name}}


def measure(bench, runner, count, size, log):
    ns = f"bench-shell-{runner}"
    fresh_namespace(bench.api, ns)
    work = tempfile.mkdtemp(prefix=f"bench-shell-{runner}-")
    hooks, tmp, out = os.path.join(work, "hooks"), os.path.join(work, "tmp"), os.path.join(work, "seen")
    os.makedirs(hooks)
    with open(os.path.join(hooks, "watch.sh"), "w") as f:
        f.write(HOOK)
    os.chmod(os.path.join(hooks, "watch.sh"), 0o755)
    env = dict(bench.env, BENCH_NS=ns, BENCH_OUT=out)
    proc = Proc(runner_args(bench, runner, hooks, tmp), env, os.path.join(bench.log_dir, f"shell-{runner}.log"))
    path = namespaced(ns, "configmaps")
    try:
        wait_for(lambda: len(lines(out + ".runs")) >= 1, 120, f"{runner}: no Synchronization run")
        proc.settle(quiet=2.0)
        rss_empty = proc.rss_mib()

        reaction = []
        for i in range(count):
            name = f"one-{i}"
            start = time.monotonic()
            bench.api.request("POST", path, configmap(name))
            wait_for(lambda: any(line.startswith(name + " ") for line in lines(out)), 60, f"{runner}: {name} not seen")
            reaction.append(time.monotonic() - start)
        runs_before = len(lines(out + ".runs"))

        names = [f"burst-{i}" for i in range(size)]
        start = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda n: bench.api.request("POST", path, configmap(n)), names))
        created = time.monotonic() - start
        deadline = time.monotonic() + 1800
        while sum(1 for line in lines(out) if line.startswith("burst-")) < size:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{runner}: the burst was not all seen")
            proc.check_alive()
            time.sleep(0.5)
        burst_seconds = time.monotonic() - start
        runs = len(lines(out + ".runs")) - runs_before
        proc.settle(quiet=3.0)
        rss_full = proc.rss_mib()
        watched = count + size
        log(f"{runner}: reaction p50 {sorted(reaction)[len(reaction) // 2] * 1000:.1f} ms, burst of {size} seen "
            f"in {burst_seconds:.1f} s ({runs} runs), RSS {rss_empty:.0f} -> {rss_full:.0f} MiB")
        return {"reaction": reaction, "created_seconds": created, "burst_seconds": burst_seconds, "burst_runs": runs,
                "rss_empty_mib": rss_empty, "rss_full_mib": rss_full, "watched": watched,
                "kib_per_object": (rss_full - rss_empty) * 1024 / watched}
    finally:
        proc.stop()
        delete_namespace(bench.api, ns)
        shutil.rmtree(work, ignore_errors=True)


def shell_operator(bench, count, size, log):
    results = {"runners": []}
    for runner in ("samplectl", "shell-operator"):
        if runner == "shell-operator" and "shell-operator" not in bench.bins:
            log("shell-operator peer skipped: set SO_BIN to its binary (see bench/RESULTS.md for how to build it)")
            continue
        results[runner] = measure(bench, runner, count, size, log)
        results["runners"].append(runner)
    return results
