"""The runtime wrapper (`nvhook-runtime`, installed as `nvidia-container-runtime`): a
runc-compatible runtime that configures GPU containers before runc runs."""
