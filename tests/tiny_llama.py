"""Scripts for a fresh interpreter that run a tiny random Llama through transformers
(built from a config and saved locally: nothing is downloaded), shared by the fusion and
transformers tests. Each script prints one JSON report as its last line; `run` returns it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# Defines plain (the model), checkpoint (its saved folder), ids and expected (its logits).
TINY_LLAMA = r"""
import json, os, sys, tempfile
import torch
from transformers import LlamaConfig, LlamaForCausalLM

config = LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=352, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
torch.manual_seed(0)
plain = LlamaForCausalLM(config).eval()
checkpoint = tempfile.mkdtemp()
plain.save_pretrained(checkpoint)
ids = torch.randint(0, 256, (2, 24))
with torch.no_grad():
    expected = plain(ids).logits
"""

# Fuses post_attention_layernorm + mlp of the tiny Llama into the RMSNormMLP layer of the
# kernel that LOCAL_KERNELS maps "kbuild-test/fused" to; defines fused, info, layer, got.
FUSE_RMSNORM_MLP = TINY_LLAMA + r"""
import transformers.utils.kernel_config as kernel_config
from transformers import KernelConfig

# transformers 5.22 lists no "cpu" among the devices a KernelConfig may name, though
# kernels runs CPU kernels: extend the list in this process only. And instead of
# use_local_kernel=True, which breaks on tuple metadata in 5.22, LOCAL_KERNELS (set by the
# test) maps the repo id to the kernel folder.
kernel_config.KERNELS_SUPPORTED_DEVICE_TYPES.append("cpu")
key = (("RMSNorm", "model.layers.*.post_attention_layernorm"), ("MLP", "model.layers.*.mlp"))
mapping = {key: ("kbuild-test/fused:RMSNormMLP", {"revision": "main", "trust_remote_code": True})}
fused, info = LlamaForCausalLM.from_pretrained(checkpoint, use_kernels=True, kernel_config=KernelConfig(mapping),
                                              output_loading_info=True)
layer = fused.model.layers[0]
with torch.no_grad():
    got = fused(ids).logits
"""


def run(script: str, *args: str, kernel=None) -> dict:
    """Run `script` offline in a fresh interpreter (kernelize and KernelConfig register
    mappings process-wide); `kernel` is the folder "kbuild-test/fused" resolves to."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    if kernel is not None:
        env["LOCAL_KERNELS"] = f"kbuild-test/fused={kernel}"
    result = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
