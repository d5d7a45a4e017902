"""Shared pieces of the Qwen3-VL benchmarks (bench_qwen4b_cpu.py, gpu_check.py): a scripted answer and timers.

A folder from `scripts/make_qwen_layout.py` has random weights, so greedy decoding would ramble to
max_new_tokens. `ScriptedHead` wraps the LM head: it computes the real logits over the whole vocabulary (the same
cost as ever), then raises the next token of a fixed grounded answer above all others. The Predictor then runs
its real path (cached prefix, prompt forward, decode steps, the 16 mask tokens in one forward, the mask decoder)
on a known answer, and the head's call times give each step's duration.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import torch
from torch import nn

from umind_core.answers import grounding
from umind_core import prompts


def answer_script(tokenizer, label: str = "thyroid nodule", box: tuple[int, int, int, int] | None = (120, 340, 260, 480),
                  mask: bool = True) -> list[int]:
    """Token ids the model is made to choose: a labelled box, then one mask (its first <|seg_mask|>), then <|im_end|>."""
    text = grounding.format_box(grounding.Box(*box), label) if box is not None else grounding.format_ref(label)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if mask:
        ids.append(tokenizer.convert_tokens_to_ids(grounding.SEG_MASK))
    return ids + [tokenizer.convert_tokens_to_ids(prompts.ASSISTANT_END)]


class ScriptedHead(nn.Module):
    """The LM head, plus: while armed, call k makes script[k] the argmax at the last position of every row."""

    def __init__(self, head: nn.Module, sync=None):
        super().__init__()
        self.head = head
        self.script: list[int] = []
        self.calls: list[float] = []  # perf_counter after each armed call (device synchronised)
        self._sync = sync or (lambda: None)

    def arm(self, script: list[int]) -> None:
        self.script, self.calls = list(script), []

    def disarm(self) -> None:
        self.script = []

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.head(hidden)
        if self.script and len(self.calls) < len(self.script):
            tok = self.script[len(self.calls)]
            logits[:, -1, tok] = logits[:, -1].max() + 100.0
            self._sync()
            self.calls.append(time.perf_counter())
        return logits


def install_script_head(model) -> ScriptedHead:
    """Put a ScriptedHead on the model's Qwen (idempotent)."""
    qwen = model.qwen
    if isinstance(qwen.lm_head, ScriptedHead):
        return qwen.lm_head
    sync = torch.cuda.synchronize if model.device.type == "cuda" else None
    head = ScriptedHead(qwen.lm_head, sync)
    qwen.lm_head = head
    return head


def step_times(head: ScriptedHead, started: float, seg_mask_id: int) -> dict:
    """Split an answer's time: the prompt forward, each decode step, and the forward that fed the mask chunk."""
    marks = [started] + head.calls
    steps = np.diff(marks).tolist()
    chosen = head.script[: len(head.calls)]
    out = {"prompt_s": steps[0], "decode_steps": len(steps) - 1}
    text_steps = [s for s, tok in zip(steps[1:], chosen[:-1]) if tok != seg_mask_id]
    mask_steps = [s for s, tok in zip(steps[1:], chosen[:-1]) if tok == seg_mask_id]
    out["per_token_s"] = float(np.median(text_steps)) if text_steps else None
    out["mask_chunk_s"] = mask_steps[0] if mask_steps else None
    return out


class PeakRSS:
    """Peak resident memory of this process over a block (sampled every 20 ms; ru_maxrss cannot be reset)."""

    def __init__(self):
        import psutil

        self._proc = psutil.Process(os.getpid())
        self.peak = 0
        self._stop = threading.Event()

    def __enter__(self):
        self.peak = self._proc.memory_info().rss
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self._proc.memory_info().rss)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)
        return False


def lora_step(model, image: np.ndarray, lr: float = 1e-4) -> dict:
    """One AdamW step of LoRA (+ new token rows + decoder) on one segment conversation with a mask target."""
    h, w = image.shape[:2]
    text = prompts.chat_prompt(prompts.build_user_text("segment", "lesion"))
    full = text + grounding.format_mask("lesion") + prompts.ASSISTANT_END
    enc = dict(model.processor(images=[image], text=[full], return_tensors="pt"))
    n_prompt = len(model.processor(images=[image], text=[text], return_tensors="pt")["input_ids"][0])
    enc = {k: (v.to(model.device, model.dtype) if v.is_floating_point() else v.to(model.device))
           for k, v in enc.items()}
    labels = enc["input_ids"].clone()
    labels[:, :n_prompt] = -100
    target = torch.zeros(1, h, w, device=model.device)
    target[0, h // 4: h // 2, w // 4: w // 2] = 1
    params = [p for p in model.parameters() if p.requires_grad]
    before = {id(p): p.detach().float().clone() for p in params}
    opt = torch.optim.AdamW(params, lr=lr)
    model.train()
    sync = torch.cuda.synchronize if model.device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    loss = model(**enc, labels=labels, mask_targets=[target]).loss
    loss.backward()
    opt.step()
    sync()
    elapsed = time.perf_counter() - t0
    model.eval()
    changed = sum(1 for p in params if not torch.equal(before[id(p)], p.detach().float()))
    return {"step_s": elapsed, "loss": float(loss), "tokens": int(enc["input_ids"].shape[1]),
            "trainable_tensors": len(params), "changed_tensors": changed}


def speckle_frame(size: int, seed: int = 0) -> np.ndarray:
    """A speckled grey frame with a dark lesion, size x size x 3 uint8."""
    rng = np.random.default_rng(seed)
    img = (80 + rng.random((size, size)) * 175).astype(np.uint8)
    img[size // 4: size // 2, size // 4: size // 2] //= 5
    return np.repeat(img[..., None], 3, axis=2)
