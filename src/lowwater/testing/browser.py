"""Headless Chromium for the dashboard's browser tests (Debian's ``chromium``; ``scripts/bootstrap.sh`` installs it).

No driver library: Chromium's own ``--dump-dom`` (the DOM after the page's
scripts ran for a virtual-time budget) and ``--screenshot`` are enough to load
a page, wait for its charts and read back what they plotted. A missing browser
is an error, never a skip.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage")


def chromium() -> str:
    """The browser's path (``LOWWATER_CHROMIUM`` or ``chromium`` on PATH); raises when there is none."""
    path = os.environ.get("LOWWATER_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        msg = "headless Chromium not found: run scripts/bootstrap.sh as root (apt-get install chromium)"
        raise RuntimeError(msg)
    return path


def _run(url: str, *extra: str, budget_ms: int = 8000, timeout_s: float = 90) -> str:
    with tempfile.TemporaryDirectory(prefix="lowwater-chromium-") as profile:
        cmd = [chromium(), *FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}", *extra, url]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        msg = f"chromium exited {done.returncode}: {done.stderr[-2000:]}"
        raise RuntimeError(msg)
    return done.stdout


def dump_dom(url: str, budget_ms: int = 8000) -> str:
    """The page's DOM after its scripts ran for ``budget_ms`` of virtual time."""
    return _run(url, "--dump-dom", budget_ms=budget_ms)


def plotted(url: str, budget_ms: int = 8000) -> dict:
    """What the dashboard says it plotted (its hidden ``#plotted`` JSON), read from the rendered DOM."""
    dom = dump_dom(url, budget_ms)
    m = re.search(r'<pre id="plotted">(.*?)</pre>', dom, re.S)
    if not m or not m.group(1).strip():
        msg = f"the page rendered no charts; DOM starts: {dom[:500]!r}"
        raise AssertionError(msg)
    return json.loads(html.unescape(m.group(1)))


def screenshot(url: str, target: Path, size: str = "1400,1500", budget_ms: int = 8000) -> Path:
    """A PNG of the page after its scripts ran."""
    _run(url, f"--screenshot={target}", f"--window-size={size}", "--hide-scrollbars", budget_ms=budget_ms)
    if not target.exists() or target.stat().st_size == 0:
        msg = f"chromium wrote no screenshot at {target}"
        raise AssertionError(msg)
    return target
