"""NVIDIA's command surfaces, spoken by nvhook: each parses NVIDIA's grammar and calls
nvhook's own commands and engine. Nothing here discovers, plans or configures by itself.

    nvcli/     nvidia-container-cli (libnvidia-container's argp CLI: info, list, configure)
    nvctk/     nvidia-ctk 1.20 (urfave/cli: runtime configure, cdi, config, system, hook)
    cdihook/   nvidia-cdi-hook and `nvidia-ctk hook`: the hooks NVIDIA's CDI specs name, run
               fd-safe in the container's root
    urfave     the urfave/cli v3 grammar the last two share (flags, env fallbacks) and
               NVIDIA's logrus-style stderr lines

Every NVIDIA command, flag and hook and what nvhook does with it: docs/nvidia-cli.md.
"""
