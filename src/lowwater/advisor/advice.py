"""The lateness advice: which (L, G) of a what-if grid meets a completeness target and a latency budget.

Pure functions over the replay's result dicts (:data:`lowwater.advisor.sweep.FIELDS`,
times in seconds). The advice never recommends a pair where no window fired
before the end of the log (it shows nothing about latency), never prints
``None``, and when a latency budget cannot be met it says what dominates the
latency instead of suggesting a larger L, which only adds to it.
"""

from __future__ import annotations

from lowwater.time import format_duration


def secs(x: float | None) -> str:
    """Seconds as users write durations (``250ms``, ``30s``, ``1h 30m``); ``None`` (no window fired) says so."""
    if x is None:
        return "n/a (no window fired)"
    return format_duration(x * 1e6)


def lg(r: dict, sep: str = ", ") -> str:
    """A grid point as ``L=11h, G=30m`` (``sep`` between the two)."""
    return f"L={secs(r['lateness'])}{sep}G={secs(r['allowed_lateness'])}"


def _pair(r: dict) -> str:
    return lg(r)


def meets(r: dict, target_completeness: float | None, latency_budget_s: float | None) -> bool:
    """Does one (L, G) meet the targets? A budget needs a latency: a pair where nothing fired does not meet it."""
    if target_completeness is not None and r["completeness"] < target_completeness:
        return False
    p99 = r["emit_latency_p99"]
    return latency_budget_s is None or (p99 is not None and p99 <= latency_budget_s)


def choose(results: list[dict], target_completeness: float | None, latency_budget_s: float | None) -> dict | None:
    """The smallest L (then G) meeting the targets, or ``None``; never a pair where nothing fired."""
    ok = [r for r in results if r["windows_fired"] and meets(r, target_completeness, latency_budget_s)]
    return min(ok, key=lambda r: (r["lateness"], r["allowed_lateness"])) if ok else None


def nothing_fired(results: list[dict]) -> str | None:
    """Why the replay cannot advise at all (no valid row, or no window fired for any L), else ``None``."""
    if not results:
        return "The replay has no results: nothing to advise."
    r = results[0]
    valid = r["rows"] - r["dead_letter"]
    if valid == 0:
        return f"The log has no valid rows ({r['rows']:,} rows, all dead letters): nothing to advise."
    if not any(x["windows_fired"] for x in results):
        most = max(x["windows_drain_only"] for x in results)
        return (
            f"No window fired before the end of the log for any L ({most:,} would fire only on a drain): the log is "
            "shorter than a window plus L, so it shows neither emit latency nor what waiting buys. "
            "Replay a longer log, or smaller L and window sizes."
        )
    return None


def _latency_cause(floor: dict, latency_budget_s: float, idle_timeout_s: float | None) -> str:
    """Why even the fastest pair misses the budget: the watermark's own lag behind the newest event, not L.

    Emit latency is at least L (``W_L = W_0 - L``); the rest is how far ``W_0``
    trails the newest event. A lag that is there on average is a partition whose
    events trail the others' (the min waits for it); a lag only in the tail, with
    an ``idle_timeout`` longer than the budget, is partitions going quiet: ``W``
    waits that long before leaving them out of the min.
    """
    bound = floor["lateness"]
    mean_lag, tail_lag = floor["emit_latency_mean"] - bound, floor["emit_latency_p99"] - bound
    text = (
        f"Emit latency is L plus the watermark's own lag behind the newest event: at {_pair(floor)} that lag is "
        f"{secs(mean_lag)} on average and {secs(tail_lag)} at p99, so a larger L cannot help; it only adds to it."
    )
    idle = idle_timeout_s is not None and idle_timeout_s >= latency_budget_s
    if mean_lag > latency_budget_s:
        text += (
            " A steady lag dominates: a partition whose events trail the others' holds the min back "
            "(`lowwater delays`: skew vs fastest)."
        )
        if idle:
            text += (f" idle_timeout = {secs(idle_timeout_s)} also exceeds the budget: a quiet partition holds W "
                     "that long.")
    elif idle:
        text += (
            f" Idleness dominates: the average fits the budget, the tail does not, and idle_timeout = "
            f"{secs(idle_timeout_s)} alone exceeds it: a partition that goes quiet holds W back that long before it "
            "leaves the min. Lower idle_timeout (above the normal silences `lowwater delays` shows)."
        )
    else:
        text += " The tail comes from moments when one partition trails the others (`lowwater delays`: skew)."
    return text


def advise(
    results: list[dict],
    target_completeness: float | None,
    latency_budget_s: float | None,
    idle_timeout_s: float | None = None,
) -> str:
    """The smallest L (and the (L, G) with the lowest on-time latency) meeting the targets, or why none does."""
    why_not = nothing_fired(results)
    if why_not is not None:
        return why_not
    want = []
    if target_completeness is not None:
        want.append(f"completeness >= {target_completeness:.4%}")
    if latency_budget_s is not None:
        want.append(f"p99 emit latency <= {secs(latency_budget_s)}")
    smallest = choose(results, target_completeness, latency_budget_s)
    if smallest is None:
        return _no_candidate(results, target_completeness, latency_budget_s, idle_timeout_s, " and ".join(want))
    lines = [
        f"Smallest L meeting {' and '.join(want)}: L={secs(smallest['lateness'])} "
        f"(G={secs(smallest['allowed_lateness'])}): "
        f"completeness {smallest['completeness']:.4%}, {smallest['too_late']:,} too late, "
        f"p99 emit latency {secs(smallest['emit_latency_p99'])}, peak open windows {smallest['peak_open_windows']:,}."
    ]
    ok = [r for r in results if r["windows_fired"] and meets(r, target_completeness, latency_budget_s)]
    if len({r["allowed_lateness"] for r in results}) > 1:
        fastest = min(ok, key=lambda r: (r["emit_latency_mean"], r["lateness"], r["allowed_lateness"]))
        lines.append(
            f"Lowest on-time latency: {lg(fastest, ' with ')} "
            f"(mean {secs(fastest['emit_latency_mean'])}, completeness {fastest['completeness']:.4%}, "
            f"{fastest['late_updates']:,} late updates)."
        )
    silent = [r for r in results if not r["windows_fired"]]
    if silent:
        lines.append(f"Not considered (no window fired before the end of the log): {', '.join(map(_pair, silent))}.")
    return "\n".join(lines)


def completeness_error(target: float) -> str | None:
    """Why ``target`` is not a completeness target (a fraction in (0, 1]), or ``None`` if it is one."""
    if 0 < target <= 1:
        return None
    hint = f" ({target:g}% is {target / 100:g})" if 1 < target <= 100 else ""
    return f"expected a fraction in (0, 1]{hint}"


def advice_for(
    results: list[dict], idle_timeouts_us: list[int | None], target_completeness: float | None,
    latency_budget_s: float | None,
) -> str | None:
    """What ``lowwater whatif`` prints under its tables: the advice when a target is given, else why nothing
    fired (or ``None``). ``idle_timeouts_us``: each source's; the longest is how long a quiet partition holds W."""
    idles = [t for t in idle_timeouts_us if t is not None]
    idle = max(idles) / 1e6 if idles else None
    if target_completeness is not None or latency_budget_s is not None:
        return advise(results, target_completeness, latency_budget_s, idle)
    return nothing_fired(results)


def _no_candidate(
    results: list[dict],
    target_completeness: float | None,
    latency_budget_s: float | None,
    idle_timeout_s: float | None,
    wanted: str,
) -> str:
    """Why no (L, G) meets the targets, and what would (or would not) help."""
    complete = [r for r in results if meets(r, target_completeness, None)]
    fast = [r for r in results if r["windows_fired"] and meets(r, None, latency_budget_s)]
    lines = [f"No candidate meets {wanted}."]
    if not complete:
        best = max(results, key=lambda r: (r["completeness"], -r["lateness"]))
        lines.append(
            f"Completeness: the best is {best['completeness']:.4%} at {_pair(best)} ({best['too_late']:,} too late); "
            "try larger L or G."
        )
    if latency_budget_s is not None and not fast:
        floor = min((r for r in results if r["emit_latency_p99"] is not None),
                    key=lambda r: (r["emit_latency_p99"], r["lateness"]))
        lines.append(f"Latency: the lowest p99 is {secs(floor['emit_latency_p99'])} at {_pair(floor)}.")
        lines.append(_latency_cause(floor, latency_budget_s, idle_timeout_s))
    if complete and latency_budget_s is None:
        lines.append(
            f"The pairs reaching it ({', '.join(map(_pair, complete))}) fire no window before the end of the log: "
            "replay a longer log."
        )
    if complete and fast and latency_budget_s is not None and target_completeness is not None:
        need = min(complete, key=lambda r: (r["lateness"], r["allowed_lateness"]))
        best_fast = max(fast, key=lambda r: (r["completeness"], -r["lateness"]))
        lines.append(
            f"The targets conflict: completeness >= {target_completeness:.4%} needs {_pair(need)} "
            f"(p99 emit latency {secs(need['emit_latency_p99'])}); within the budget the best completeness is "
            f"{best_fast['completeness']:.4%} at {_pair(best_fast)}. A larger G keeps the latency of L and turns "
            "too-late rows into late updates (revisions)."
        )
    return "\n".join(lines)


def delay_advice(profile: list[dict]) -> str:
    """``lowwater delays``' sentence: L from the out-of-orderness (what a bound must cover), not the arrival delay.

    The arrival delay of a row is its out-of-orderness plus how late the
    newest event before it arrived itself; advising L on it overshoots by that
    much (hours, on a feed reported when a flight lands). Both are named.
    """
    if not profile:
        return "No valid rows: no delay to profile."
    slow = max(profile, key=lambda r: r["skew"])
    gaps = [r["longest_gap"] for r in profile if r["longest_gap"] is not None]
    silence = f"longest silence {secs(max(gaps))}" if gaps else "no partition has two arrivals"
    ooo = max(profile, key=lambda r: r["ooo_p99_9"])
    return (
        f"L for 99.9% of rows on their own partition: ~{secs(ooo['ooo_p99_9'])} (out-of-orderness, partition "
        f"{ooo['partition']}: how far a row's event time is behind the newest one seen before it; arrival delay "
        f"p99.9 is ~{secs(max(r['p99_9'] for r in profile))}, not what L covers); partition {slow['partition']} "
        f"trails the fastest by {secs(slow['skew'])} (median); {silence} (idle_timeout should exceed normal gaps)."
    )
