"""`kbuild doctor`: what this machine can build, each finding with what to do about it."""
