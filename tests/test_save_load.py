"""UMind folders on disk: exact reload in a fresh process, base-only folders, and errors that name what is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conftest import mask_sample
from umind_core.modeling.umind import UMindModelError, UMindVL

ROOT = Path(__file__).resolve().parents[1]

RELOAD_SCRIPT = r"""
import sys, torch
sys.path[:0] = [{tests!r}, {root!r}]
from conftest import mask_sample
from umind_core.modeling.umind import UMindVL
model = UMindVL.from_pretrained({folder!r})
enc, _, _ = mask_sample(model, targets=2)
with torch.no_grad():
    out = model(**enc)
torch.save({{"logits": out.logits, "masks": out.mask_logits[0]}}, {dest!r})
"""


def _trained(model, steps: int = 3):
    """A few steps so that LoRA B, token rows and the decoder all differ from their initial values."""
    model.train()
    enc, labels, targets = mask_sample(model, targets=2)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(steps):
        loss = model(**enc, labels=labels, mask_targets=targets).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        out = model(**enc)
    return out


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_save_then_load_in_fresh_process_gives_identical_outputs(tiny_model_factory, tmp_path, lora):
    from umind_core.modeling.config import LoraSettings

    model = tiny_model_factory(lora=LoraSettings() if lora else None)
    want = _trained(model)
    folder = model.save_pretrained(tmp_path / "umind")
    names = sorted(p.name for p in folder.iterdir())
    assert "umind_config.json" in names and "mask_decoder.safetensors" in names and "processor" in names
    assert ("adapter" in names) == lora and "base" in names
    assert not list(tmp_path.glob(".umind.tmp-*")), "temporary folder left behind"
    assert not list(folder.rglob("*.bin")) and not list(folder.rglob("*.pt")), "pickle files written"
    dest = tmp_path / "out.pt"
    script = RELOAD_SCRIPT.format(tests=str(ROOT / "tests"), root=str(ROOT), folder=str(folder), dest=str(dest))
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    got = torch.load(dest)
    torch.testing.assert_close(got["logits"], want.logits, rtol=0, atol=1e-5)
    torch.testing.assert_close(got["masks"], want.mask_logits[0], rtol=0, atol=1e-5)
    # the decoder file holds exactly the decoder's four modules
    keys = sorted(load_file(str(folder / "mask_decoder.safetensors")))
    assert keys == sorted(["proj_img.weight", "proj_img.bias", "proj_ker1.weight", "proj_ker1.bias",
                           "proj_ker2.weight", "proj_ker2.bias", "norm.weight", "norm.bias"])


def test_saved_base_has_no_adapter_tensors(tiny_model_factory, tmp_path):
    folder = tiny_model_factory().save_pretrained(tmp_path / "m")
    base_keys = load_file(str(folder / "base" / "model.safetensors")).keys()
    assert not [k for k in base_keys if "lora_" in k or "base_layer" in k or "token_adapter" in k]
    assert "model.language_model.embed_tokens.weight" in base_keys


def test_saving_again_replaces_the_folder_atomically(tiny_model_factory, tmp_path):
    model = tiny_model_factory()
    folder = model.save_pretrained(tmp_path / "m")
    (folder / "stale.txt").write_text("from an older save")
    model.save_pretrained(folder)
    assert not (folder / "stale.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_base_only_folder_loads_with_fresh_decoder_and_adapter(tiny_model_factory, tmp_path):
    model = tiny_model_factory()
    base_dir = tmp_path / "qwen-base"
    # lay out a plain Qwen3-VL folder the way the hub ships one: weights + config + tokenizer + processor
    model.peft_model.unload()
    qwen = model.qwen
    qwen.save_pretrained(str(base_dir))
    model.processor.save_pretrained(str(base_dir))
    loaded = UMindVL.from_pretrained(base_dir)
    assert loaded.config.base_model == str(base_dir.resolve())
    assert loaded.peft_model is not None
    assert loaded.token_ids == model.token_ids
    enc, labels, targets = mask_sample(loaded)
    with torch.no_grad():
        out = loaded(**enc, labels=labels, mask_targets=targets)
    assert torch.isfinite(out.mask_loss)
    # saving it references the base instead of copying it
    folder = loaded.save_pretrained(tmp_path / "adapted")
    assert not (folder / "base").exists()
    assert json.loads((folder / "umind_config.json").read_text())["base_model"] == str(base_dir.resolve())
    again = UMindVL.from_pretrained(folder)
    with torch.no_grad():
        torch.testing.assert_close(again(**enc).mask_logits[0], loaded(**enc).mask_logits[0])


def test_missing_folder_is_named(tmp_path):
    with pytest.raises(UMindModelError, match=r"model folder .*nowhere does not exist"):
        UMindVL.from_pretrained(tmp_path / "nowhere")


def test_unknown_folder_kind_is_named(tmp_path):
    (tmp_path / "readme.txt").write_text("not a model")
    with pytest.raises(UMindModelError, match="neither a UMind model folder"):
        UMindVL.from_pretrained(tmp_path)


def test_incomplete_umind_folder_names_missing_files(tiny_model_factory, tmp_path):
    folder = tiny_model_factory().save_pretrained(tmp_path / "m")
    (folder / "mask_decoder.safetensors").unlink()
    (folder / "adapter" / "adapter_model.safetensors").unlink()
    with pytest.raises(UMindModelError, match="incomplete") as err:
        UMindVL.from_pretrained(folder)
    assert "mask_decoder.safetensors" in str(err.value) and "adapter_model.safetensors" in str(err.value)


def test_incomplete_base_folder_and_wrong_model_type(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_vl"}))
    with pytest.raises(UMindModelError, match="model.safetensors"):
        UMindVL.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(UMindModelError, match="'llama' model"):
        UMindVL.from_pretrained(tmp_path)


def test_dtype_and_device_choices(tiny_model_factory, tmp_path):
    folder = tiny_model_factory().save_pretrained(tmp_path / "m")
    model = UMindVL.from_pretrained(folder, dtype="bfloat16")
    assert model.dtype == torch.bfloat16 and model.mask_decoder.proj_img.weight.dtype == torch.bfloat16
    enc, _, _ = mask_sample(model)
    with torch.no_grad():
        out = model(**enc)
    assert out.mask_logits[0].dtype == torch.bfloat16
    with pytest.raises(UMindModelError, match="unknown dtype"):
        UMindVL.from_pretrained(folder, dtype="float8")
    if not torch.cuda.is_available():
        with pytest.raises(UMindModelError, match="CUDA is not available"):
            UMindVL.from_pretrained(folder, device="cuda")
