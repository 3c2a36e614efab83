"""Alert rules evaluated once per step: pure functions of the steps so far, no I/O, no Spark.

Each rule is *firing* or *resolved*; :meth:`AlertState.evaluate` takes one
step's figures and returns the rules that changed state (a
:class:`Transition`), so a rule that keeps firing is reported once, when it
starts, and once when it resolves. The rules (thresholds in
:class:`AlertRules`, ``[alerts]`` in the configuration):

* ``watermark_lag``: lag above ``lag_factor`` x the median lag of the last
  ``lag_steps`` steps (after ``lag_min_steps`` steps with a lag);
* ``late_rate``: too-late rows / valid rows over the last ``late_steps``
  steps above ``late_rate`` (SEMANTICS.md §7's late-event rate, windowed);
* ``spread_growing``: the partition spread grew in each of the last
  ``spread_steps`` steps;
* ``partition_idle``: a partition idle for longer than ``idle_for``;
* ``partition_holding``: one partition holding ``W`` back for longer than
  ``holding_for``;
* ``watermark_regression``: a generator proposed a lower watermark in the step
  (ignored by ``W``, which is monotone; several sources name the source);
* ``dead_letter_rate``: dead letters / rows of the step above ``dead_letter_rate``.

Durations are measured on the clock the caller passes (``now_us``, µs): the
engine passes the wall clock, tests a scripted one.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

RULES = ("watermark_lag", "late_rate", "spread_growing", "partition_idle", "partition_holding",
         "watermark_regression", "dead_letter_rate")


@dataclass(frozen=True)
class AlertRules:
    """Thresholds of the rules (defaults: see the module docstring); a rule is off when its threshold is None.

    >>> AlertRules().late_rate
    0.001
    """

    lag_factor: float | None = 3.0
    lag_steps: int = 20
    lag_min_steps: int = 5
    late_rate: float | None = 0.001
    late_steps: int = 5
    spread_steps: int | None = 5
    idle_for_us: int | None = 300_000_000  # 5 min
    holding_for_us: int | None = 600_000_000  # 10 min
    regression: bool = True
    dead_letter_rate: float | None = 0.01

    def __post_init__(self) -> None:
        for name in ("lag_steps", "lag_min_steps", "late_steps"):
            if getattr(self, name) < 1:
                msg = f"{name} must be at least 1"
                raise ValueError(msg)


@dataclass(frozen=True)
class StepFigures:
    """What the rules read of one step (taken from its ``metrics/`` row)."""

    step: int
    now_us: int
    lag_s: float | None = None
    rows: int = 0
    dead_letter: int = 0
    too_late: int = 0
    spread_s: float | None = None
    idle: frozenset[str] = frozenset()
    holding: str | None = None
    regressions: int = 0
    regressing_sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class Transition:
    """A rule that started firing (``firing``) or resolved at ``step``; ``message`` says why, for a human."""

    rule: str
    firing: bool
    step: int
    message: str
    value: float | None = None
    threshold: float | None = None


@dataclass
class AlertState:
    """The rules' memory across steps (bounded: the longest window of the rules)."""

    rules: AlertRules = field(default_factory=AlertRules)
    firing: dict[str, bool] = field(default_factory=lambda: dict.fromkeys(RULES, False))
    _lags: deque = field(default_factory=deque)
    _late: deque = field(default_factory=deque)
    _spreads: deque = field(default_factory=deque)
    _idle_since: dict[str, int] = field(default_factory=dict)
    _holding_since: tuple[str, int] | None = None

    def evaluate(self, f: StepFigures) -> list[Transition]:
        """Feed one step; the rules whose state changed, in :data:`RULES` order."""
        verdicts = {
            "watermark_lag": self._lag(f),
            "late_rate": self._late_rate(f),
            "spread_growing": self._spread(f),
            "partition_idle": self._idle(f),
            "partition_holding": self._holding(f),
            "watermark_regression": self._regression(f),
            "dead_letter_rate": self._dead(f),
        }
        out = []
        for rule in RULES:
            verdict = verdicts[rule]
            now = verdict is not None
            if now != self.firing[rule]:
                self.firing[rule] = now
                if verdict is not None:
                    message, value, threshold = verdict
                else:
                    message, value, threshold = "back to normal", None, None
                out.append(Transition(rule, now, f.step, message, value, threshold))
        return out

    # Each rule: None when quiet, else (message, value, threshold).

    def _lag(self, f: StepFigures) -> tuple[str, float, float] | None:
        r = self.rules
        if f.lag_s is None or r.lag_factor is None:
            return None
        history = list(self._lags)
        self._lags.append(f.lag_s)
        while len(self._lags) > r.lag_steps:
            self._lags.popleft()
        if len(history) < r.lag_min_steps:
            return None
        limit = r.lag_factor * statistics.median(history)
        if f.lag_s > limit > 0:
            return (f"watermark lag {f.lag_s:.1f}s is above {r.lag_factor:g}x its running median "
                    f"({limit:.1f}s)", f.lag_s, limit)
        return None

    def _late_rate(self, f: StepFigures) -> tuple[str, float, float] | None:
        r = self.rules
        self._late.append((f.too_late, max(f.rows - f.dead_letter, 0)))
        while len(self._late) > r.late_steps:
            self._late.popleft()
        if r.late_rate is None:
            return None
        late, valid = (sum(x) for x in zip(*self._late, strict=True))
        if valid and late / valid > r.late_rate:
            return (f"{late} of {valid} valid rows too late over the last {len(self._late)} step(s) "
                    f"({late / valid:.2%} > {r.late_rate:.2%})", late / valid, r.late_rate)
        return None

    def _spread(self, f: StepFigures) -> tuple[str, float, float] | None:
        n = self.rules.spread_steps
        if n is None or f.spread_s is None:
            self._spreads.clear()
            return None
        self._spreads.append(f.spread_s)
        while len(self._spreads) > n + 1:
            self._spreads.popleft()
        s = list(self._spreads)
        if len(s) == n + 1 and all(b > a for a, b in zip(s, s[1:], strict=False)):
            return (f"partition spread grew for {n} steps in a row ({s[0]:.1f}s -> {s[-1]:.1f}s)"
                    + (f"; {f.holding} holds W back" if f.holding else ""), f.spread_s, float(n))
        return None

    def _idle(self, f: StepFigures) -> tuple[str, float, float] | None:
        for p in list(self._idle_since):
            if p not in f.idle:
                del self._idle_since[p]
        for p in f.idle:
            self._idle_since.setdefault(p, f.now_us)
        limit = self.rules.idle_for_us
        if limit is None:
            return None
        long_idle = sorted(p for p, since in self._idle_since.items() if f.now_us - since > limit)
        if long_idle:
            longest = max(f.now_us - self._idle_since[p] for p in long_idle) / 1e6
            return (f"partition(s) {', '.join(long_idle)} idle for more than {limit / 1e6:g}s "
                    f"(longest {longest:.0f}s)", longest, limit / 1e6)
        return None

    def _holding(self, f: StepFigures) -> tuple[str, float, float] | None:
        if f.holding is None:
            self._holding_since = None
        elif self._holding_since is None or self._holding_since[0] != f.holding:
            self._holding_since = (f.holding, f.now_us)
        limit = self.rules.holding_for_us
        if limit is None or self._holding_since is None:
            return None
        held = f.now_us - self._holding_since[1]
        if held > limit:
            return (f"partition {f.holding} has held W back for {held / 1e6:.0f}s (> {limit / 1e6:g}s)",
                    held / 1e6, limit / 1e6)
        return None

    def _regression(self, f: StepFigures) -> tuple[str, float, float] | None:
        if not self.rules.regression or f.regressions <= 0:
            return None
        where = f" (source {', '.join(f.regressing_sources)})" if f.regressing_sources else ""
        return (f"{f.regressions} watermark proposal(s) below the partition's watermark{where}; ignored, "
                "W is monotone", float(f.regressions), 0.0)

    def _dead(self, f: StepFigures) -> tuple[str, float, float] | None:
        limit = self.rules.dead_letter_rate
        if limit is None or f.rows <= 0:
            return None
        rate = f.dead_letter / f.rows
        if rate > limit:
            return f"{f.dead_letter} of {f.rows} rows dead letters ({rate:.2%} > {limit:.2%})", rate, limit
        return None
