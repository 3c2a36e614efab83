"""``[join]`` configuration: what it accepts, and one clear line (exit 2) for what it does not."""

from __future__ import annotations

import copy
import tomllib

import pytest
from typer.testing import CliRunner

from lowwater.cli import app
from lowwater.config import ConfigError, check_columns, parse_config
from lowwater.config.join import JOIN_WINDOW
from lowwater.config.join_window import JOIN_WINDOW_AFTER
from lowwater.core.join import JoinType

TOML = """
[[source]]
name = "clicks"
path = "landing/clicks"
format = "jsonl"
event_time = "ts"
arrival_time = "ingested"
watermark = { strategy = "bounded", max_out_of_orderness = "5s" }

[[source]]
name = "orders"
path = "landing/orders"
format = "jsonl"
event_time = "ts"
arrival_time = "ingested"
watermark = { strategy = "bounded", max_out_of_orderness = "1m" }

[join]
left = "clicks"
right = "orders"
on = ["user_id"]
lower = "0s"
upper = "30m"
type = "left_outer"
columns = { left = ["user_id", "click_id", "page"], right = ["order_id", "amount"] }

[late]
policy = "side_output"

[output]
path = "out"
"""
BASE = tomllib.loads(TOML)


def test_the_issue_example_parses():
    cfg = parse_config(copy.deepcopy(BASE))
    j = cfg.join
    assert (j.left, j.right, j.on, j.type) == ("clicks", "orders", ("user_id",), JoinType.LEFT_OUTER)
    assert (j.bounds.lower_us, j.bounds.upper_us) == (0, 30 * 60 * 1_000_000)
    assert j.output_columns() == ["user_id", "click_id", "page", "order_id", "amount"]
    assert cfg.window == JOIN_WINDOW  # no [window]: the placeholder selects the join operator
    assert cfg.columns_for(cfg.sources[1])[-3:] == ["user_id", "order_id", "amount"]
    assert j.window is None and cfg.result_window == JOIN_WINDOW


def test_a_window_after_the_join_reads_the_joined_columns():
    data = copy.deepcopy(BASE)
    data["window"] = {"type": "hopping", "size": "1h", "slide": "30m", "key": ["page"],
                      "aggregations": {"orders": "count(order_id)", "revenue": "sum(amount)"}}
    cfg = parse_config(data)
    assert cfg.window == JOIN_WINDOW_AFTER and cfg.window.type == "join_window"  # the operator after the join
    assert cfg.result_window is cfg.join.window
    assert (cfg.join.window.type, cfg.join.window.key, cfg.join.window.value_columns) == (
        "hopping", ("page",), ["order_id", "amount"])


def test_a_join_delivers_to_postgres_with_its_own_joined_table(monkeypatch):
    monkeypatch.delenv("LOWWATER_PG_URL", raising=False)
    data = copy.deepcopy(BASE)
    data["output"].update(kind="postgres", postgres={"url": "postgresql://u:pw@h/db"})
    assert parse_config(data).output.postgres.joined_table == "lowwater_joined"
    data["output"]["postgres"]["joined_table"] = "clicks_orders"
    assert parse_config(data).output.postgres.joined_table == "clicks_orders"
    data["output"]["postgres"]["joined_table"] = "lowwater_results"
    with pytest.raises(ConfigError, match="table names must differ"):
        parse_config(data)
    data["output"]["postgres"]["joined_table"] = "j;drop"
    with pytest.raises(ConfigError, match="output.postgres.joined_table"):
        parse_config(data)


def test_a_negative_lower_bound():
    data = copy.deepcopy(BASE)
    data["join"]["lower"] = "-5s"
    assert parse_config(data).join.bounds.lower_us == -5_000_000


def _set(path: str, value):  # noqa: ANN001, ANN202
    def change(d: dict) -> None:
        *parents, last = path.split(".")
        for p in parents:
            d = d[p]
        if value is None:
            del d[last]
        else:
            d[last] = value
    return change


@pytest.mark.parametrize(("change", "message"), [
    (_set("join.left", "click"), "join.left: unknown source 'click' (the [[source]] tables are: clicks, orders)"),
    (_set("join.right", "clicks"), "join.right: the same source as join.left"),
    (_set("join.lower", "1h"), "join.lower (1h) is after join.upper (30m): no pair could ever match"),
    (_set("join.type", "full_outer"), "join.type: expected one of inner, left_outer"),
    (_set("join.on", []), "join.on: expected a list of column names"),
    (_set("join.upper", None), "join.upper: missing"),
    (_set("join.within", "1s"), "unknown key join.within"),
    (_set("window", {"type": "tumbling", "size": "1m", "key": ["user"], "aggregations": {"n": "count(amount)"}}),
     "window.key: column 'user' is not a column of the joined rows"),
    (_set("window", {"type": "tumbling", "size": "1m", "aggregations": {"n": "sum(ts)"}}),
     "window.aggregations: column 'ts' is not a column of the joined rows"),
    (_set("window", {"type": "session", "gap": "1m", "key": ["user_id"]}),
     "window.type: 'session' after a [join] is not supported"),
    (_set("join.columns", {"left": ["page"], "right": ["page"]}), "join.columns: 'page' is chosen from both sides"),
    (_set("join.columns", {"left": ["watermark"]}), "join.columns.left: column 'watermark' clashes"),
    (_set("trigger", {"early": "every 10 rows"}), "trigger.early: early firings are for windows"),
])
def test_bad_join_configuration_is_one_line(change, message):
    data = copy.deepcopy(BASE)
    change(data)
    with pytest.raises(ConfigError) as e:
        parse_config(data)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_a_third_source_is_refused():
    data = copy.deepcopy(BASE)
    data["source"].append({**data["source"][0], "name": "views", "path": "landing/views"})
    with pytest.raises(ConfigError, match="source 'views' is neither join.left nor join.right"):
        parse_config(data)


@pytest.mark.parametrize(("source", "columns", "message"), [
    ("orders", ["ts", "ingested", "order_id", "amount"], "join.on: column 'user_id' is missing from source 'orders'"),
    ("clicks", ["ts", "ingested", "user_id", "click_id"], "join.columns.left: column 'page' is missing from source"),
])
def test_key_and_chosen_columns_must_exist_on_their_side(source, columns, message):
    cfg = parse_config(copy.deepcopy(BASE))
    with pytest.raises(ConfigError, match=message):
        check_columns(cfg, {source: columns})


def test_the_cli_exits_2_with_the_line(tmp_path):
    bad = TOML.replace('right = "orders"', 'right = "order"')
    path = tmp_path / "join.toml"
    path.write_text(bad)
    got = CliRunner().invoke(app, ["run", str(path), "--once"])
    assert got.exit_code == 2
    assert "join.right: unknown source 'order'" in got.output
