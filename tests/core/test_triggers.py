"""Early triggers: parsing and when an open window fires a provisional result."""

from __future__ import annotations

import pytest

from lowwater.core.triggers import EarlyTrigger


@pytest.mark.parametrize(
    ("text", "rows", "us"),
    [
        ("every 1000 rows", 1000, None),
        ("every 1 row", 1, None),
        ("every 5s", None, 5_000_000),
        ("  every 250ms ", None, 250_000),
    ],
)
def test_parse(text, rows, us):
    t = EarlyTrigger.parse(text)
    assert (t.every_rows, t.every_us) == (rows, us)


@pytest.mark.parametrize("bad", ["every rows", "1000 rows", "every -1 rows", "every 0 rows", "every soon", ""])
def test_parse_rejects(bad):
    with pytest.raises(ValueError):
        EarlyTrigger.parse(bad)


@pytest.mark.parametrize(
    ("trigger", "pending", "waited_us", "due"),
    [
        ("every 3 rows", 2, 10**9, False),  # not enough rows, however long we waited
        ("every 3 rows", 3, 0, True),
        ("every 3 rows", 0, 10**9, False),  # nothing new: nothing to emit
        ("every 5s", 1, 4_999_999, False),
        ("every 5s", 1, 5_000_000, True),
        ("every 5s", 0, 10**9, False),
    ],
)
def test_is_due(trigger, pending, waited_us, due):
    assert EarlyTrigger.parse(trigger).is_due(pending, waited_us) is due
