"""The administrator's commands: `nvhook install`, `info`/`list`, `runtime configure`, `doctor`.
"""
