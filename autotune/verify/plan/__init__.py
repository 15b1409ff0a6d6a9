"""The case plan: which shapes, dtypes, input kinds, layouts and seeds a candidate is checked on, and their data."""
