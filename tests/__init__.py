"""lowwater's tests: core (pure, milliseconds), spark (a SparkSession), bench, scenarios."""
