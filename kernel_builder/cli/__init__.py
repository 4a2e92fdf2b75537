"""The `kbuild` command line: one Typer app (main), shared output helpers (output), one
module per command group."""
