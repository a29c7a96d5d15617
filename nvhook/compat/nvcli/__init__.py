"""nvidia-container-cli drop-in: libnvidia-container's CLI grammar over nvhook's engine."""
