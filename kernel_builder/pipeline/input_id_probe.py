"""Print one variant's input id as JSON, computed where the build will run: the docker runner runs
it in a short container of the variant's build image before the build container, so that the
host can look the id up in the output cache (the containers have no network to reach it).

    python -m kernel_builder.pipeline.input_id_probe KERNEL --variant V --env ENV [other build flags]
    {"variant": "V", "input-id": "<64 hex digits>"}

It takes the container's `kbuild build` arguments as they are and reads only these three; the
id is the build's own (kernel_builder.pipeline.input_ids.job_input_id, as `kbuild plan --input-ids`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kernel_builder.errors import KbuildError
from kernel_builder.kernel.manifest import load_manifest
from kernel_builder.pipeline.input_ids import INPUT_ID, job_input_id
from kernel_builder.pipeline.options import BuildOptions
from kernel_builder.pipeline.plan_assembly import assemble_plan


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="input_id_probe")
    parser.add_argument("kernel", type=Path)
    parser.add_argument("--variant", required=True)
    parser.add_argument("--env", type=Path, required=True)
    args, _ = parser.parse_known_args(argv)
    try:
        inputs = assemble_plan(load_manifest(args.kernel), BuildOptions(variants=(args.variant,), env=args.env, create_env=False))
        (job,) = inputs.plan().jobs
        print(json.dumps({"variant": args.variant, INPUT_ID: job_input_id(job, inputs.chooser)}))
    except KbuildError as e:
        print(json.dumps({"variant": args.variant, "error": e.message}))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
