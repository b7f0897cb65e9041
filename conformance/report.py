"""Pass rates of samplectl and its reference side by side, from the runner's lines
(scripts/conformance). Agreement is the measure: a case agrees when samplectl gives the reference's
value, or fails where the reference fails. Every case that does not agree must be listed in
differences.tsv with its reason; one that is not listed fails the run, and so does a listed one that
now agrees (the list must stay true).

    python3 report.py DIFFERENCES.tsv RESULTS.jsonl...
"""

import collections
import json
import sys


def same(a, b):
    """Tagged values alike, doubles as numbers (NaN equal to NaN), timestamps as instants."""
    if isinstance(a, dict) and isinstance(b, dict) and "double" in a and "double" in b:
        x, y = (float(v) if isinstance(v, (int, float)) else float(v.replace("Inf", "inf")) for v in (a["double"], b["double"]))
        return x == y or (x != x and y != y)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def agrees(case):
    ref, got = case["reference"], case["samplectl"]
    if "error" in ref or "error" in got:
        return "error" in ref and "error" in got
    if case["suite"].startswith("cel"):
        return "value" in ref and "value" in got and same(ref["value"], got["value"])
    return ref.get("value") == got.get("value")


def main():
    known = {}
    for line in open(sys.argv[1], encoding="utf-8"):
        if line.strip() and not line.startswith("#"):
            suite, name, reason = line.rstrip("\n").split("\t")
            known[(suite, name)] = reason
    rows = collections.OrderedDict()
    undocumented, stale, reasons = [], [], collections.Counter()
    for path in sys.argv[2:]:
        for line in open(path, encoding="utf-8"):
            case = json.loads(line)
            row = rows.setdefault(case["suite"], collections.Counter())
            row["cases"] += 1
            if "skip" in case["expect"]:
                row["not run"] += 1
                continue
            row["reference"] += case["reference_pass"]
            row["samplectl"] += case["samplectl_pass"]
            key = (case["suite"], case["name"])
            if agrees(case):
                row["agree"] += 1
                if key in known:
                    stale.append(key)
            elif key in known:
                reasons[known[key]] += 1
            else:
                undocumented.append(case)
    total = collections.Counter()
    print(f"{'suite':28} {'cases':>6} {'run':>6} {'reference':>10} {'samplectl':>10} {'agree':>7}")
    for suite, row in rows.items():
        run = row["cases"] - row["not run"]
        total.update(row)
        print(f"{suite:28} {row['cases']:6} {run:6} {row['reference']:10} {row['samplectl']:10} {row['agree']:7}")
    run = total["cases"] - total["not run"]
    print(f"{'total':28} {total['cases']:6} {run:6} {total['reference']:10} {total['samplectl']:10} {total['agree']:7}")
    print(f"\nreference: {100 * total['reference'] / max(run, 1):.1f}% pass, "
          f"samplectl: {100 * total['samplectl'] / max(run, 1):.1f}% pass, "
          f"agreement: {100 * total['agree'] / max(run, 1):.1f}% of {run} cases run")
    if reasons:
        print("\ndocumented differences:")
        for reason, n in reasons.most_common():
            print(f"  {n:4}  {reason}")
    for case in undocumented:
        print(f"\nUNDOCUMENTED {case['suite']}\t{case['name']}\n  expr: {case['expr'][:300]}"
              f"\n  reference: {json.dumps(case['reference'])[:300]}\n  samplectl: {json.dumps(case['samplectl'])[:300]}")
    for suite, name in stale:
        print(f"\nSTALE (now agrees, remove it from the list): {suite}\t{name}")
    sys.exit(1 if undocumented or stale else 0)


if __name__ == "__main__":
    main()
