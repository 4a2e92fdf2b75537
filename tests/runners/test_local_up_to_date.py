"""The local runner's up-to-date check reads build/<variant>/metadata.json, which a cloned repo
or another process may have planted: it must be bounded like every other read of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

# In its own interpreter, with an address-space cap and a timeout: the unbounded read this
# guards against hangs on a FIFO and eats memory on /dev/zero.
CHECK = """
    import resource, sys
    from pathlib import Path
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    from kernel_builder.runners.local import is_up_to_date
    for dest in sys.argv[1:]:
        print(Path(dest).name, is_up_to_date(Path(dest), "wanted"))
"""


def test_planted_metadata_makes_the_variant_out_of_date_without_hanging(tmp_path):
    fifo, zero, deep, wrong = (tmp_path / name for name in ("fifo", "zero", "deep", "wrong"))
    for folder in (fifo, zero, deep, wrong):
        folder.mkdir()
    os.mkfifo(fifo / "metadata.json")
    (zero / "metadata.json").symlink_to("/dev/zero")
    (deep / "metadata.json").write_text("[" * 100_000 + "]" * 100_000)
    (wrong / "metadata.json").write_text(json.dumps({"kbuild": ["not", "a", "table"]}))
    folders = [fifo, zero, deep, wrong]
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHECK), *map(str, folders)],
        capture_output=True, text=True, timeout=30, check=False,
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert result.stdout.split("\n")[:-1] == [f"{f.name} False" for f in folders]
