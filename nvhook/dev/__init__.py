"""Development tools, not shipped in the .deb: the simulated driver (`nvhook sim`) and the
demo (`nvhook demo`).
"""
