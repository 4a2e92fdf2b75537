"""The kernel repo as input: build.toml (manifest, editions, migrate), kbuild.toml fusions,
the files a build reads (sources: walk, hash), the op namespace id they give (identity) and
their git provenance."""
