"""The hook's decision, shared by every path (the prestart hook, the runtime wrapper, CDI):
the OCI state and config.json, the request they make, spec mode's split, the hand-off to
the mount engine.
"""
