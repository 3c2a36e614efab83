"""Test helpers shipped with lowwater: the scenario runner (and cluster fixture)."""
