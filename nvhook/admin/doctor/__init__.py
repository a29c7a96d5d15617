"""`nvhook doctor`: is this host ready for GPU containers, and if not, what to do.

Stage: commands, off the hook's path. `checks` (driver, devices, config, caches), `host`
(cgroups, processes, runtimes' configuration), `cmd` (the command). Every check gives one
`Finding`: a level (ok, info, warn, fail), one line of what it saw and, unless ok, one line of
what to do. `fail` means a GPU container would fail to start; doctor exits 1 then.
"""
