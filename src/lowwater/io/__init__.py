"""Sources and sinks: where rows come from and where emissions land."""
