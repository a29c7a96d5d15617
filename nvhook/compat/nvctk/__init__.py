"""nvidia-ctk drop-in: NVIDIA 1.20's nvidia-ctk grammar over nvhook's commands (see cmd)."""
