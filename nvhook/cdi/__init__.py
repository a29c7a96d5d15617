"""CDI (Container Device Interface) for nvhook: `nvhook cdi generate|check|list|refresh|hook`.

Stage: commands, off the legacy hook's path. The spec is a projection of the engine's own legacy
plans (`spec`, built by `generate`); what a runtime cannot do from a spec is done by one hook
whose arguments carry every input (`hookargs`), planned without discovery (`hookplan`) and
applied by the same fd-safe engine (`hooks`). `document` reads and type-checks any CDI spec
(PyYAML, JSON), `check` knows whose spec it is, `stamp` records what a spec was made from,
`refresh` keeps ours true (the units), `engines` knows which cdiVersion each engine reads,
`health` is doctor's view, `resolve` applies a spec's edits for the runtime wrapper,
`hookpath` finds the launcher of the running installation.
"""
