"""The commands that are not pipeline stages: a maintainer's (workflow, schema, readme), a user's around a run
(resolve, set, reuse, cost) and the benchmark. `python -m twoscale <command>` runs them like the stages."""
