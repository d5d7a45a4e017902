"""Decoding on a preallocated KV cache without transformers' per-step overhead.

Why this exists: on the demo model one eager decode step through `transformers` costs some 4-5 ms while its
arithmetic is about 0.1 ms. A profile of one step (docs/performance.md, "Decode speed") shows the time in several
hundred tiny ATen calls and the Python around them: the decorator and output-capture layers of the HF forward, the mask
builder, `DynamicCache.update` growing every layer's keys and values with `torch.cat`, M-RoPE recomposition,
per-module dispatch, and three separate q/k/v (and gate/up) matmuls per layer. None of that depends on the
weights; all of it is paid again at every token.

What this module does instead, for the tokens fed *after* the image prefix (the prompt, the answer, the mask
tokens), which are all text:
- `DecodeWeights` gathers the language model's weights once: q/k/v fused into one matrix and gate/up into
  another, and adapters merged (a LoRA layer's W + s*B@A, PEFT's trainable-token rows written into a plain
  embedding / lm_head) so that no wrapper runs per step. The model itself is not modified: training still sees
  its PEFT modules.
- `StaticKVCache` holds every layer's keys and values in tensors allocated once; a step writes one slot, and
  going back to the image prefix after a prompt is moving an integer (no copy, no reallocation).
- Text tokens after the image have equal t/h/w M-RoPE positions, for which Qwen3-VL's interleaved M-RoPE equals
  plain 1-D RoPE: cos/sin come from one table lookup.
- On the CPU (float32), the eager lean step and every prompt read projections that oneDNN packed once
  (`packed_linear`): MKL's product repacks an unpacked weight at every call, and a packed one also gives a row
  the same arithmetic in a batch as alone.
- The single-token step can be compiled (`torch.compile`, shapes fixed by batch and cache capacity, the write
  slot passed as a tensor so the graph does not change with the position). A failing compile falls back to the
  eager lean step with one warning line; `transformers`' own forward stays the reference (Predictor
  `decode="eager"`), and tests hold the two equal.
- `decode="tuned"` compiles the same step with the weights frozen into the graph and its products autotuned
  (inductor's `freezing` and `max_autotune`; on the CPU its C++ GEMM template competes with MKL). Why: MKL's
  product for a handful of rows repacks the weight matrix at every call, so on this project's 2-core machine 17
  products of the demo model's shapes took 0.4 ms for one row but 1.0 ms for 4 and 1.9 ms for 8 (a batch of
  requests paid nearly as much as the same requests one by one); with prepacked weights and the tuned template
  they took 0.25, 0.33 and 0.77 ms. The price is time and memory: the first step of each batch size tunes for
  some 10-40 s on 2 cores (inductor keeps what it learned on disk, so a later process tunes faster), and the
  frozen graph holds its own packed copy of the weights.
- `decode="auto"` (the default: a server answers at once and speeds up as graphs are built) is `tuned` without the
  wait: a step whose tuned graph is not built yet runs the eager lean step (what `static` runs) while one
  background thread builds the graph (`step_builder.BackgroundBuilder`); later steps of that batch bucket and
  cache capacity replay it. Inductor's on-disk caches can be pointed at a lasting folder
  (`step_builder.use_compile_cache`), so that a restarted process rebuilds faster.

The image prefix's language layers run here too (`FastDecoder.encode_prefix`: its M-RoPE positions and DeepStack
features given); the vision encoder runs through `transformers`, once per image.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import math
import time
import types
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from .packed_linear import PackedWeight, linear, unpackable_reason
from .step_builder import BackgroundBuilder, one_line, use_compile_cache

__all__ = ["DECODE_MODES", "DEFAULT_DECODE", "SERVING_DECODE", "serving_mode", "GRAPH_MODES", "DecodeWeights", "StaticKVCache", "FastDecoder",
           "FastOutput", "build_step", "for_predictor", "unsupported_reason", "LEAN_MAX_WEIGHT_BYTES"]

logger = logging.getLogger(__name__)

DECODE_MODES = ("auto", "static", "compiled", "tuned", "eager")
GRAPH_MODES = ("auto", "compiled", "tuned")  # the modes that build a step graph per batch size (and cache capacity)
DECODE_ENV = "UMIND_DECODE"  # the default mode for every Predictor of a process (server, CLI) without code changes
#: what a plain Predictor (evaluation, the loop's scoring, scripts) decodes with when neither `decode` nor
#: UMIND_DECODE names a mode: short-lived processes would pay background builds they never use
DEFAULT_DECODE = "static"
#: what the server's Predictor and `umind infer` decode with (`serving_mode`): the fastest without a wait
SERVING_DECODE = "auto"
#: above this many bytes of language-model weights a default decode (no mode named, or "auto") is eager: the lean
#: path keeps its own copy of the projections (fused, adapters merged), which on Qwen3-VL-4B in bf16 (8.2 GB) took
#: 95 s to build, doubled the process to 20 GiB and decoded at 0.9 s a token against eager's 0.48 (2 CPU cores,
#: one run each, 2026-12-05); the demo model's (a few MB) decodes 2-6x faster through it. A mode named on purpose
#: (`decode`, UMIND_DECODE) is still honoured.
LEAN_MAX_WEIGHT_BYTES = 2 << 30
CAPACITY_STEP = 256  # cache capacities are multiples of this, so a compiled step is reused across prompts
PROMPT_ROOM = 64  # slots allocated for a prompt beyond the answer; a longer prompt grows the cache once
# Slots allocated up front for an answer (and its mask tokens); a longer answer grows the cache once. Why not room
# for max_new_tokens: the single-token step attends over the whole capacity, and attention is most of a step of
# several rows. On the demo model a prompt and its answer took 30-159 slots after the 70-slot image prefix (8 tasks
# on 8 images), and room for 256 answer tokens made its caches 512 slots instead of 256: a tuned step of 8 rows
# took 3.41 against 2.22 ms, of 1 row 0.77 against 0.64 ms (medians of 15, one process).
ANSWER_ROOM = 112
# How many step graphs one decoder builds: a tuned graph holds its own packed copy of the language model's weights
# (freezing), so the count is bounded by memory: GRAPH_WEIGHT_BUDGET bytes of such copies, and never fewer than
# MIN_GRAPHS (the four batch buckets' single-token steps). The demo model (13 MB) may build 80; a model of 500 MB, 4.
# Keys met past the limit run the eager lean forward.
GRAPH_WEIGHT_BUDGET = 1 << 30
MIN_GRAPHS = 4
STEP, PREFIX = "step", "prefix"  # what a graph computes: tokens after the image prefix, or the prefix itself
GRAPH_TOKEN_STEP = 8  # prompts are padded to whole steps of this width where step graphs run (graph_tokens)
MAX_GRAPH_TOKENS = 64  # wider prompts (and odd-width mask groups of a mixed batch) run the eager lean forward


@dataclass
class FastOutput:
    """What the Predictor reads from a forward: logits of the last fed position and every fed position's state."""

    logits: torch.Tensor  # (B, 1, V)
    hidden_states: torch.Tensor  # (B, k, D)


@dataclass
class _LayerWeights:
    ln1: torch.Tensor
    ln2: torch.Tensor
    wqkv: torch.Tensor
    bqkv: torch.Tensor | None
    qk_norm: torch.Tensor  # (heads + kv_heads, head_dim): q_norm's weight per query head, then k_norm's per key head
    wo: torch.Tensor
    bo: torch.Tensor | None
    wgu: torch.Tensor
    wdown: torch.Tensor


def unsupported_reason(model) -> str | None:
    """Why the lean path cannot reproduce this model's text forward, or None when it can."""
    qwen = getattr(model, "qwen", None)
    cfg = getattr(getattr(qwen, "config", None), "text_config", None)
    if cfg is None or getattr(cfg, "model_type", None) != "qwen3_vl_text":
        return "not a Qwen3-VL text model"
    rope = getattr(cfg, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        return f"rope_type {rope.get('rope_type')!r} (only 'default' is reproduced)"
    if getattr(cfg, "hidden_act", None) != "silu":
        return f"hidden_act {cfg.hidden_act!r} (only silu is reproduced)"
    if getattr(cfg, "sliding_window", None):
        return "sliding-window attention"
    return None


def _language_weight_bytes(model) -> int:
    """Bytes of the language model's own weights (its layers and embedding), without peft's adapter tensors."""
    lm = model.qwen.get_decoder() if hasattr(model.qwen, "get_decoder") else model.qwen
    return sum(p.numel() * p.element_size() for n, p in lm.named_parameters()
               if "lora_" not in n and "trainable_tokens_" not in n)


def _linear_weights(module: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight, bias) of what `module` computes as y = x @ W.T + b.

    A plain nn.Linear gives its own tensors (shared, no copy). Anything else (a PEFT LoRA layer, a trainable-token
    wrapper around lm_head) is probed once with the identity and a zero input, which is exact for an affine map and
    needs no knowledge of the wrapper's internals; the per-step wrapper code then never runs.
    """
    if type(module) is nn.Linear:
        return module.weight.detach(), None if module.bias is None else module.bias.detach()
    base = _find_linear(module)
    eye = torch.eye(base.in_features, device=base.weight.device, dtype=base.weight.dtype)
    with torch.no_grad():
        bias = module(torch.zeros_like(eye[:1]))[0]
        weight = (module(eye) - bias).T.contiguous()
    return weight, (bias if bool(bias.any()) else None)


def _find_linear(module: nn.Module) -> nn.Linear:
    for sub in module.modules():
        if type(sub) is nn.Linear:
            return sub
    raise TypeError(f"{type(module).__name__} holds no nn.Linear to size a probe by")


def _embedding_weight(module: nn.Module) -> torch.Tensor:
    """The rows an embedding module returns; a wrapper (PEFT trainable tokens) is read once over every id."""
    if type(module) is nn.Embedding:
        return module.weight.detach()
    base = next(m for m in module.modules() if type(m) is nn.Embedding)
    with torch.no_grad():
        return module(torch.arange(base.num_embeddings, device=base.weight.device)).contiguous()


class DecodeWeights:
    """The language model's weights in the form the lean step uses; built once per model snapshot."""

    def __init__(self, model):
        reason = unsupported_reason(model)
        if reason:
            raise TypeError(f"fast decoding does not support this model: {reason}")
        qwen = model.qwen
        cfg = qwen.config.text_config
        lm = qwen.model.language_model
        self.n_heads, self.n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = float(cfg.rms_norm_eps)
        self.embed = _embedding_weight(qwen.get_input_embeddings())
        lm_head, self.lm_bias = _linear_weights(qwen.lm_head)
        self.lm_head = self._layout(lm_head)
        self.norm = lm.norm.weight.detach()
        self.layers = [self._layer(layer) for layer in lm.layers]
        rot = lm.rotary_emb
        self.mrope = rot  # the image prefix's 3-D positions (t, h, w) are rotated by the model's own module
        self.inv_freq = rot.inv_freq.detach().float()
        self.attention_scaling = float(rot.attention_scaling)
        self.dtype, self.device = self.embed.dtype, self.embed.device
        self._rope_table: tuple[torch.Tensor, torch.Tensor] | None = None
        self.eager, self.unpacked_reason = self._packed()

    def _packed(self) -> tuple["DecodeWeights", str | None]:
        """(what eager_forward reads, why it is not packed): this snapshot with its projections packed for
        oneDNN (see packed_linear), or the snapshot itself where they cannot be. The compiled step keeps the
        plain tensors: its graph does its own products."""
        projections = [self.lm_head] + [t for layer in self.layers for t in (layer.wqkv, layer.wo, layer.wgu,
                                                                             layer.wdown)]
        reason = unpackable_reason(projections)
        if reason is not None:
            return self, reason
        view = copy.copy(self)
        view.lm_head = PackedWeight(self.lm_head)
        view.layers = [replace(layer, wqkv=PackedWeight(layer.wqkv), wo=PackedWeight(layer.wo),
                               wgu=PackedWeight(layer.wgu), wdown=PackedWeight(layer.wdown))
                       for layer in self.layers]
        view.eager, view.unpacked_reason = view, None  # a whole DecodeWeights: its eager form is itself
        return view, None

    def _layer(self, layer) -> _LayerWeights:
        att, mlp = layer.self_attn, layer.mlp
        (wq, bq), (wk, bk), (wv, bv) = (_linear_weights(m) for m in (att.q_proj, att.k_proj, att.v_proj))
        bqkv = None
        if bq is not None or bk is not None or bv is not None:
            bqkv = torch.cat([b if b is not None else w.new_zeros(w.shape[0]) for w, b in ((wq, bq), (wk, bk), (wv, bv))])
        wo, bo = _linear_weights(att.o_proj)
        (wg, bg), (wu, bu), (wd, bd) = (_linear_weights(m) for m in (mlp.gate_proj, mlp.up_proj, mlp.down_proj))
        if bg is not None or bu is not None or bd is not None:
            raise TypeError("MLP biases are not reproduced by the lean step")
        layout = self._layout
        return _LayerWeights(
            ln1=layer.input_layernorm.weight.detach(), ln2=layer.post_attention_layernorm.weight.detach(),
            wqkv=layout(torch.cat([wq, wk, wv])), bqkv=bqkv,
            qk_norm=torch.cat([att.q_norm.weight.detach().expand(self.n_heads, -1),
                               att.k_norm.weight.detach().expand(self.n_kv, -1)]),
            wo=layout(wo), bo=bo, wgu=layout(torch.cat([wg, wu])), wdown=layout(wd),
        )

    def _layout(self, weight: torch.Tensor) -> torch.Tensor:
        """A projection's (out, in) weight as the step's products read it fastest.

        On the CPU, a single token's product x @ W.T reads W once per token, and MKL reads an (in, out) matrix
        stored row-major about 25% faster than the (out, in) one nn.Linear keeps (measured on this project's
        2-core machine: 17 products of the demo model's shapes, 0.40 against 0.54 ms). So the CPU step keeps
        each projection transposed in memory (a copy) and hands F.linear the transposed view of it: same values,
        same formula, another memory order. CUDA's products take either order at the same speed, and there the
        nn.Linear weight is shared, not copied.
        """
        if weight.device.type != "cpu":
            return weight.contiguous()
        return weight.t().contiguous().t()

    def rope_table(self, n_positions: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin for text positions 0..n-1, computed as transformers computes them (float32, then cast)."""
        if self._rope_table is None or self._rope_table[0].shape[0] < n_positions:
            n = max(n_positions, 2 * (0 if self._rope_table is None else self._rope_table[0].shape[0]), 4096)
            pos = torch.arange(n, device=self.device).float()
            freqs = pos[:, None] * self.inv_freq.to(self.device)[None, :]
            emb = torch.cat((freqs, freqs), dim=-1)
            cos = (emb.cos() * self.attention_scaling).to(self.dtype)
            sin = (emb.sin() * self.attention_scaling).to(self.dtype)
            self._rope_table = (cos, sin)
        return self._rope_table


class StaticKVCache:
    """Keys and values of every layer in tensors allocated once: (B, kv_heads, capacity, head_dim) each.

    `get_seq_length` and `crop` mean what they mean on transformers' DynamicCache, so the Predictor treats both
    caches alike; crop only moves the length (the slots after it are overwritten by the next prompt).

    All rows share one write position, so that a batch of different requests decodes in lockstep. Rows whose
    image prefixes or prompts are shorter than the longest carry holes: `valid` (B, capacity) says which slots
    a row's tokens may attend to. `uniform` stays True while no row has a hole, and then no per-row mask is
    built at all (the single-request path is exactly what it was).
    """

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], length: int,
                 valid: torch.Tensor | None = None):
        self.keys, self.values, self.length = keys, values, int(length)
        b, _, capacity, _ = keys[0].shape
        if valid is None:
            valid = torch.ones((b, capacity), dtype=torch.bool, device=keys[0].device)
        self.valid = valid
        self.uniform = bool(valid[:, : self.length].all())

    @classmethod
    def from_dynamic(cls, cache, capacity: int) -> "StaticKVCache":
        """Copy a filled transformers cache (the image prefix) into preallocated tensors of `capacity` slots."""
        length = cache.get_seq_length()
        keys, values = [], []
        for layer in cache.layers:
            b, h, _, d = layer.keys.shape
            k = layer.keys.new_zeros((b, h, capacity, d))
            v = layer.values.new_zeros((b, h, capacity, d))
            k[:, :, :length] = layer.keys
            v[:, :, :length] = layer.values
            keys.append(k)
            values.append(v)
        return cls(keys, values, length)

    @classmethod
    def stack(cls, rows: list[tuple["StaticKVCache", int]], capacity: int) -> "StaticKVCache":
        """One cache whose row i is row `rows[i][1]` of cache `rows[i][0]`, each ending at the longest prefix.

        A shorter prefix is right-aligned (its leading slots are holes), so every row's next token goes to the
        same slot; the caller shifts that row's RoPE positions by the hole's width.
        """
        length = max(c.length for c, _ in rows)
        first = rows[0][0]
        keys = [t.new_zeros((len(rows), t.shape[1], capacity, t.shape[3])) for t in first.keys]
        values = [t.new_zeros((len(rows), t.shape[1], capacity, t.shape[3])) for t in first.values]
        valid = torch.ones((len(rows), capacity), dtype=torch.bool, device=first.valid.device)
        for i, (cache, r) in enumerate(rows):
            hole = length - cache.length
            valid[i, :hole] = False
            valid[i, hole:length] = cache.valid[r, : cache.length]
            for dst, src in ((keys, cache.keys), (values, cache.values)):
                for layer, t in enumerate(src):
                    dst[layer][i, :, hole:length] = t[r, :, : cache.length]
        return cls(keys, values, length, valid)

    def padded(self, rows: int) -> "StaticKVCache":
        """This cache with copies of row 0 appended up to `rows` rows (see FastDecoder: batch buckets)."""
        if rows <= self.rows:
            return self
        return self._rows_rebuilt(lambda t: _pad_rows(t, rows))

    def leading(self, n: int) -> "StaticKVCache":
        """A view of this cache's first n rows: the same storage, so what is written through it lands here. The
        capacity must already be what the writes need (`ensure` on a view would reallocate the view alone)."""
        return self._rows_rebuilt(lambda t: t[:n])

    def select(self, keep: list[int], rows: int) -> "StaticKVCache":
        """A copy holding rows `keep` of this cache, then copies of its first up to `rows` rows."""
        index = torch.tensor(keep, device=self.valid.device)
        return self._rows_rebuilt(lambda t: _pad_rows(t.index_select(0, index), rows))

    def _rows_rebuilt(self, rows_of) -> "StaticKVCache":
        """A cache at this length whose keys, values and `valid` are rows_of(each), a function of the rows alone."""
        out = StaticKVCache([rows_of(k) for k in self.keys], [rows_of(v) for v in self.values], self.length,
                            rows_of(self.valid))
        out.uniform = self.uniform
        return out

    @property
    def rows(self) -> int:
        return self.keys[0].shape[0]

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, max_length: int) -> None:
        """Keep the first `max_length` tokens; a negative value removes that many from the end (as DynamicCache)."""
        self.length = self.length + max_length if max_length < 0 else min(self.length, max_length)

    def mark(self, start: int, pad: torch.Tensor | None) -> None:
        """Slots start..start+k-1 are about to be written: valid unless `pad` (B, k) says the row's token is padding."""
        if pad is None:
            self.valid[:, start:] = True
            return
        k = pad.shape[1]
        self.valid[:, start: start + k] = ~pad
        self.valid[:, start + k:] = True
        if bool(pad.any()):
            self.uniform = False

    def ensure(self, needed: int) -> None:
        """Grow (by whole CAPACITY_STEPs) when a prompt or an answer would run past the allocated slots."""
        if needed <= self.capacity:
            return
        capacity = _round_up(needed, CAPACITY_STEP)
        for store in (self.keys, self.values):
            for i, t in enumerate(store):
                grown = t.new_zeros((*t.shape[:2], capacity, t.shape[3]))
                grown[:, :, : self.length] = t[:, :, : self.length]
                store[i] = grown
        valid = torch.ones((self.valid.shape[0], capacity), dtype=torch.bool, device=self.valid.device)
        valid[:, : self.length] = self.valid[:, : self.length]
        self.valid = valid


def graph_tokens(k: int, rows: int = 1) -> bool:
    """Whether a forward of k tokens a row on `rows` cache rows runs a step graph (in the modes that build them):
    the single-token step at any rows; for a lone row also widths in whole GRAPH_TOKEN_STEPs up to MAX_GRAPH_TOKENS
    (a mask group, a prompt padded to its bucket, a draft).

    Why: the eager lean forward of a 17-token prompt or a 16-token mask group took about 4 ms on the demo model,
    mostly the Python and dispatch around some 70 small calls; a graph per width removes them. Widths come in steps
    so that a handful of graphs serve every prompt (each takes 10-40 s to tune). Why lone rows only: every (rows,
    width) pair is a graph of its own, and a server meeting batches of 2, 4 and 8 rows would tune dozens on its
    cores; a batch's prompt is one forward for all its rows, where the dispatch the graph saves is shared."""
    return k == 1 or (rows == 1 and k % GRAPH_TOKEN_STEP == 0 and k <= MAX_GRAPH_TOKENS)


def _pad_rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    """`t` (B, ...) with copies of its row 0 appended up to `rows` rows."""
    return torch.cat([t, t[:1].expand(rows - t.shape[0], *t.shape[1:])])


def _round_up(n: int, step: int) -> int:
    return int(math.ceil(n / step) * step)


def _capacity(prefix: int, answer_tokens: int) -> int:
    """Slots for an image prefix, a prompt and an answer of up to ANSWER_ROOM tokens, in whole CAPACITY_STEPs (so
    compiled steps are reused); `ensure` grows the cache for a longer prompt or answer."""
    return _round_up(prefix + PROMPT_ROOM + min(answer_tokens, ANSWER_ROOM), CAPACITY_STEP)


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen3's RMSNorm, step for step (float32 inside, weight applied after casting back)."""
    dtype = x.dtype
    h = x if dtype == torch.float32 else x.float()  # skipped when a no-op: a step is bound by its call count
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * (h if dtype == torch.float32 else h.to(dtype))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _attention_inputs(w: DecodeWeights, layer: _LayerWeights, x, cos, sin):
    """Norm, fused q/k/v projection, per-head q/k norms and RoPE of one layer: (q, k, v) as (B, heads, k, hd).

    Queries and keys are normed and rotated as one tensor of heads + kv_heads rows (`qk_norm` holds q_norm's
    weight for each query head, then k_norm's for each key head): the same arithmetic per element as two passes,
    in half the calls. Why: a step of a few rows is bound by its count of small calls. Measured on the demo model
    (one process, alternating, bit for bit the same output): a step's ATen calls 810 -> 662, and a step took
    2.21 -> 1.93 ms for 1 row, 2.55 -> 2.24 for 3, 3.05 -> 2.77 for 8 (with the float32 no-op casts in `_rms`
    also skipped).
    """
    b, k, _ = x.shape
    hd, heads = w.head_dim, w.n_heads + w.n_kv
    qkv = linear(_rms(x, layer.ln1, w.eps), layer.wqkv, layer.bqkv)
    qk = _rms(qkv[..., : heads * hd].view(b, k, heads, hd), layer.qk_norm, w.eps)
    cos, sin = cos.transpose(1, 2), sin.transpose(1, 2)  # (B, k, 1, hd): one angle for every head of a token
    qk = qk * cos + _rotate_half(qk) * sin
    value = qkv[..., heads * hd:].view(b, k, w.n_kv, hd).transpose(1, 2)
    return qk[:, :, : w.n_heads].transpose(1, 2), qk[:, :, w.n_heads:].transpose(1, 2), value


def _attention_output_and_mlp(w: DecodeWeights, layer: _LayerWeights, x, attn):
    """Output projection, residual, post-attention norm and the SwiGLU MLP with its residual."""
    b, k, _ = x.shape
    x = x + linear(attn.transpose(1, 2).reshape(b, k, -1), layer.wo, layer.bo)
    gate, up = linear(_rms(x, layer.ln2, w.eps), layer.wgu).chunk(2, dim=-1)
    return x + linear(F.silu(gate) * up, layer.wdown)


def _logits(w: DecodeWeights, x):
    return linear(_rms(x[:, -1:], w.norm, w.eps), w.lm_head, w.lm_bias)


def eager_forward(w: DecodeWeights, keys, values, ids, cos, sin, start: int, valid: torch.Tensor | None = None):
    """k tokens at cache slots start..start+k-1, attending to the slots before them and causally among themselves.

    Used for prompts and the 16 mask tokens (k > 1) and as the single-token step when compiling is off or failed.
    `valid` (B, capacity), when given, also hides each row's holes (see StaticKVCache).
    """
    x = _eager_layers(w, keys, values, F.embedding(ids, w.embed), cos, sin, start, valid)
    return _logits(w, x), _rms(x, w.norm, w.eps)


def _eager_layers(w: DecodeWeights, keys, values, x, cos, sin, start: int, valid: torch.Tensor | None = None,
                  deepstack: tuple = ()):
    """The layers over input states x (B, k, D) at slots start..start+k-1 (see eager_forward); the last layer's
    states, before the final norm. `deepstack[i]` (B, k, D) is added after layer i: Qwen3-VL's DeepStack, the
    vision tower's earlier features fed into the first language layers at the image tokens (zero elsewhere)."""
    k = x.shape[1]
    end = start + k
    mask = None
    if k > 1:  # new token i sees every cached slot and new tokens 0..i
        mask = torch.ones(k, end, dtype=torch.bool, device=x.device).tril(diagonal=start)
    if valid is not None:
        rows = valid[:, None, None, :end]
        mask = rows if mask is None else rows & mask
    scale = w.head_dim ** -0.5
    for i, (layer, kc, vc) in enumerate(zip(w.layers, keys, values)):
        q, key, value = _attention_inputs(w, layer, x, cos, sin)
        kc[:, :, start:end] = key
        vc[:, :, start:end] = value
        attn = F.scaled_dot_product_attention(q, kc[:, :, :end], vc[:, :, :end], attn_mask=mask, scale=scale,
                                              enable_gqa=True)
        x = _attention_output_and_mlp(w, layer, x, attn)
        if i < len(deepstack):
            x = x + deepstack[i]
    return x


def prefix_forward(w: DecodeWeights, keys, values, embeds, cos, sin, deepstack):
    """An image prefix's language layers from slot 0 (FastDecoder.encode_prefix): input states `embeds` (B, L, D),
    M-RoPE cos/sin (B, 1, L, hd), DeepStack features (n, B, L, D) added after the first n layers. Returns the final
    states after the norm. Shapes are fixed by (batch, capacity, L), so one graph serves every frame of a size."""
    x = _eager_layers(w, keys, values, embeds, cos, sin, 0, None, tuple(deepstack))
    return _rms(x, w.norm, w.eps)


def static_step(w: DecodeWeights, keys, values, ids, cos, sin, slot, valid):
    """k tokens per row written at slots `slot` (a tensor of k consecutive slot indices), each attending over the
    whole capacity under a mask (the slots up to its own that the row's `valid` (B, capacity) allows).

    Every shape is fixed by (batch, capacity, k) and the position travels as data, so `torch.compile` builds this
    graph once and replays it at every step (k = 1) or every prompt and mask group of that width (k > 1).
    """
    x = F.embedding(ids, w.embed)
    capacity = keys[0].shape[2]
    seen = torch.arange(capacity, device=ids.device)[None, :] <= slot[:, None]  # (k, capacity)
    hidden = ~(seen[None] & valid[:, None, :])[:, None]  # (B, 1, k, capacity)
    for layer, kc, vc in zip(w.layers, keys, values):
        q, key, value = _attention_inputs(w, layer, x, cos, sin)
        kc.index_copy_(2, slot, key)
        vc.index_copy_(2, slot, value)
        x = _attention_output_and_mlp(w, layer, x, _static_attention(w, q, kc, vc, hidden))
    return _logits(w, x), _rms(x, w.norm, w.eps)


def _static_attention(w: DecodeWeights, q, keys, values, hidden):
    """Attention of k queries per row over the whole cache, written as two products and a softmax.

    Why not F.scaled_dot_product_attention: for one query its CPU kernel took 50-60 us a layer in a profile
    (block loops, allocations) around arithmetic of a few thousand multiply-adds; spelled out, the compiler fuses
    the scale, the mask and the softmax into one loop beside two small products (the compiled demo step measured
    1.15-1.24 ms against 1.50-1.64 ms with SDPA, one process each, both with transposed weights). The query
    heads sharing a key/value head (grouped-query attention) are that head's rows: query head h reads kv head
    h // (heads / kv_heads), as SDPA's enable_gqa does; with k queries a kv head's rows are its query heads'
    k queries, head-major. `hidden` (B, 1, k, capacity) is True where a slot may not be attended to.
    """
    b, _, k, _ = q.shape
    group = w.n_heads // w.n_kv
    scores = torch.matmul(q.reshape(b, w.n_kv, group * k, w.head_dim) * w.head_dim ** -0.5, keys.transpose(-1, -2))
    if k > 1:  # each query head of a kv head repeats the k queries' mask rows
        hidden = hidden.repeat(1, 1, group, 1)
    probs = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1)
    return torch.matmul(probs, values).reshape(b, w.n_heads, k, w.head_dim)


class FastDecoder:
    """Feeds text tokens on a StaticKVCache with the lean step; compiles the single-token step when asked.

    The weights are a snapshot taken at `adopt` (once per image): a model trained in place between two images is
    picked up at the next image, as the eager path's cached image prefix is.

    `background` (decode="auto"): the step graphs are built by a BackgroundBuilder thread instead of by the first
    step that needs one, which meanwhile runs the eager lean step; so no request waits for a graph. The model
    thread runs every step; the builder thread only builds and installs. `compile_cache`: the folder inductor's
    on-disk caches go to (step_builder.use_compile_cache), set here, before this decoder's first compile.
    """

    def __init__(self, model, compile: bool = True, tune: bool = False, background: bool = False,
                 compile_cache=None):
        reason = unsupported_reason(model)
        if reason:
            raise TypeError(f"fast decoding does not support this model: {reason}")
        self.model = model
        self.compile = bool(compile) or bool(tune) or bool(background)
        self.tune = bool(tune)
        self.background = bool(background)
        self.weights: DecodeWeights | None = None
        self._fingerprint: tuple | None = None
        self._builder: BackgroundBuilder | None = None
        self._compiled: dict[tuple, object] = {}
        if self.background:
            tune = self.tune  # not self: the builder must not keep this decoder (and its model) alive
            self._builder = BackgroundBuilder(lambda w, args, key: build_step(w, args, tune, key[5])[0], owner=self,
                                              what="tuned" if tune else "compiled")
            self._compiled = self._builder.graphs  # the builder installs here, under its lock
        self.compile_error: str | None = None  # set once a compile failed; the eager lean step is used from then on
        self._active, self._idle_since = 0, time.monotonic()  # calls under way (in_use), and since when none
        self.compile_cache = use_compile_cache(compile_cache) if self.compile else None
        self.max_graphs = max(MIN_GRAPHS, GRAPH_WEIGHT_BUDGET // max(1, _language_weight_bytes(model)))

    @property
    def mode(self) -> str:
        """The decode mode this decoder runs ("auto" also for a background build of untuned graphs)."""
        if self.background:
            return "auto"
        return "tuned" if self.tune else "compiled" if self.compile else "static"

    def status(self) -> dict:
        """Which decode is live, for /info: {"mode", "steps": [{rows, capacity, dtype, device, state}]} and, when a
        compile failed in a synchronous mode, "error". A step's state is "tuned" or "compiled" (its graph runs),
        "building", "eager (tuning queued)" or "failed: <error>" (that key stays on the eager lean step)."""
        if self._builder is not None:
            states = self._builder.states()
        else:
            states = {key: "tuned" if self.tune else "compiled" for key in list(self._compiled)}
        steps = [{"rows": key[0], "capacity": key[1], "tokens": key[4], "part": key[5],
                  "dtype": str(key[2]).replace("torch.", ""), "device": key[3], "state": state}
                 for key, state in sorted(states.items(), key=lambda item: (*item[0][:2], item[0][4]))]
        out = {"mode": self.mode, "steps": steps}
        if self.compile_error is not None:
            out["error"] = self.compile_error
        return out

    @contextlib.contextmanager
    def in_use(self):
        """Marks a call on the model thread (an image prefix, a batch's answers): background builds wait for the
        model to be idle (step_builder.BackgroundBuilder._wait_for_quiet)."""
        self._active += 1
        try:
            yield
        finally:
            self._active -= 1
            self._idle_since = time.monotonic()

    def idle_seconds(self) -> float:
        """Seconds since the last call marked `in_use` ended (0 while one runs)."""
        return 0.0 if self._active else time.monotonic() - self._idle_since

    def wait_for_builds(self, timeout: float | None = None) -> bool:
        """Block until no step graph is queued or being built in the background (True), or `timeout` passes."""
        return True if self._builder is None else self._builder.wait(timeout)

    def _current_fingerprint(self) -> tuple:
        qwen = self.model.qwen
        params = list(qwen.model.language_model.parameters()) + list(qwen.lm_head.parameters())
        return tuple((id(p), p.data_ptr(), p._version) for p in params)

    def refresh(self) -> DecodeWeights:
        """Rebuild the weight snapshot when any language-model parameter changed (in place or replaced)."""
        fingerprint = self._current_fingerprint()
        if self.weights is None or fingerprint != self._fingerprint:
            self.weights = DecodeWeights(self.model)
            self._fingerprint = fingerprint
            if self._builder is not None:  # also drops queued builds and discards one under way (stale weights)
                self._builder.invalidate()
            else:
                self._compiled.clear()
        return self.weights

    def encode_prefix(self, embeds: torch.Tensor, position_ids: torch.Tensor, visual: torch.Tensor,
                      deepstack: list[torch.Tensor], answer_tokens: int) -> tuple[StaticKVCache, torch.Tensor]:
        """(the cache of an image prefix with room for a prompt and `answer_tokens` more, its final states (B, L, D)):
        the prefix's input states `embeds` (B, L, D: text embeddings, the image's at its placeholders) through the
        lean layers, straight into a StaticKVCache.

        `position_ids` (3, B, L) are its M-RoPE positions (UMindVL.rope_index); `visual` (B, L) marks the image
        tokens, where DeepStack's features `deepstack[i]` (one (N, D) row per image token, in order) join the
        states after layer i. Why not transformers' forward: on the demo model its 4-layer pass over the 70-token
        prefix took 7.3-7.8 ms a frame, mostly dispatch, mask building and a DynamicCache that `adopt` then
        copied; the lean layers took 3.8 ms eagerly and 2.9 ms as a tuned graph (the graph modes build one per
        batch, capacity and prefix length).
        """
        w = self.refresh()
        b, length, _ = embeds.shape
        capacity = _capacity(length, answer_tokens)
        keys = [embeds.new_zeros((b, w.n_kv, capacity, w.head_dim)) for _ in w.layers]
        values = [embeds.new_zeros((b, w.n_kv, capacity, w.head_dim)) for _ in w.layers]
        with torch.no_grad():
            cos, sin = w.mrope(embeds, position_ids)  # (B, L, hd)
            dense = embeds.new_zeros((len(deepstack), *embeds.shape))
            for i, features in enumerate(deepstack):
                dense[i][visual] = features.to(embeds.dtype)
            args = (keys, values, embeds, cos[:, None], sin[:, None], dense)
            hidden = None
            if self.compile and self.compile_error is None and b == 1:  # lone frames only (see graph_tokens)
                hidden = self._graph((b, capacity, w.dtype, str(w.device), length, PREFIX), w, args)
            if hidden is None:
                # the plain projections, not the packed ones prompts read: for the prefix's 70 rows (more than the
                # 64 oneDNN packs for) the packed layers took 4.5 ms against 3.8 (demo model, medians of 40)
                hidden = prefix_forward(w, *args)
        cache = StaticKVCache(keys, values, length)
        return cache.padded(self.rows_for(b)), hidden

    def adopt(self, cache, answer_tokens: int):
        """A static copy of the image-prefix cache with room for a prompt and `answer_tokens` more tokens.

        A model in training mode keeps transformers' cache (and so the eager path): dropout in LoRA layers is part
        of its forward there and the lean step has none.
        """
        if self.model.training:
            return cache
        self.refresh()
        static = StaticKVCache.from_dynamic(cache, _capacity(cache.get_seq_length(), answer_tokens))
        return static.padded(self.rows_for(static.rows))

    def rows_for(self, batch: int) -> int:
        """The rows a cache for `batch` requests holds: with a tuned step (decode "tuned" or "auto"), a bucket (1,
        2, 4, 8, then multiples of 8), the extra rows copies of row 0 whose answers are dropped.

        Why: a tuned step is built per batch size (10-40 s on 2 cores), and concurrent requests arrive in every
        count from 1 to 8. Without buckets a server met new counts for minutes (measured: after a 70 s warm-up
        pass, the timed pass of 8 HTTP clients still tuned new sizes, p95 latency 41 s); with them four graphs
        serve 1-8 requests, at the price of idle rows (a 5-request batch computes 8 rows: tuned, 17 products took
        0.77 ms for 8 rows against 0.33 ms for 4). The compiled (untuned) step builds in about 2 s and its MKL
        products grow with the rows (1.0 ms for 4, 1.9 ms for 8), so it keeps exact sizes.
        """
        if not self.tune or batch <= 1:
            return batch
        if batch <= 8:
            return 1 << (batch - 1).bit_length()
        return _round_up(batch, 8)

    def narrowed(self, cache: StaticKVCache, live: list[int]) -> StaticKVCache | None:
        """A smaller cache holding only rows `live`, once they fit half its rows (a smaller bucket when tuned);
        else None.

        Why: a batch decodes until its longest answer, and a step's cost grows with its rows (tuned, on the demo
        model: 0.64 ms for 1 row, 2.2 ms for 8; the lean eager step 1.7 and 3.1 ms). A batch of 8 mixed requests
        (segments, boxes, diagnoses) took 340 -> 247 ms tuned and 539 -> 481 ms static, with the same answers
        (medians of 8, one process each). Only at half: each narrowing copies the cache. The compiled (untuned)
        step keeps exact sizes, and narrowing would build a graph for every count it meets.
        """
        if self.compile and not self.tune:
            return None
        rows = self.rows_for(len(live))
        if 2 * rows > cache.rows:
            return None
        return cache.select(live, rows)

    def forward(self, cache: StaticKVCache, ids: torch.Tensor, positions: torch.Tensor, start: int,
                pad: torch.Tensor | None = None) -> FastOutput:
        """Feed `ids` (B, k) at cache slots start.. with text RoPE positions `positions` (B, k); `pad` (B, k) marks
        padding tokens (a shorter prompt, left-padded), which no later token attends to."""
        w = self.weights if self.weights is not None else self.refresh()
        batch, k = ids.shape
        if cache.rows > batch:  # bucket rows (rows_for): fed as copies of row 0, dropped from the output
            ids, positions = _pad_rows(ids, cache.rows), _pad_rows(positions, cache.rows)
            pad = None if pad is None else _pad_rows(pad, cache.rows)
        cache.ensure(start + k)
        cache.mark(start, pad)
        positions = positions.clamp(min=0)  # a pad token's position is never read; a real one is never below 0
        cos_table, sin_table = w.rope_table(int(positions.max()) + 1)
        cos, sin = cos_table[positions][:, None], sin_table[positions][:, None]  # (B, 1, k, hd)
        with torch.no_grad():
            out = None
            if self.compile and self.compile_error is None and graph_tokens(k, cache.rows):
                out = self._compiled_step(w, cache, ids, cos, sin, start)
            if out is None:
                valid = None if cache.uniform else cache.valid
                out = eager_forward(w.eager, cache.keys, cache.values, ids, cos, sin, start, valid)
        cache.length = start + k
        return FastOutput(logits=out[0][:batch], hidden_states=out[1][:batch])

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Next-token logits at every position of `hidden` (the normed states a forward returns), for a caller that
        reads more than the last position's (a speculative forward, decode_batch)."""
        w = self.weights if self.weights is not None else self.refresh()
        with torch.no_grad():
            return linear(hidden, w.eager.lm_head, w.lm_bias)

    def prompt_width(self, width: int) -> int:
        """The width to feed a lone row's prompt (or draft) of `width` tokens at: with step graphs, the next graph
        width (`graph_tokens`; the extra columns are padding, holes in the cache), else `width` itself."""
        if not self.compile or width > MAX_GRAPH_TOKENS:
            return width
        return _round_up(width, GRAPH_TOKEN_STEP)

    def stack(self, rows: list[tuple[StaticKVCache, int]], answer_tokens: int) -> StaticKVCache:
        """`StaticKVCache.stack` with room for a prompt and `answer_tokens` more tokens, as `adopt` leaves, and
        the bucket's rows (rows_for)."""
        rows = rows + [rows[0]] * (self.rows_for(len(rows)) - len(rows))
        return StaticKVCache.stack(rows, _capacity(max(c.length for c, _ in rows), answer_tokens))

    def _graph_count(self) -> int:
        """Graphs built, being built, queued or failed (each counts against max_graphs)."""
        return self._builder.count() if self._builder is not None else len(self._compiled)

    def _compiled_step(self, w, cache, ids, cos, sin, start):
        """The step through its graph for (rows, capacity, dtype, device, tokens), or None for the eager lean
        step: in the background mode while the graph is not built (it is queued), and after any failure."""
        key = (ids.shape[0], cache.capacity, w.dtype, str(w.device), ids.shape[1], STEP)
        slot = torch.arange(start, start + ids.shape[1], device=ids.device)
        return self._graph(key, w, (cache.keys, cache.values, ids, cos, sin, slot, cache.valid))

    def _graph(self, key: tuple, w, args: tuple):
        """`args` through the graph of `key` (rows, capacity, dtype, device, tokens, part), or None for the eager
        lean forward: in the background mode while the graph is not built (it is queued), and after any failure."""
        fn = self._compiled.get(key)
        if fn is None and self._graph_count() >= self.max_graphs:
            return None  # past the graph budget (max_graphs): this shape stays eager
        if self._builder is not None and fn is None:
            self._builder.request(key, w, args)  # never waits: the builder thread builds it from zeros, not `args`
            return None
        try:
            if fn is not None:
                return fn(*args)
            t0 = time.perf_counter()
            if self.tune:
                logger.info("umind: tuning the decode %s for batch %d, cache %d, %d tokens (once per shape; 10-40 s "
                            "on 2 cores)", key[5], key[0], key[1], key[4])
            fn, out = build_step(w, args, self.tune, key[5])
            logger.info("umind: decode %s for batch %d, cache %d, %d tokens %s in %.1f s", key[5], key[0], key[1],
                        key[4], "tuned" if self.tune else "compiled", time.perf_counter() - t0)
            self._compiled[key] = fn
            return out
        except Exception as exc:  # noqa: BLE001 - any compile/runtime failure means: use the eager lean step
            error = one_line(exc)
            if self._builder is not None:  # a built graph that fails on the live call: that key goes eager
                self._builder.fail(key, error)
                logger.warning("umind: the decode %s for batch %d, cache %d, %d tokens failed, that shape runs "
                               "eagerly (%s)", key[5], key[0], key[1], key[4], error)
                return None
            self.compile_error = error
            logger.warning("umind: torch.compile of the decode step failed, decoding eagerly (%s)", self.compile_error)
            return None


def build_step(w: DecodeWeights, args: tuple, tune: bool, part: str = "step"):
    """(the compiled step (`part` "step": static_step) or image prefix ("prefix": prefix_forward) for the shapes of
    `args`, its output on `args`).

    torch.compile builds the graph at the first call, so this makes that call, under the inductor settings of the
    mode (`tune`: frozen weights, autotuned products). The synchronous modes call it on the live step; decode="auto"
    on zero-filled tensors of the same layout, on the builder thread (tests replace this function to watch or
    block a build).
    """
    fn = torch.compile(_StepModule(w, part).with_own_code(), fullgraph=True, dynamic=False)
    with _inductor_settings(tune, w.device):
        out = fn(*args)
    return fn, out


def _inductor_settings(tune: bool, device: torch.device):
    """Inductor's settings while a step graph is built: its defaults, or (tuned) frozen weights and autotuned
    products. They must be in force when the graph is first called, which is when torch.compile builds it: passed
    as torch.compile's `options`, `freezing` was measured to have no effect (the products stayed MKL's)."""
    if not tune:
        return contextlib.nullcontext()
    import torch._inductor.config

    _reuse_kernel_templates()
    backends = "CPP,ATEN" if device.type == "cpu" else "ATEN,TRITON"
    return torch._inductor.config.patch(freezing=True, max_autotune=True, max_autotune_gemm_backends=backends)


def _reuse_kernel_templates() -> None:
    """Compile each of inductor's C++ kernel templates once per process instead of at every use.

    Why: inductor compiles a template's Jinja source anew each time it renders a kernel
    (`KernelTemplate._template_from_string`), about 260 times per tuned step graph; in one test's five tuned builds on
    2 cores that was 28 of 118 s. A compiled Jinja template holds no state between renders, so one per source gives
    the same kernels. Left alone where this torch has no such function (it is private)."""
    from torch._inductor.codegen import common

    holder = getattr(common, "KernelTemplate", None)
    original = getattr(holder, "_template_from_string", None)
    if original is None or getattr(original, "_umind_reused", False):
        return
    memo = functools.lru_cache(maxsize=None)(original)
    memo._umind_reused = True  # type: ignore[attr-defined]
    holder._template_from_string = staticmethod(memo)


class _StepModule(nn.Module):
    """The single-token step as a module whose buffers are the weights (shared, not copied), so that the compiled
    graph reads them as module state of one object instead of as some hundred separate call arguments."""

    _FIELDS = ("ln1", "ln2", "wqkv", "bqkv", "qk_norm", "wo", "bo", "wgu", "wdown")

    def __init__(self, w: DecodeWeights, part: str = "step"):
        super().__init__()
        self.meta, self.part = w, part
        for name in ("embed", "lm_head", "lm_bias", "norm"):
            self.register_buffer(name, getattr(w, name), persistent=False)
        for i, layer in enumerate(w.layers):
            for field in self._FIELDS:
                self.register_buffer(f"l{i}_{field}", getattr(layer, field), persistent=False)

    def _weights(self):
        w = self.meta
        view = DecodeWeights.__new__(DecodeWeights)
        view.n_heads, view.n_kv, view.head_dim, view.eps = w.n_heads, w.n_kv, w.head_dim, w.eps
        view.embed, view.lm_head, view.lm_bias, view.norm = self.embed, self.lm_head, self.lm_bias, self.norm
        view.layers = [_LayerWeights(**{f: getattr(self, f"l{i}_{f}") for f in self._FIELDS})
                       for i in range(len(w.layers))]
        return view

    def forward(self, *args):
        if self.part == PREFIX:
            return prefix_forward(self._weights(), *args)
        return static_step(self._weights(), *args)

    def with_own_code(self) -> "_StepModule":
        """This module, its forward running a copy of the class's code object.

        Dynamo keeps its compiled graphs per code object and reuses one whose guards pass. Every step module has
        the same shapes, so without a copy a "tuned" step would silently run a graph built earlier with other
        settings (measured: the tuned mode decoded at the compiled mode's speed, never tuning), and each batch
        size, cache capacity and weight snapshot would add to one cache whose entries are capped (8), past which
        dynamo runs the step uncompiled. With its own code, each compiled step holds exactly one graph.
        """
        method = type(self).forward
        code = method.__code__.replace()  # an equal, distinct code object
        fn = types.FunctionType(code, method.__globals__, method.__name__, method.__defaults__, method.__closure__)
        self.forward = types.MethodType(fn, self)
        return self


def serving_mode(mode: str | None = None) -> str | None:
    """The `decode` to give the Predictor of a process that serves many requests (the server, `umind infer`): `mode`
    when given; None when UMIND_DECODE is set (the Predictor reads it and names it in an error); else
    SERVING_DECODE ("auto")."""
    import os

    if mode:
        return mode
    return None if os.environ.get(DECODE_ENV, "").strip() else SERVING_DECODE


def for_predictor(model, mode: str | None = None, compile_cache=None) -> tuple[FastDecoder | None, str | None]:
    """(the decoder a Predictor uses for `mode`, or None for transformers' own forward; why it is None). `mode` is
    one of DECODE_MODES; None reads UMIND_DECODE, default "static". A model the lean step cannot reproduce decodes
    eagerly, with one warning line when a fast mode was asked for by name; so does a default decode of a model over
    LEAN_MAX_WEIGHT_BYTES. `compile_cache`: where inductor keeps its on-disk caches (see
    step_builder.use_compile_cache; only the modes that compile set it)."""
    import os

    chosen = mode if mode is not None else os.environ.get(DECODE_ENV, "").strip() or DEFAULT_DECODE
    if chosen not in DECODE_MODES:
        source = "decode" if mode is not None else DECODE_ENV
        raise ValueError(f"{source} must be one of {', '.join(DECODE_MODES)}, got {chosen!r}")
    if chosen == "eager":
        return None, None
    named = mode is not None or bool(os.environ.get(DECODE_ENV, "").strip())
    reason = unsupported_reason(model)
    if reason:
        if named:
            logger.warning("umind: decode=%s is not available for this model (%s), decoding eagerly", chosen, reason)
        return None, reason
    size = _language_weight_bytes(model)
    if size > LEAN_MAX_WEIGHT_BYTES and (chosen == "auto" or not named):
        reason = (f"{size / 1e9:.1f} GB of language-model weights, over the {LEAN_MAX_WEIGHT_BYTES / 2**30:.0f} GiB "
                  "the lean decode's own copy is worth (name decode=static or tuned to use it anyway)")
        logger.info("umind: decoding eagerly: %s", reason)
        return None, reason
    return FastDecoder(model, compile=chosen in GRAPH_MODES, tune=chosen in ("tuned", "auto"),
                       background=chosen == "auto", compile_cache=compile_cache), None
