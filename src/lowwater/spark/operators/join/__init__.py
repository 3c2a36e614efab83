"""The interval join: operator (driver side), input (rows in the state layout), executor (the keyed pass)."""
