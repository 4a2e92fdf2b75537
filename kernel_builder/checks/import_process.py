"""The interpreter that runs a variant's import check.

Importing torch takes seconds, and it does not depend on the variant, so a build starts
this process before it compiles: torch is imported while the compiler runs, and the check
itself then pays only for loading the kernel. The process reads one request, the folder to
load, from its standard input; closed without one (the build failed or stopped first), it
exits. Run at once, it is the same check in a fresh interpreter (`kbuild check`).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
from contextlib import ExitStack
from pathlib import Path

import kernel_builder
from kernel_builder.compile.private_files import own_folder
from kernel_builder.file_lock import abandoned, exclusive_lock

# Runs in the variant's environment: import it as the runtime does, list its ops, and the ops
# the variant itself registered outside its namespace (`outside`). An op is the variant's when
# one of its libraries registered it while torch.ops.load_library loaded it, or when one of
# its Python files asked torch.library to define it (custom_op, define, Library.define): ops
# that torch's own modules or other packages define while the variant imports them are not.
_SCRIPT = r"""
import json, os, sys
import torch
import torch.library
from kernel_builder.runtime import load_local, read_metadata
request = sys.stdin.readline()
if not request:
    raise SystemExit(0)
folder, backend = json.loads(request)
root = os.path.realpath(folder) + os.sep
machinery = tuple(os.path.join(os.path.dirname(torch.__file__), p) for p in ("library.py", "_library" + os.sep))
registered = set()

def names():
    return set(torch._C._dispatch_get_all_op_names())

def ours(path):
    return os.path.realpath(path).startswith(root)

def caller():
    frame = sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename == "<string>" or frame.f_code.co_filename.startswith(machinery)):
        frame = frame.f_back
    return frame.f_code.co_filename if frame is not None else ""

def tracking(call, owned):
    def tracked(*args, **kwargs):
        before, mine = names(), owned(*args)
        try:
            return call(*args, **kwargs)
        finally:
            if mine:
                registered.update(names() - before)
    return tracked

torch.ops.load_library = tracking(torch.ops.load_library, lambda path, *rest: ours(str(path)))
torch.library.Library.define = tracking(torch.library.Library.define, lambda *args: ours(caller()))
kernel = load_local(folder, backend=backend or None, verify=False)
# A package that imports its _ops only when an op is first called (kernels-community's msa) has
# loaded no library yet: load it as that first call would, so its registrations are seen too.
try:
    __import__(kernel.__name__ + "._ops")
except ModuleNotFoundError as e:
    if e.name != kernel.__name__ + "._ops":
        raise
namespace = read_metadata(folder)["id"] + "::"
ops = sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith(namespace))
print(json.dumps({"ops": ops, "outside": sorted(n for n in registered if not n.startswith(namespace))}))
"""


class ImportProcess:
    """`python` with torch being imported, waiting for the folder to load (`run`). Close it
    (or use it as a context manager) when it is not needed after all."""

    def __init__(self, python: str):
        self.python = python
        self._dir, self._held = _private_folder()
        # Only kernel_builder goes on the child's path, never kbuild's own site-packages,
        # whose torch would shadow the environment's.
        os.symlink(Path(kernel_builder.__file__).parent, self.folder / "kernel_builder")
        # `python -c` puts its working folder first on sys.path, where a planted json.py or
        # torch.py would run: it runs in its private folder, and PYTHONSAFEPATH (3.11+) keeps
        # even that off the path.
        env = dict(os.environ, PYTHONPATH=str(self.folder), PYTHONDONTWRITEBYTECODE="1", PYTHONSAFEPATH="1")
        try:
            self._process = subprocess.Popen(
                [python, "-c", _SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, env=env, cwd=self.folder,
            )
        except BaseException:
            self._release()
            raise

    @property
    def folder(self) -> Path:
        """A private folder that lives as long as the process (for links it should load)."""
        return self._dir

    def run(self, target: Path, backend: str, timeout_s: float) -> subprocess.CompletedProcess:
        """Load `target` (backend "cpu", or "" for the machine's) and wait for the answer.
        Raises subprocess.TimeoutExpired, the process killed, after `timeout_s`."""
        request = json.dumps([os.path.abspath(target), backend]) + "\n"
        try:
            stdout, stderr = self._process.communicate(request, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.communicate()
            raise
        return subprocess.CompletedProcess(self._process.args, self._process.returncode, stdout, stderr)

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
        self._process.communicate()
        self._release()

    def __enter__(self) -> "ImportProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _release(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)
        self._held.close()  # the lock goes last: a sweeper never removes a live folder


def _private_folder() -> tuple[Path, ExitStack]:
    """A new folder in /tmp/kbuild-<uid>/check (this user's alone) and its lock, held until
    the check ends. A kbuild killed while checking (SIGKILL: no cleanup ran) leaves its
    folder; the next check removes every folder whose lock no process holds any more."""
    root = own_folder(Path(tempfile.gettempdir()), "check")
    for lock in abandoned(root.glob("kbuild-check-*.lock")):
        shutil.rmtree(lock.with_suffix(""), ignore_errors=True)
    name = f"kbuild-check-{secrets.token_hex(6)}"
    held = ExitStack()
    # The lock before the folder: a folder exists only while its lock is held.
    held.enter_context(exclusive_lock(root / f"{name}.lock"))
    held.callback((root / f"{name}.lock").unlink, missing_ok=True)
    (root / name).mkdir(mode=0o700)
    return root / name, held
