"""`nvhook runtime configure`: register nvhook with Docker, containerd, CRI-O and Podman
(hook-spec 4.1), and `--remove`."""
