"""The session operator: operator (driver side), executor (the keyed pass running the core SessionMachine)."""
