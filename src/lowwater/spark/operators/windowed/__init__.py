"""The windowed operator (tumbling, hopping): operator (driver side), executor (the contributions pass),
fold (the Spark SQL fold and its state layout)."""
