"""The `hub` fixture (a local test Hub per test) and `hub_env` (what a subprocess client needs).

Loaded as a pytest plugin from conftest.py. huggingface_hub reads HF_HUB_DISABLE_XET when it is
imported, and the test Hub speaks LFS, not Xet: so it is switched off here, at import, before
any test module imports huggingface_hub (and patched in if something imported it earlier).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel_builder.testing import HubServer

os.environ["HF_HUB_DISABLE_XET"] = "1"
if "huggingface_hub.constants" in sys.modules:
    sys.modules["huggingface_hub.constants"].HF_HUB_DISABLE_XET = True

_DEFAULT = object()


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[HubServer]:
    """A started test Hub persisting in tmp_path/'hub', with the default write and read tokens."""
    with HubServer(tmp_path / "hub").start() as server:
        yield server


def hub_env(hub: HubServer, tmp_path: Path, token: str | None = _DEFAULT) -> dict[str, str]:  # type: ignore[assignment]
    """Environment variables for a subprocess that talks to `hub` with huggingface_hub or kernels.

    `token` defaults to the hub's write token; None means anonymous (HF_TOKEN is set empty, so a
    token in the parent environment does not leak in). Each call gets a fresh HF_HOME under
    tmp_path, so no cache outlives the test. Merge it over os.environ: dict(os.environ, **env).
    """
    if token is _DEFAULT:
        token = hub.write_token
    home = Path(tempfile.mkdtemp(dir=tmp_path, prefix="hf-home-"))
    return {
        "HF_ENDPOINT": hub.endpoint,
        "HF_TOKEN": token or "",
        "HUGGING_FACE_HUB_TOKEN": "",
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(home / "hub"),
        "KERNELS_CACHE": str(home / "hub"),
        "HF_HUB_OFFLINE": "0",
        "HF_HUB_DISABLE_XET": "1",
        # kernels 0.17.2 builds an empty user-agent part when telemetry is off unless an origin is set.
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_USER_AGENT_ORIGIN": "kbuild-tests",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    }
