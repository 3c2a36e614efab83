"""``LOWWATER_FAULT`` (spark/faults.py, test-only): several faults separated by ``;``, each acting at its own point."""

from __future__ import annotations

import time

import pytest

from lowwater.spark import faults


class _Exited(Exception):
    pass


def test_several_faults_each_act_at_their_own_point_and_nowhere_else(tmp_path, monkeypatch):
    go = tmp_path / "go"
    go.touch()
    exits: list[int] = []

    def exit_(code: int) -> None:
        exits.append(code)
        raise _Exited

    monkeypatch.setattr(faults.os, "_exit", exit_)
    monkeypatch.setenv("LOWWATER_FAULT", f"after_commit:0:wait:{go};before_commit:3")
    t0 = time.monotonic()
    faults.crash_point("after_commit", 0)  # the file is there: no wait
    assert time.monotonic() - t0 < 5
    for point, step in (("before_commit", 0), ("after_commit", 3), ("before_commit", 2)):
        faults.crash_point(point, step)
    assert exits == []
    with pytest.raises(_Exited):
        faults.crash_point("before_commit", 3)
    assert exits == [137]
