"""Fusion layouts: kbuild.toml declares a fusion, the build stamps `<Layer>Layout` into the
variant's layers module and checks every Layout; transformers then fuses a real (tiny,
random, local) Llama through its own KernelConfig path with the stamped Layout.

tests/fixtures/fused is a [torch-noarch] kernel whose RMSNormMLP is plain torch, so these
builds take no compiler; the compiled kernels' fusion is in tests/examples/test_transformers.py."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, kbuild, optional_module
from tiny_llama import FUSE_RMSNORM_MLP, run
from kernel_builder.errors import ManifestError
from kernel_builder.kernel.fusion import Fusion, FusedChild, layout_source, load_fusions

FIXTURE = REPO / "tests" / "fixtures" / "fused"


@pytest.fixture()
def fused(tmp_path) -> Path:
    root = tmp_path / "fused"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("build", "__pycache__"))
    return root


def layers_of(root: Path) -> str:
    return (root / "build" / "torch-cpu" / "layers.py").read_text()


# -- the sidecar ------------------------------------------------------------------------------


def test_sidecar_is_read_into_fusions():
    (fusion,) = load_fusions(FIXTURE)
    assert fusion == Fusion(
        "RMSNormMLP",
        (
            FusedChild("post_attention_layernorm", ("weight",), ("variance_epsilon",)),
            FusedChild("mlp", ("gate_proj", "up_proj", "down_proj")),
        ),
    )
    assert fusion.layout == "RMSNormMLPLayout"
    assert fusion.renames()[0] == (r"\.mlp\.gate_proj\.", ".post_attention_layernorm.gate_proj.")
    assert load_fusions(REPO / "examples" / "relu") == ()  # no sidecar: nothing to stamp


@pytest.mark.parametrize(
    "text,message",
    [
        ("[fusions.X]\n", r"\[fusions\]: unknown section"),
        ("[fusion.X]\nchildren = [{ name = 'a' }]\n", r"\[fusion.X\] children: expected a list of at least two"),
        ("[fusion.X]\nchildren = [{ name = 'a' }, { name = 'a' }]\n", "each child module may be fused once"),
        ("[fusion.X]\nchildren = [{ name = 'a', params = ['w'] }, { name = 'b', attrs = ['w'] }]\n", "'w' is taken from both 'a' and 'b'"),
        ("[fusion.X]\nchildren = [{ name = 'a', parms = ['w'] }, { name = 'b' }]\n", r"children\[0\]: expected \{ name"),
        ("[fusion.X]\nchildren = [{ name = 'a.b' }, { name = 'b' }]\n", r"children\[0\] name: expected an attribute name"),
        ("[fusion.'1X']\nchildren = []\n", "expected a Python class name"),
        ("[fusion.X]\nchildren = [{ name = 'a' }, { name = 'b' }]\nextra = 1\n", "expected exactly one key, children"),
        ("[fusion.X\n", "invalid TOML"),
        ("[fusion.X]\nchildren = " + "[" * 100_000 + "]" * 100_000 + "\n", "nest more than 32 levels"),
    ],
)
def test_malformed_sidecar_is_one_clear_line(tmp_path, text, message):
    (tmp_path / "kbuild.toml").write_text(text)
    with pytest.raises(ManifestError, match=message) as info:
        load_fusions(tmp_path)
    assert info.value.message.startswith("kbuild.toml: ") and "\n" not in info.value.message


@pytest.mark.e2e
def test_malformed_sidecar_fails_the_build_before_anything_runs(fused):
    (fused / "kbuild.toml").write_text("[fusion.RMSNormMLP]\nchildren = 3\n")
    result = kbuild("build", str(fused))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("kbuild: error: kbuild.toml: [fusion.RMSNormMLP] children:")
    assert not (fused / "build").exists()


def test_generated_layout_takes_the_children_by_reference():
    optional_module("torch")
    import torch
    from torch import nn

    (fusion,) = load_fusions(FIXTURE)
    namespace: dict = {}
    exec(compile("import torch.nn as _nn\nclass _KbuildRenames(tuple):\n    pass\n" + layout_source(fusion), "layout", "exec"), namespace)
    norm = nn.Module()
    norm.weight = nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    norm.variance_epsilon = 1e-6
    mlp = nn.Module()
    mlp.gate_proj, mlp.up_proj, mlp.down_proj = nn.Linear(4, 8), nn.Linear(4, 8), nn.Linear(8, 4)
    layout = namespace["RMSNormMLPLayout"](norm, mlp)
    assert layout.weight is norm.weight and layout.weight.dtype == torch.bfloat16
    assert layout.gate_proj is mlp.gate_proj and layout.variance_epsilon == 1e-6
    assert sorted(n for n, _ in layout.named_parameters()) == sorted(
        ["weight"] + [f"{p}.{w}" for p in ("gate_proj", "up_proj", "down_proj") for w in ("weight", "bias")]
    )


# -- stamping and checking in a real build --------------------------------------------------------


@pytest.mark.e2e
def test_build_stamps_the_layout_and_exports_it(fused):
    kbuild("build", str(fused), check=True)
    text = layers_of(fused)
    assert "class RMSNormMLPLayout(_nn.Module):" in text and "def __init__(self, post_attention_layernorm, mlp):" in text
    check = f"""
from kernel_builder.runtime import load_local
k = load_local({str(fused)!r})
assert 'RMSNormMLPLayout' in k.layers.__all__ and 'RMSNormMLP' in k.layers.__all__
renames = list(k.layers.RMSNormMLPLayout.conversion_mapping)
print(type(renames[0]).__name__, len(renames))
"""
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["WeightRenaming", "3"]
    # The sidecar is an input: editing it rebuilds.
    assert "up-to-date" in kbuild("build", str(fused), check=True).stdout
    sidecar = fused / "kbuild.toml"
    sidecar.write_text(sidecar.read_text().replace('params = ["gate_proj", "up_proj", "down_proj"]', 'params = ["gate_proj", "up_proj", "down_proj"], attrs = ["act_fn"]'))
    assert "built" in kbuild("build", str(fused), check=True).stdout
    assert "self.act_fn = mlp.act_fn" in layers_of(fused)


HAND_WRITTEN = '''

class RMSNormMLPLayout(nn.Module):
    def __init__(self, {args}):
        super().__init__()
{forward}
'''


@pytest.mark.e2e
@pytest.mark.parametrize(
    "args,forward,message",
    [
        ("mlp, post_attention_layernorm", "",
         r"RMSNormMLPLayout.__init__ takes \(mlp, post_attention_layernorm\) but \[fusion.RMSNormMLP\] fuses \(post_attention_layernorm, mlp\)"),
        ("post_attention_layernorm, mlp", "    def forward(self, x, residual):\n        return x\n",
         "RMSNormMLPLayout.forward takes 2 argument.s. but RMSNormMLP.forward takes 1"),
    ],
)
def test_hand_written_layout_is_checked(fused, args, forward, message):
    layers = fused / "torch-ext" / "fused" / "layers.py"
    layers.write_text(layers.read_text() + HAND_WRITTEN.format(args=args, forward=forward))
    result = kbuild("build", str(fused))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "failed" in result.stdout
    assert re.search(message, result.stdout.replace("\n", " ")), result.stdout
    assert not (fused / "build" / "torch-cpu").exists()
    assert [p.name for p in (fused / "build").iterdir()] == [], "no half-written variant"


@pytest.mark.e2e
def test_a_good_hand_written_layout_is_kept(fused):
    layers = fused / "torch-ext" / "fused" / "layers.py"
    layers.write_text(layers.read_text() + HAND_WRITTEN.format(args="post_attention_layernorm, mlp", forward="        self.mine = True\n"))
    kbuild("build", str(fused), check=True)
    text = layers_of(fused)
    assert "self.mine = True" in text and "Generated by kbuild" not in text


@pytest.mark.e2e
def test_orphan_layout_and_missing_kernel_layer_fail(fused):
    layers = fused / "torch-ext" / "fused" / "layers.py"
    original = layers.read_text()
    layers.write_text(original + "\n\nclass GateLayout(nn.Module):\n    pass\n")
    result = kbuild("build", str(fused))
    assert result.returncode == 1 and "GateLayout has no kernel layer Gate beside it" in result.stderr
    layers.write_text(original.replace("class RMSNormMLP(", "class RMSNormMLP2("))
    result = kbuild("build", str(fused))
    assert result.returncode == 1 and "[fusion.RMSNormMLP]: layers (layers.py) defines no class RMSNormMLP" in result.stderr


# -- transformers fuses with the stamped Layout --------------------------------------------------

FUSE_AND_SAVE = FUSE_RMSNORM_MLP + r"""
from safetensors import safe_open

saved = tempfile.mkdtemp()
fused.save_pretrained(saved)
with safe_open(os.path.join(saved, "model.safetensors"), "pt") as f:
    saved_keys = sorted(f.keys())
with safe_open(os.path.join(checkpoint, "model.safetensors"), "pt") as f:
    original_keys = sorted(f.keys())
print(json.dumps({
    "layout": type(layer.post_attention_layernorm).__name__,
    "forward": type(layer.post_attention_layernorm).forward.__qualname__,
    "mlp": type(layer.mlp).__name__,
    "missing": sorted(info["missing_keys"]), "unexpected": sorted(info["unexpected_keys"]),
    "max_diff": (got - expected).abs().max().item(),
    "fused_keys": sorted(k for k in fused.state_dict() if k.startswith("model.layers.0.")),
    "saved_equals_original": saved_keys == original_keys,
}))
"""


@pytest.mark.e2e
def test_transformers_fuses_a_llama_with_the_stamped_layout(fused):
    pytest.importorskip("transformers", reason="transformers is in the test extras; not installed here")
    kbuild("build", str(fused), check=True)
    report = run(FUSE_AND_SAVE, kernel=fused)
    assert report["layout"] == "RMSNormMLPLayout"
    assert report["forward"] == "RMSNormMLP.forward", "kernelize swapped in the kernel layer's forward"
    assert report["mlp"] == "Identity"
    assert report["missing"] == [] and report["unexpected"] == [], "the plain checkpoint loads into the fused model"
    assert report["max_diff"] == 0.0  # the same float32 arithmetic as LlamaRMSNorm + LlamaMLP
    assert "model.layers.0.post_attention_layernorm.gate_proj.weight" in report["fused_keys"]
    assert "model.layers.0.mlp.gate_proj.weight" not in report["fused_keys"]
    assert report["saved_equals_original"], "save_pretrained writes the original keys back"
