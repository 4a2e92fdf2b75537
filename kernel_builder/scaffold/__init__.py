"""What kbuild writes into a repo: a new kernel (`kbuild init`), the CI workflow
(`kbuild ci`), the demo."""
