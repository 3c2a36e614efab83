"""``lowwater whatif --gap``: session windows for the replay (no Spark needed to build the config)."""

from __future__ import annotations

import pytest

from lowwater.cli import _replay_config
from lowwater.config import ConfigError


def replay(tmp_path, config=None, window=None, slide=None, gap=None):
    return _replay_config(str(tmp_path), config, "jsonl", "event_time", None, None, None, "key", None,
                          window, slide, None, None, gap)


def test_gap_makes_a_session_window(tmp_path):
    cfg = replay(tmp_path, gap="30s")
    assert cfg.window.is_session and cfg.window.gap_us == 30_000_000 and cfg.window.key == ("key",)
    assert not replay(tmp_path).window.is_session  # default stays a 10s tumbling window


def test_gap_excludes_window_and_slide(tmp_path):
    for kwargs in ({"window": "10s"}, {"window": "10s", "slide": "5s"}):
        with pytest.raises(ConfigError, match="--gap"):
            replay(tmp_path, gap="30s", **kwargs)


def test_session_config_file_and_flag_overrides(tmp_path):
    toml = tmp_path / "p.toml"
    toml.write_text('[source]\nevent_time = "event_time"\npath = "x"\n[window]\ntype = "session"\ngap = "1m"\n'
                    '[output]\npath = "o"\n')
    assert replay(tmp_path, config=toml).window.gap_us == 60_000_000
    assert replay(tmp_path, config=toml, gap="5s").window.gap_us == 5_000_000
    tumbling = replay(tmp_path, config=toml, window="20s")  # --window turns the session config into tumbling
    assert (tumbling.window.type, tumbling.window.size_us) == ("tumbling", 20_000_000)
