"""kbuild: build, check and publish compute kernels for the Hugging Face Kernel Hub.

Kept import-light on purpose: `kernel_builder.runtime` is imported by kernel users,
who must not pay for the CLI's dependencies.
"""

__version__ = "0.1.0"
