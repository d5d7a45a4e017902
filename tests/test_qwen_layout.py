"""A folder in Qwen3-VL-4B-Instruct's hub layout (real BPE vocabulary, published configs, sharded bf16 weights).

The small variant keeps the real vocabulary and special-token ids with two narrow layers, so the path a real
user takes (`UMindVL.from_pretrained("/models/Qwen3-VL-4B-Instruct")`) runs here in seconds: the tokenizer, the
chat template, the grounding ids, the Predictor, a LoRA step, saving a version, and the faults a hub folder can
have. The folder is written once per module (about 10 s: most of it is deriving the 151,387 BPE merges).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import make_image
from qwen_small import plant_answer
from umind_core.answers import grounding
from umind_core import prompts
from umind_core.tools import qwen_layout, qwen_published, qwen_vocab
from umind_core.modeling.base_folder import safetensors_names
from umind_core.modeling.umind import UMindModelError, UMindVL

pytestmark = pytest.mark.slow  # writes and loads a Qwen3-VL folder of the small config

HUB_FILES = {"chat_template.json", "config.json", "generation_config.json", "merges.txt",
             "model.safetensors.index.json", "preprocessor_config.json", "tokenizer.json", "tokenizer_config.json",
             "video_preprocessor_config.json", "vocab.json"}


@pytest.fixture(scope="module")
def layout(tmp_path_factory) -> Path:
    return qwen_layout.write_layout(tmp_path_factory.mktemp("qwen") / "Qwen3-VL-small", "small")


@pytest.fixture(scope="module")
def planted(layout, tmp_path_factory) -> Path:
    """The layout made to answer '<ref>lesion</ref>' + one mask after the assistant turn opens (qwen_small)."""
    folder = tmp_path_factory.mktemp("planted") / "Qwen3-VL-small"
    shutil.copytree(layout, folder)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    ids = tok.convert_tokens_to_ids
    chain = [tok("\n")["input_ids"][-1], ids(grounding.REF_START), *tok("lesion")["input_ids"],
             ids(grounding.REF_END), 151673, ids("<|im_end|>")]  # 151673: <|seg_mask|>, the 5th added token
    plant_answer(folder, chain)
    return folder


@pytest.fixture(scope="module")
def model(layout):
    return UMindVL.from_pretrained(layout)


def test_folder_has_the_hub_files_and_real_tensor_names(layout):
    names = {p.name for p in layout.iterdir()}
    shards = sorted(n for n in names if n.startswith("model-"))
    assert names - set(shards) == HUB_FILES
    assert len(shards) > 1 and all(s.endswith(f"-of-{len(shards):05d}.safetensors") for s in shards)
    index = json.loads((layout / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == set(shards)
    held = {s: safetensors_names(layout / s) for s in shards}
    assert all(t in held[s] for t, s in index["weight_map"].items())
    assert index["metadata"]["total_size"] == sum((layout / s).stat().st_size for s in shards) - sum(
        8 + int.from_bytes((layout / s).read_bytes()[:8], "little") for s in shards)
    for name in ("model.visual.patch_embed.proj.weight", "model.visual.deepstack_merger_list.1.linear_fc2.weight",
                 "model.language_model.layers.1.self_attn.q_norm.weight", "model.language_model.embed_tokens.weight"):
        assert name in index["weight_map"]
    assert "lm_head.weight" not in index["weight_map"]  # tied, as in the published 4B
    config = json.loads((layout / "config.json").read_text())
    assert config["text_config"]["vocab_size"] == 151936 and config["image_token_id"] == 151655
    assert json.loads((layout / "chat_template.json").read_text())["chat_template"] == qwen_published.CHAT_TEMPLATE


def test_4b_variant_is_the_published_shape_in_two_shards():
    specs = qwen_layout.tensor_specs(qwen_layout.variant_config("4b"))
    assert sum(int(np.prod(s)) for _, s in specs) == 4_437_815_808
    shards = qwen_layout.plan_shards(specs, qwen_published.MAX_SHARD_BYTES_4B)
    assert len(shards) == qwen_published.SHARDS_4B
    assert qwen_layout.variant_config("4b") == qwen_published.CONFIG_4B


def test_tokenizer_is_qwens_bpe(layout):
    """Our tokenizer.json against tiktoken running Qwen's ranks directly: the same ids on varied text."""
    import tiktoken
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(layout))
    ref = tiktoken.Encoding("qwen", pat_str=qwen_vocab.PRETOKENIZE_REGEX, mergeable_ranks=qwen_vocab.load_ranks(),
                            special_tokens=qwen_vocab.special_token_ids())
    texts = ["Hello world", "Segment the thyroid nodule. Region: (120,80),(410,300).",
             "甲状腺结节的超声图像", "  tabs\tand\n\nnewlines  ", "Ünïcödé — “quotes” 😀 1234567", "it's they'll I'D"]
    for text in texts:
        assert tok(text, add_special_tokens=False)["input_ids"] == ref.encode(text), text
    assert tok("Hello world")["input_ids"] == [9707, 1879]
    assert len(tok) == 151669
    for token, want in qwen_vocab.special_token_ids().items():
        assert tok.convert_tokens_to_ids(token) == want


def test_grounding_tokens_keep_qwens_ids_and_add_only_the_missing(model):
    ids = model.token_ids
    assert ids[grounding.REF_START] == 151646 and ids[grounding.REF_END] == 151647
    assert ids[grounding.BOX_START] == 151648 and ids[grounding.BOX_END] == 151649
    assert model.config.added_token_ids == [151669, 151670, 151671, 151672, 151673]
    assert model.qwen.get_input_embeddings().weight.shape[0] == 151936  # spare rows: nothing resized
    enc = model.tokenizer(grounding.format_mask("lesion"), add_special_tokens=False)["input_ids"]
    assert enc.count(model.seg_mask_id) == 16 and enc[0] == 151646


VISUAL = [("segment", "thyroid nodule", {}), ("detect", None, {"box": (20, 30, 120, 140)}),
          ("keypoints", "fetal head", {"points": [(40, 50), (90, 60)], "labels": [1, 0]}),
          ("measure", "kidney length", {}), ("diagnose", None, {}), ("report", None, {}),
          ("ask", "Is there free fluid?", {})]


class _Captured(Exception):
    """Raised by the recording forward once the prompt is captured: nothing needs decoding."""


def test_chat_template_and_predictor_give_the_same_token_ids(model):
    """What the Predictor feeds (captured at the model) equals the published template rendered and tokenised."""
    from umind_core.inference.predictor import Predictor

    img = make_image(0)
    fed: list[list[int]] = []
    original = model.forward

    def recording(*args, **kwargs):
        fed.append(kwargs["input_ids"][0].tolist())
        if len(fed) > 1:
            raise _Captured
        return original(*args, **kwargs)

    # eager: the prompt is captured at model.forward, which the fast decode path does not call after the image
    predictor = Predictor(model, max_new_tokens=1, decode="eager")
    model.forward = recording
    try:
        predictor.set_image(img)  # the image prefix, run once
        for task, prompt, visual in VISUAL:
            del fed[1:]
            with pytest.raises(_Captured):
                predictor.predict(task, prompt, **visual)
            user_text = _user_text(predictor, task, prompt, visual)
            messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": user_text}]}]
            rendered = model.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            assert rendered == prompts.chat_prompt(user_text)
            want = model.processor(images=[img], text=[rendered], return_tensors="pt")["input_ids"][0].tolist()
            assert fed[0] + fed[1] == want, task
    finally:
        del model.forward


def _user_text(predictor, task, prompt, visual) -> str:
    frame = predictor._state.views[0][0]
    return predictor._row(task, prompt, visual.get("box"), visual.get("points"), visual.get("labels"),
                          [frame]).user_text


def test_grounded_answer_with_a_mask_through_the_predictor(planted):
    from umind_core.inference.predictor import Predictor

    predictor = Predictor(UMindVL.from_pretrained(planted), max_new_tokens=32)
    predictor.set_image(make_image(0, height=200, width=300))
    result = predictor.predict("segment", "lesion")
    assert result.text == grounding.format_mask("lesion")
    (obj,) = result.objects
    assert obj.label == "lesion" and obj.mask.shape == (200, 300) and obj.mask.dtype == bool


def _mask_sample(model):
    img = make_image(0)
    text = prompts.chat_prompt(prompts.build_user_text("segment", "lesion"))
    enc = dict(model.processor(images=[img], text=[text + grounding.format_mask("lesion") + "<|im_end|>"],
                               return_tensors="pt"))
    labels = enc["input_ids"].clone()
    labels[:, : len(model.processor(images=[img], text=[text], return_tensors="pt")["input_ids"][0])] = -100
    target = torch.zeros(1, 256, 256)
    target[0, 32:117, 42:127] = 1
    return enc, labels, [target]


def test_one_lora_step_trains_and_the_version_refers_to_the_base(layout, tmp_path):
    model = UMindVL.from_pretrained(layout, trainable=True)
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n or "trainable_tokens" in n or n.startswith("mask_decoder.")
                             for n in trainable)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    enc, labels, targets = _mask_sample(model)
    out = model(**enc, labels=labels, mask_targets=targets)
    assert torch.isfinite(out.loss) and out.mask_loss is not None
    out.loss.backward()
    torch.optim.AdamW(trainable.values(), lr=1e-3).step()
    changed = {n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())}
    assert changed and changed <= set(trainable)
    assert any(n.startswith("mask_decoder.") for n in changed) and any("lora_B" in n for n in changed)

    version = model.save_pretrained(tmp_path / "v1")
    config = json.loads((version / "umind_config.json").read_text())
    assert config["base_model"] == str(layout.resolve())
    assert not list(version.rglob("model-*.safetensors")) and not (version / "base").exists()
    size = sum(p.stat().st_size for p in version.rglob("*") if p.is_file())
    assert size < sum(p.stat().st_size for p in layout.glob("model-*")) / 2
    model.eval()
    reloaded = UMindVL.from_pretrained(version)
    with torch.no_grad():
        a, b = model(**enc).logits, reloaded(**enc).logits
    assert torch.allclose(a, b, atol=1e-4)


def test_bf16_weights_with_float32_arithmetic_train_like_float32(layout):
    """`compute_in_float32` (the 4B model on a CPU without bf16 instructions): frozen weights stay bf16, trainable
    ones become float32, and a LoRA step's loss and gradients equal those of the same weights held in float32
    (up to the bf16 rounding of the pixels, which follow the model's dtype)."""
    from umind_core.modeling.speedups.upcast import compute_in_float32

    def load(upcast: bool):
        torch.manual_seed(0)  # the same fresh LoRA and decoder in both
        m = UMindVL.from_pretrained(layout, dtype="bfloat16", trainable=True)
        assert (compute_in_float32(m) > 0) if upcast else m.to(torch.float32) is m
        return m

    mixed, full = load(True), load(False)
    frozen = {p.dtype for p in mixed.parameters() if not p.requires_grad}
    assert frozen == {torch.bfloat16} and {p.dtype for p in mixed.parameters() if p.requires_grad} == {torch.float32}
    enc, labels, targets = _mask_sample(mixed)
    losses, grads = [], []
    for m in (mixed, full):
        m.train()
        torch.manual_seed(1)  # the same LoRA dropout
        e = {k: (v.to(m.dtype) if v.is_floating_point() else v) for k, v in enc.items()}
        out = m(**e, labels=labels, mask_targets=targets)
        out.loss.backward()
        losses.append(float(out.loss))
        grads.append({n: p.grad for n, p in m.named_parameters() if p.requires_grad})
    assert losses[0] == pytest.approx(losses[1], rel=1e-4)
    assert grads[0].keys() == grads[1].keys() and all(g is not None for g in grads[0].values())
    compared = 0
    for n, g in grads[1].items():
        if float(g.norm()) > 1e-6:  # a few decoder biases get ~1e-8: rounding, not signal
            assert float((grads[0][n] - g).norm() / g.norm()) < 0.02, n
            compared += 1
    assert compared > 20 and any("lora_B" in n for n in grads[1])


# ------------------------------------------------------------------------------------------------ bad input
def _faulty_copy(layout: Path, tmp_path: Path) -> Path:
    """A folder of links to the layout's files: a test replaces the one it breaks."""
    folder = tmp_path / "faulty"
    folder.mkdir()
    for p in layout.iterdir():
        (folder / p.name).symlink_to(p)
    return folder


def _rewrite_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.unlink()
    path.write_text(json.dumps(data))


def _drop_image_pad(folder: Path) -> None:
    _rewrite_json(folder / "tokenizer_config.json", lambda d: d["added_tokens_decoder"].pop("151655"))
    _rewrite_json(folder / "tokenizer.json",
                  lambda d: d.__setitem__("added_tokens", [t for t in d["added_tokens"] if t["id"] != 151655]))


FAULTS = {
    "missing shard": (lambda f: (f / "model-00002-of-00003.safetensors").unlink(),
                      ["model.safetensors.index.json", "model-00002-of-00003.safetensors"]),
    "index names a missing tensor": (
        lambda f: _rewrite_json(f / "model.safetensors.index.json", lambda d: d["weight_map"].__setitem__(
            "model.language_model.layers.7.mlp.up_proj.weight", "model-00001-of-00003.safetensors")),
        ["model.safetensors.index.json", "layers.7.mlp.up_proj.weight", "model-00001-of-00003.safetensors"]),
    "tokenizer without <|image_pad|>": (_drop_image_pad, ["<|image_pad|>", "tokenizer"]),
    "other model type": (lambda f: _rewrite_json(f / "config.json", lambda d: d.__setitem__("model_type", "llava")),
                         ["config.json", "'llava'", "qwen3_vl"]),
    "Qwen2-VL": (lambda f: _rewrite_json(f / "config.json", lambda d: d.__setitem__("model_type", "qwen2_vl")),
                 ["config.json", "Qwen2-VL", "Qwen3-VL"]),
    "Qwen2.5-VL": (lambda f: _rewrite_json(f / "config.json", lambda d: d.__setitem__("model_type", "qwen2_5_vl")),
                   ["config.json", "Qwen2.5-VL", "Qwen3-VL"]),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_bad_folders_are_named_before_any_weight_is_read(layout, tmp_path, monkeypatch, fault):
    import umind_core.modeling.umind as umind

    def no_weights(*_):
        raise AssertionError("weights were read before the folder was checked")

    monkeypatch.setattr(umind, "_load_qwen", no_weights)
    folder = _faulty_copy(layout, tmp_path)
    breaker, words = FAULTS[fault]
    breaker(folder)
    with pytest.raises(UMindModelError) as err:
        UMindVL.from_pretrained(folder)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_gpu_check_runs_on_cpu_with_the_small_variant(layout, tmp_path):
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "gpu_check.py"), str(layout), "--device", "cpu",
                           "--dtype", "float32", "--size", "256", "--frames", "2", "--answer", "ref", "--skip-train", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {r["step"]: r for r in json.loads(out.read_text())["rows"]}
    assert all(r["ms"] is not None and r["ms"] > 0 for r in rows.values()), rows
    per_token = next(r for name, r in rows.items() if name.startswith("decode, per token"))
    assert per_token["ratio"] is not None and per_token["limit_ms"] > 0
    assert any(name.startswith("mask chunk") for name in rows)


@pytest.mark.server
def test_grounded_answer_with_a_mask_through_the_server(planted, tmp_path):
    """`--conf model` names the hub-layout folder itself, as a user names /models/Qwen3-VL-4B-Instruct."""
    import requests
    from PIL import Image

    from server_utils import start_server

    studies = tmp_path / "studies"
    studies.mkdir()
    Image.fromarray(make_image(0)).save(studies / "img0.png")
    conf = {"model": str(planted), "workdir": str(tmp_path / "work"), "retrain_every": "0", "max_new_tokens": "32"}
    server = start_server(studies, conf, tmp_path / "server.log", env={"MONAI_LABEL_AUTO_UPDATE_SCORING": "false"},
                          timeout=300)  # a hang guard, not a goal: the start took over 120 s at load average 7
    try:
        resp = requests.post(f"{server.url}/infer/umind_segment?image=img0&output=json",
                             data={"params": json.dumps({"prompt": "lesion"})}, timeout=300)
        assert resp.status_code == 200, resp.text + server.log_tail()
        body = resp.json()
        assert body["label_names"] == {"lesion": 1}
        (result,) = body["umind"]["results"]
        assert result["text"] == grounding.format_mask("lesion")
        (obj,) = result["objects"]
        assert obj["label"] == "lesion" and obj["mask"]["shape"] == [256, 256]
    finally:
        server.stop()
