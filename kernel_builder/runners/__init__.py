"""Where a build job runs: `local` (kernel_builder.runners.local.run_job, in this process, with
this machine's toolchain) or `docker` (kernel_builder.runners.docker: one container per
job, from the build images of kernel_builder.runners.docker_images, running the same build entry)."""

RUNNERS = ("local", "docker")
