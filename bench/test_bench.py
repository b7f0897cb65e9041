"""Unit tests for the bench's pure logic; scripts/test runs them (python3 -m unittest discover -s bench)."""

import unittest

import datetime
import json
import tempfile

from kube import Watch
from metacontroller import neutral_stages
from scenarios import audit_verbs, request_delta
from sharding import Labels, into_cycle, on
from stats import pct, spread


class Percentiles(unittest.TestCase):
    def test_nearest_rank(self):
        values = list(range(1, 101))  # 1..100
        self.assertEqual([pct(values, p) for p in (50, 90, 99, 100)], [50, 90, 99, 100])
        self.assertEqual(pct([3.0], 99), 3.0)
        self.assertEqual(pct([5, 1, 4, 2, 3], 50), 3)
        self.assertEqual(pct([1, 2, 3, 4], 1), 1)

    def test_spread_shows_median_and_range(self):
        self.assertEqual(spread([3.0, 1.0, 2.0]), "2.0 (1.0-3.0)")
        self.assertEqual(spread([7.0]), "7.0")


class RequestDelta(unittest.TestCase):
    def key(self, name, **labels):
        return (name, frozenset(labels.items()))

    def test_counts_resource_requests_by_verb_and_bytes_sent(self):
        before = {
            self.key("apiserver_request_total", verb="LIST", resource="samples"): 10.0,
            self.key("apiserver_response_sizes_sum", verb="LIST", resource="samples"): 1000.0,
        }
        after = {
            self.key("apiserver_request_total", verb="LIST", resource="samples"): 70.0,
            self.key("apiserver_request_total", verb="WATCH", resource="configmaps"): 1.0,
            self.key("apiserver_response_sizes_sum", verb="LIST", resource="samples"): 61000.0,
            self.key("apiserver_watch_events_sizes_sum", resource="configmaps"): 500.0,
            self.key("apiserver_request_total", verb="GET", resource="", subresource="/metrics"): 2.0,
            self.key("apiserver_response_sizes_sum", verb="GET", resource="", subresource="/apis"): 9999.0,
        }
        verbs, sent, other = request_delta(before, after)
        self.assertEqual(verbs, {"LIST": 60.0, "WATCH": 1.0})
        self.assertEqual(sent, 60500.0)
        self.assertEqual(other, 2.0)

    def test_counters_that_did_not_move_are_left_out(self):
        same = {self.key("apiserver_request_total", verb="GET", resource="leases"): 5.0}
        self.assertEqual(request_delta(same, same), ({}, 0.0, 0.0))


class AuditCounts(unittest.TestCase):
    def line(self, agent, verb, at, stage="RequestReceived"):
        return json.dumps({"userAgent": agent, "verb": verb, "requestReceivedTimestamp": at, "stage": stage,
                           "objectRef": {"resource": "samples"}})

    def test_counts_one_clients_requests_inside_the_window(self):
        lines = [
            self.line("samplectl/0.1.0 (linux/x86_64)", "watch", "2026-11-22T03:00:10.000000Z"),
            self.line("samplectl/0.1.0 (linux/x86_64)", "list", "2026-11-22T03:00:20.5Z"),
            self.line("samplectl/0.1.0 (linux/x86_64)", "list", "2026-11-22T03:01:10.000000Z"),  # after
            self.line("controller-runtime/v0.0.0 (linux/amd64) kubernetes/$Format", "watch",
                      "2026-11-22T03:00:30.000000Z"),
            self.line("kube-apiserver/v1.34.4 (linux/amd64) kubernetes/abc", "update", "2026-11-22T03:00:40Z"),
            self.line("samplectl-bench", "get", "2026-11-22T03:00:50.000000Z"),
            # A request's answer is logged too, with the time it was received: not a second request.
            self.line("samplectl/0.1.0 (linux/x86_64)", "list", "2026-11-22T03:00:20.5Z", "ResponseComplete"),
        ]
        start = datetime.datetime(2026, 11, 22, 3, 0, 0, tzinfo=datetime.timezone.utc)
        end = start + datetime.timedelta(seconds=60)
        self.assertEqual(audit_verbs(lines, "watch", start, end), {"WATCH": 1, "LIST": 1})
        self.assertEqual(audit_verbs(lines, "peer", start, end), {"WATCH": 1})
        self.assertEqual(audit_verbs(lines, "peer", start, end, by_resource=True), {"WATCH samples": 1})
        self.assertEqual(audit_verbs(lines, "loop", start, end), {})
        # The baseline counts everyone but the bench.
        self.assertEqual(audit_verbs(lines, "none", start, end), {"WATCH": 2, "LIST": 1, "UPDATE": 1})


class NeutralStages(unittest.TestCase):
    def test_a_reaction_is_timed_by_the_hook_server_the_audit_log_and_the_bench(self):
        def event(stage, verb, resource, name, received, answered, ns="bench-x"):
            return json.dumps({"stage": stage, "verb": verb, "requestReceivedTimestamp": received,
                               "stageTimestamp": answered,
                               "objectRef": {"resource": resource, "namespace": ns, "name": name}},
                              separators=(",", ":")) + "\n"
        at = "2026-11-22T03:00:00.{}Z".format
        created = datetime.datetime(2026, 11, 22, 3, tzinfo=datetime.timezone.utc).timestamp()
        with tempfile.NamedTemporaryFile("w", suffix=".log") as f:
            f.write(event("ResponseComplete", "create", "configmaps", "before", at("000000"), at("000100")))
            offset = f.tell()
            f.writelines([
                event("RequestReceived", "create", "configmaps", "r-0", at("004000"), at("004000")),
                event("ResponseComplete", "create", "samples", "r-0", at("000000"), at("000500")),
                event("ResponseComplete", "create", "configmaps", "r-0", at("004000"), at("006000")),
                # A later write of the same ConfigMap, and another namespace's of the same name: not its first.
                event("ResponseComplete", "patch", "configmaps", "r-0", at("009000"), at("009500")),
                event("ResponseComplete", "create", "configmaps", "r-0", at("001000"), at("001500"), "other"),
            ])
            f.flush()
            stages = neutral_stages(f.name, offset, "bench-x", {"r-0": (created, 0.0075), "r-1": (created, 0.002)},
                                    {("bench-x", "r-0"): [(created + 0.001, created + 0.0025), (created + 0.008, created + 0.009)]})
        got = {name: {stage: round(t * 1000, 3) for stage, t in times.items()} for name, times in stages.items()}
        self.assertEqual(got, {
            "r-0": {"hook called": 1.0, "hook answered": 2.5, "create received": 4.0, "create answered": 6.0,
                    "seen": 7.5},
            "r-1": {"seen": 2.0},
        })



class LabelsTally(unittest.TestCase):
    def event(self, labels, name, kind="MODIFIED", member=None, drain=None):
        meta = {"name": name, "labels": {}}
        if member:
            meta["labels"]["shard.samplectl.io/bench"] = member
        if drain:
            meta["labels"]["drain.shard.samplectl.io/bench"] = drain
        labels(kind, {"metadata": meta, "data": {"testString": "x"}}, 0.0)

    def test_a_wait_sees_each_pair_the_objects_hold_until_the_last_one_moves(self):
        labels = Labels()
        for i in range(3):
            self.event(labels, f"s-{i}", "ADDED", member="a_1")
        self.event(labels, "s-3", "ADDED", member="b_1", drain="c_1")
        self.assertEqual(sorted(labels.pairs.items()), [(("a_1", None), 3), (("b_1", "c_1"), 1)])
        self.assertRaises(TimeoutError, labels.wait, on({"b_1"}), 0)
        for i in range(2):
            self.event(labels, f"s-{i}", member="b_1")
        self.assertRaises(TimeoutError, labels.wait, on({"b_1"}), 0)
        self.event(labels, "s-2", member="b_1")
        self.event(labels, "s-3", "DELETED", member="b_1", drain="c_1")
        labels.wait(on({"b_1"}), 0)
        self.assertEqual(labels.pairs, {("b_1", None): 3})
        self.assertEqual(labels.count("b_1"), 3)


class FakeApi:
    """Lists from `lists` in turn; each watch connection streams the next of `streams` (lines of JSON
    events), and the last one ends the watch."""

    def __init__(self, lists, streams, done):
        self.lists, self.streams, self.done = list(lists), list(streams), done

    def request(self, method, path):
        listed = self.lists.pop(0)
        if isinstance(listed, Exception):
            raise listed
        return listed

    def _connect(self):
        api = self

        class Response:
            status = 200

            def __init__(self, lines):
                self.lines = [json.dumps(e).encode() + b"\n" for e in lines]

            def readline(self):
                return self.lines.pop(0) if self.lines else b""

        class Conn:
            sock = None

            def request(self, *args, **kwargs):
                pass

            def getresponse(self):
                lines = api.streams.pop(0)
                if not api.streams:
                    api.done()
                return Response(lines)

            def close(self):
                pass

        return Conn()


class WatchRelists(unittest.TestCase):
    def item(self, name, member, version):
        meta = {"name": name, "namespace": "ns", "resourceVersion": version,
                "labels": {"shard.samplectl.io/bench": member}}
        return {"metadata": meta, "data": {"testString": "x"}}

    GONE = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}

    def follow(self, lists, streams, labels):
        """A watch of the fake API until its last stream ends; it must end without an error."""
        watch = None
        api = FakeApi(lists, streams, lambda: watch.stopping.set())
        watch = Watch.__new__(Watch)
        Watch.__init__(watch, api, "/api/v1/namespaces/ns/configmaps", labels)
        watch.thread.join(5)
        self.assertIsNone(watch.error)
        return watch

    def test_a_watch_told_its_version_is_gone_lists_again_and_reports_what_went(self):
        labels = Labels()
        lists = [
            {"metadata": {"resourceVersion": "10"}, "items": [self.item("a", "m1", "5"), self.item("b", "m1", "6")]},
            # Listed again after the 410: a moved, b gone, c new.
            {"metadata": {"resourceVersion": "90"}, "items": [self.item("a", "m2", "80"), self.item("c", "m2", "85")]},
        ]
        streams = [[{"type": "MODIFIED", "object": self.item("b", "m1", "11")}, self.GONE], []]
        watch = self.follow(lists, streams, labels)
        self.assertEqual(labels.now, {"a": ("m2", None), "c": ("m2", None)})
        labels.wait(on({"m2"}), 0)

    def test_a_watch_whose_list_fails_after_it_began_lists_again_rather_than_stop(self):
        labels = Labels()
        lists = [
            {"metadata": {"resourceVersion": "10"}, "items": [self.item("a", "m1", "5")]},
            # The relist after the 410 times out; the one after that brings the move.
            TimeoutError("timed out"),
            {"metadata": {"resourceVersion": "90"}, "items": [self.item("a", "m2", "80")]},
        ]
        streams = [[self.GONE], []]
        watch = self.follow(lists, streams, labels)
        self.assertEqual(watch.restarts, 1)
        labels.wait(on({"m2"}), 0)


class ResyncCycle(unittest.TestCase):
    def test_a_kill_is_placed_in_the_members_resync_cycle(self):
        self.assertIsNone(into_cycle(599.0), "no resync yet")
        self.assertEqual(into_cycle(600.0), 0.0)
        self.assertEqual(into_cycle(1241.0), 41.0)
        self.assertEqual(into_cycle(70.0, period=30.0), 10.0)


if __name__ == "__main__":
    unittest.main()