"""Stage 0 of the hook: config.toml. `model` (the schema, its defaults and validation; pure),
`load` (finding, trusting and reading the file, its root-only document cache), `toml_subset`
(the hook's own reader for the TOML that config files use, when no tomllib/tomli is there),
`check` and `default` (`nvhook config check|default`; off the hook's path)."""
