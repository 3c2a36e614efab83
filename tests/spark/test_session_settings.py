"""``spark/session.settings_in_force``: a job's own Spark settings, the session's values back after it."""

from __future__ import annotations

import pytest

from lowwater.spark.session import settings_in_force

pytestmark = pytest.mark.spark

SET = "spark.sql.codegen.aggregate.map.twolevel.enabled"  # has a default
UNSET = "spark.sql.adaptive.coalescePartitions.minPartitionNum"  # has none: get() is None when unset


def test_settings_are_in_force_inside_and_the_sessions_own_are_back_after_even_on_error(spark):
    spark.conf.set(SET, "true")
    spark.conf.unset(UNSET)
    with pytest.raises(ZeroDivisionError), settings_in_force(spark, {SET: "false", UNSET: "2"}):
        assert (spark.conf.get(SET), spark.conf.get(UNSET)) == ("false", "2")
        _ = 1 / 0
    assert spark.conf.get(SET) == "true"
    assert spark.conf.get(UNSET, None) is None  # unset again, not set to a value it never had
