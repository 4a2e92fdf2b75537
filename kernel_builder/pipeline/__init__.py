"""Many jobs: selection (`--matrix`), what this host can build (host), the plan, the
scheduler, the report, and the pipeline that runs them all (`kbuild build`)."""
