"""Demo data for lowwater: a synthetic payments stream and a ready-to-run config."""
