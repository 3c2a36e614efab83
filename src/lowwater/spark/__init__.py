"""The Spark execution layer: adapters that map lowwater.core onto Spark."""
