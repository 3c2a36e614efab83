"""The pure semantic core: watermarks, windows, lateness, accounting.

No module here imports Spark (ruff's banned-api rule enforces it). Every rule
of ``SEMANTICS.md`` is implemented once, here, on numpy arrays of integer
microseconds; the Spark engine and the what-if replay both call these
functions, so they cannot disagree.
"""
