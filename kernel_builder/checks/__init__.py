"""What a variant must pass before it is installed (ELF, ABI, metadata, import:
variant_checks), and the kernel's own tests run against a build (kernel_tests)."""
