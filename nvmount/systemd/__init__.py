"""systemd: the container's device rules registered with its scope unit (wire: D-Bus
marshalling, pure; bus: one call over systemd's socket; register: DeviceAllow=)."""
