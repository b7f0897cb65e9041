"""Summaries of repeated measurements."""

import statistics


def pct(values, p):
    """Nearest-rank percentile: the smallest value with at least p% of the values at or below it."""
    s = sorted(values)
    rank = -(-p * len(s) // 100)  # ceil(p/100 * n)
    return s[max(0, min(len(s), int(rank)) - 1)]


def spread(values, fmt="{:.1f}"):
    """Median with the range of the runs, e.g. `3.1 (2.9-3.4)`."""
    med = statistics.median(values)
    if len(values) == 1:
        return fmt.format(med)
    return f"{fmt.format(med)} ({fmt.format(min(values))}-{fmt.format(max(values))})"
