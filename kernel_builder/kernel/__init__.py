"""The kernel repo as input: build.toml (manifest, editions, migrate), kbuild.toml fusions,
the files a build reads (sources: walk, hash, identity) and their git provenance."""
