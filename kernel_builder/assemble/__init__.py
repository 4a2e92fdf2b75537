"""Assembling a variant folder from a compiled library: layout, metadata.json, symbols.json,
digests, the zip layout, and the atomic install (stamp)."""
