"""What runs before (or instead of) Python's full import: the launchers nvhook writes, the
GPU screen, the runtime wrapper's facts and command-line grammar, the low-level runtime
lookup, the batched CDI hooks' front and records.
"""
