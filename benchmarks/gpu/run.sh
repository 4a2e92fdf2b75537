#!/usr/bin/env bash
# The GPU proof (benchmarks/gpu/proof.py): build every example's CUDA variant with this
# machine's own python and torch, run the examples' own tests on the GPU, time the kernels
# against PyTorch; one table, and proof.json in --out (default $OUT, else ./gpu-proof).
#
#   benchmarks/gpu/run.sh [--dry-run] [--out DIR] [--examples relu swiglu ...] [--skip-tests]
#
# It needs nothing from the network: kbuild runs from this working tree, and packages the
# machine's python lacks (kbuild's pyelftools, say) come as wheels carried in .whl/
# (or $KBUILD_PROOF_WHEELS; see "GPU proof" in docs/examples.md). $KBUILD_PROOF_PYTHON picks the
# python (default python3).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python=${KBUILD_PROOF_PYTHON:-python3}
wheels=${KBUILD_PROOF_WHEELS:-$repo/.whl}
if compgen -G "$wheels/*.whl" > /dev/null; then
  site=$(mktemp -d)
  if ! error=$("$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$wheels"/*.whl 2>&1); then
    echo "gpu-proof: cannot install the wheels in $wheels with $python: $(tail -n 1 <<< "$error")" >&2
    exit 2
  fi
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
missing=$("$python" - <<'PY'
import importlib.util
names = ["torch", "typer", "rich", "jinja2", "packaging", "elftools", "huggingface_hub", "pytest"]
print(" ".join(n for n in names if importlib.util.find_spec(n) is None))
PY
)
if [ -n "$missing" ]; then
  echo "gpu-proof: $python lacks: $missing (carry their wheels in .whl/: see the GPU proof in docs/examples.md)" >&2
  exit 2
fi
exec "$python" "$repo/benchmarks/gpu/proof.py" "$@"
