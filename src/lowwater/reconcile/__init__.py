"""``lowwater reconcile``: the batch truth of every window against what the stream emitted (``job.py``)."""
