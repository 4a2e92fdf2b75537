"""`python -m kernel_builder.cli ...` is `kbuild ...` (the Docker runner starts builds this way)."""

from kernel_builder.cli.main import main

main()
