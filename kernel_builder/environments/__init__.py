"""Torch build environments: probing an interpreter (probe), the managed store of venvs
(store), choosing one per variant (choice), and runtime overlays for import checks and tests
(runtime_overlay)."""
