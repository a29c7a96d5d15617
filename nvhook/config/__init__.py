"""Stage 0 of the hook: config.toml. `model` (the schema, its defaults and validation; pure),
`load` (finding, trusting and reading the file, its root-only document cache), `toml_subset`
(the hook's own reader for the TOML that config files use), `toml_read` (that reader, then
tomllib, tomli or python3-toml: every Python nvhook supports),
`check` and `default` (`nvhook config check|default`; off the hook's path)."""
