"""kro's instance states, path by path, under kro and under samplectl on one cluster.

Runs every path of conformance/data/kro-states.yaml under one engine, then under the other, each from
no RGD, no instance CRD and fresh namespaces: the RGD applied and waited for until Active, the path's
objects created, the instance created, its status read until it has settled (the same for SETTLE
seconds), then the path's `then` done and the status read until it settles again. What is compared
is what tools and people read: `state`, and each condition's type, status, reason and message, in the
order written. What differs from run to run is written as <namespace> and applyset-<id>-v1 (the
instance's ApplySet id, a hash of its namespace among others).

    kro_states.py --kubectl K --kro BIN --samplectl BIN [--record] [--only NAME,...] [--engines kro,samplectl]

Prints both outcomes side by side. Fails when kro's outcome is not the one recorded in
conformance/data/kro-states.expected.json (which tests/it/kro_states.rs holds samplectl to), unless
--record writes it there; and when samplectl's differs from kro's on a path not listed in the same
file's `differences` with its reason and samplectl's own outcome, or agrees on one that is listed.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
PATHS = os.path.join(HERE, "data", "kro-states.yaml")
EXPECTED = os.path.join(HERE, "data", "kro-states.expected.json")
GROUP = "states.samplectl.test"
SETTLE = 8.0
TIMEOUT = 120.0


def log(*words):
    print("kro-states:", *words, file=sys.stderr, flush=True)


class Cluster:
    def __init__(self, kubectl):
        self.kubectl = kubectl

    def run(self, *args, stdin=None, check=True):
        done = subprocess.run([self.kubectl, *args], input=stdin, capture_output=True, text=True)
        if check and done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done

    def apply(self, obj, namespace=None):
        args = ["apply", "-f", "-"] + (["-n", namespace] if namespace else [])
        return self.run(*args, stdin=json.dumps(obj))

    def get(self, what, name, namespace=None):
        args = ["get", what, name, "-o", "json", "--ignore-not-found"] + (["-n", namespace] if namespace else [])
        out = self.run(*args).stdout.strip()
        return json.loads(out) if out else None


def served(cluster, kind):
    """The resource serving `kind` in the group, as its CRD names it (kro pluralizes as flect does)."""
    crds = json.loads(cluster.run("get", "crd", "-o", "json").stdout)["items"]
    for crd in crds:
        if crd["spec"]["group"] == GROUP and crd["spec"]["names"]["kind"] == kind:
            return crd["metadata"]["name"]
    return None


def rgd(path):
    schema = {"apiVersion": "v1alpha1", "kind": path["kind"], "group": GROUP, "spec": path.get("spec") or {}}
    return {"apiVersion": "kro.run/v1alpha1", "kind": "ResourceGraphDefinition",
            "metadata": {"name": f"states-{path['name']}"},
            "spec": {"schema": schema, "resources": path["resources"]}}


def instance(path):
    given = path.get("instance") or {}
    meta = {"name": "subject"}
    if given.get("annotations"):
        meta["annotations"] = given["annotations"]
    return {"apiVersion": f"{GROUP}/v1alpha1", "kind": path["kind"], "metadata": meta, "spec": given.get("spec") or {}}


def outcome(obj, namespace):
    """What is compared: the state and the conditions, as (type, status, reason, message), in order."""
    if obj is None:
        return {"state": None, "conditions": []}
    status = obj.get("status") or {}

    def plain(text):
        # An instance's ApplySet id is a hash of its namespace among others.
        text = re.sub(r"applyset-[A-Za-z0-9_-]{43}-v1", "applyset-<id>-v1", text or "")
        return re.sub(re.escape(namespace) + r"\b", "<namespace>", text)

    conditions = [[c.get("type"), c.get("status"), c.get("reason", ""), plain(c.get("message"))]
                  for c in status.get("conditions") or []]
    return {"state": status.get("state"), "conditions": conditions}


def settled(cluster, what, namespace):
    """The instance's outcome once it has not changed for SETTLE seconds (or TIMEOUT passed)."""
    last, since, start = None, time.monotonic(), time.monotonic()
    while time.monotonic() - start < TIMEOUT:
        now = outcome(cluster.get(what, "subject", namespace), namespace)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= SETTLE and now["state"] is not None:
            return now
        time.sleep(0.5)
    return {**last, "unsettled": True}


def wait_until(what, check, timeout=60.0):
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return
        time.sleep(0.5)
    raise RuntimeError(f"timed out waiting for {what}")


def release(cluster, path, namespace):
    """Takes the path's finalizer off what carries it, and kro's off the instance, so that all can go."""
    unfinalized = json.dumps({"metadata": {"finalizers": None}})
    for what in ["configmaps", served(cluster, path["kind"])]:
        if what is None:
            continue
        listed = cluster.run("get", what, "-n", namespace, "-o", "name", check=False).stdout.split()
        for name in listed:
            cluster.run("patch", name, "-n", namespace, "--type=merge", "-p", unfinalized, check=False)


def run_engine(cluster, engine, paths):
    outcomes = {}
    for path in paths:
        namespace = f"kro-states-{path['name']}"
        cluster.run("create", "namespace", namespace)
        try:
            cluster.apply(rgd(path))
            wait_until(f"RGD states-{path['name']} Active",
                       lambda: ((cluster.get("rgd", f"states-{path['name']}") or {}).get("status") or {})
                       .get("state") == "Active")
            wait_until("the instance CRD", lambda: served(cluster, path["kind"]))
            what = served(cluster, path["kind"])
            cluster.run("wait", "--for=condition=Established", f"crd/{what}", "--timeout=60s")
            for obj in path.get("before") or []:
                cluster.apply(obj, namespace)
            wait_until("the instance created", lambda: cluster.run(
                "apply", "-n", namespace, "-f", "-", stdin=json.dumps(instance(path)), check=False).returncode == 0)
            got = {"settled": settled(cluster, what, namespace)}
            then = path.get("then")
            if then:
                kind = what if then["delete"]["kind"] == "instance" else then["delete"]["kind"]
                cluster.run("delete", kind, then["delete"]["name"], "-n", namespace, "--wait=false")
                got["then"] = settled(cluster, what, namespace)
            outcomes[path["name"]] = got
            log(engine, path["name"], json.dumps(got))
        finally:
            release(cluster, path, namespace)
            cluster.run("delete", "rgd", f"states-{path['name']}", "--wait=false", check=False)
    return outcomes


def clean(cluster, paths):
    """No RGD, no instance CRD, no namespace of a path: each engine starts from nothing."""
    unfinalized = json.dumps({"metadata": {"finalizers": None}})
    for path in paths:
        namespace = f"kro-states-{path['name']}"
        if cluster.get("namespace", namespace):
            release(cluster, path, namespace)
            cluster.run("delete", "namespace", namespace, "--wait=true", "--timeout=90s", check=False)
        name = f"states-{path['name']}"
        if cluster.get("rgd", name):
            cluster.run("patch", "rgd", name, "--type=merge", "-p", unfinalized, check=False)
            cluster.run("delete", "rgd", name, "--wait=true", "--timeout=30s", check=False)
        crd = served(cluster, path["kind"])
        if crd:
            cluster.run("delete", "crd", crd, "--wait=true", "--timeout=60s", check=False)


def start(command, logfile):
    out = open(logfile, "w")
    return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc):
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def show(name, kro, samplectl, verdict):
    print(f"\n== {name}: {verdict}")
    for phase in ("settled", "then"):
        if phase not in kro and phase not in samplectl:
            continue
        for engine, got in (("kro", kro.get(phase)), ("samplectl", samplectl.get(phase))):
            got = got or {}
            flag = " (never settled)" if got.get("unsettled") else ""
            print(f"  {phase:8} {engine:10} state={got.get('state')}{flag}")
            for c in got.get("conditions") or []:
                print(f"  {'':8} {'':10}   {c[0]}={c[1]} {c[2]}: {c[3]}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubectl", required=True)
    parser.add_argument("--kro", required=True)
    parser.add_argument("--samplectl", required=True)
    parser.add_argument("--logs", default="target/conformance")
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--only", default="")
    parser.add_argument("--engines", default="kro,samplectl",
                        help="without kro, samplectl is compared with kro's recorded outcomes")
    args = parser.parse_args()

    paths = yaml.safe_load(open(PATHS))["paths"]
    if args.only:
        wanted = set(args.only.split(","))
        paths = [p for p in paths if p["name"] in wanted]
    expected = json.load(open(EXPECTED)) if os.path.exists(EXPECTED) else {"kro": {}, "differences": {}}
    cluster = Cluster(args.kubectl)
    os.makedirs(args.logs, exist_ok=True)

    results = {}
    engines = {"kro": [args.kro, "--metrics-bind-address=0", "--health-probe-bind-address=0"],
               "samplectl": [args.samplectl, "reconcile", "--from-cluster", "--watch"]}
    chosen = args.engines.split(",")
    if "kro" not in chosen:
        results["kro"] = {p["name"]: expected["kro"].get(p["name"]) for p in paths}
    for engine, command in engines.items():
        if engine not in chosen:
            continue
        clean(cluster, paths)
        log(f"running {len(paths)} paths under {engine}")
        proc = start(command, os.path.join(args.logs, f"kro-states-{engine}.log"))
        try:
            results[engine] = run_engine(cluster, engine, paths)
        finally:
            clean(cluster, paths)
            stop(proc)

    if args.record:
        expected["kro"].update(results["kro"])
        with open(EXPECTED, "w") as out:
            json.dump(expected, out, indent=2, sort_keys=True)
            out.write("\n")
        log(f"kro's outcomes recorded in {EXPECTED}")

    failed = []
    agree = 0
    for path in paths:
        name = path["name"]
        kro, samplectl = results["kro"][name], results["samplectl"][name]
        if expected["kro"].get(name) != kro:
            failed.append(f"{name}: kro's outcome is not the one recorded (run with --record if kro changed)")
        listed = expected["differences"].get(name)
        same = kro == samplectl
        agree += same
        verdict = "agree" if same else f"differ: {listed['reason']}" if listed else "differ (NOT LISTED)"
        if not same and not listed:
            failed.append(f"{name}: samplectl differs from kro and no reason is listed")
        if not same and listed and listed.get("samplectl") != samplectl:
            failed.append(f"{name}: samplectl's outcome is not the one listed with the difference")
        if same and listed:
            failed.append(f"{name}: listed as a difference but agrees now")
        show(name, kro, samplectl, verdict)
    print(f"\n{agree} of {len(paths)} paths agree")
    for problem in failed:
        print("FAIL", problem)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
