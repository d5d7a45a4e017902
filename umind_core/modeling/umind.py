"""UMindVL: Qwen3-VL + the grounding vocabulary + the Dynamic Conv Mask Decoder + LoRA (report, section 3).

One class serves the 4B model on a GPU and the small models the project builds offline: the backbone is always
`transformers`' own `Qwen3VLForConditionalGeneration`, adapted by `peft`, so a code path tested on the tiny
config is the code path of the real one.

The language model is called through its inner `Qwen3VLModel` and `lm_head` separately: the mask decoder needs
the last-layer hidden states (at the image tokens and at the `<|seg_mask|>` tokens) and the LM loss needs the
logits, and this way one forward gives both without asking transformers to keep every layer's states.
"""

from __future__ import annotations

import logging
import os
import shutil
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from ..atomic import new_temp_dir, replace_dir
from ..answers.grounding import GROUNDING_TOKENS, SEG_MASK
from .base_folder import BaseFolderError, check_tokenizer, check_weights, read_config
from .config import CONFIG_NAME, LoraSettings, UMindConfig
from .mask_decoder import DynamicConvMaskDecoder
from .packing import packed_attention_mask, packed_position_ids
from .speedups.patch_embed import patch_embed_as_matmul
from .speedups.token_rows import embedding_weight, keep_merged_token_rows

__all__ = ["UMindVL", "UMindOutput", "UMindModelError", "install_grounding_tokens"]

logger = logging.getLogger(__name__)

DECODER_FILE = "mask_decoder.safetensors"
IGNORE_INDEX = -100

# Nothing in this package may reach a model hub; set before transformers reads its environment.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


class UMindModelError(ValueError):
    """A model folder is missing, incomplete or of an unknown kind; the message names what is wrong."""


@dataclass
class UMindOutput:
    logits: torch.Tensor | None  # (B, L, V); (B, 1, V) for forward(logits="last"); None for logits="none"
    hidden_states: torch.Tensor
    loss: torch.Tensor | None = None
    lm_loss: torch.Tensor | None = None
    mask_loss: torch.Tensor | None = None
    mask_logits: list[torch.Tensor] = field(default_factory=list)  # per sample: (targets, h, w)
    cache: object | None = None


def install_grounding_tokens(tokenizer, model) -> tuple[dict[str, int], list[int]]:
    """Give every grounding token an id, reusing the ones the base tokenizer already has.

    Qwen's tokenizer already knows `<|box_start|>`, `<|box_end|>` and the object-ref pair; the point, line and
    seg-mask tokens are added. The embedding matrix grows only when the tokenizer outgrows it (Qwen3-VL-4B has
    spare rows, so nothing is resized there). Returns (token -> id, ids that were added).
    """
    vocab = tokenizer.get_vocab()
    missing = [tok for tok in GROUNDING_TOKENS if tok not in vocab]
    if missing:
        tokenizer.add_special_tokens({"additional_special_tokens": missing}, replace_extra_special_tokens=False)
    ids = {tok: int(tokenizer.convert_tokens_to_ids(tok)) for tok in GROUNDING_TOKENS}
    added = [ids[tok] for tok in missing]
    rows = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > rows:
        model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    return ids, added


class UMindVL(nn.Module):
    """The UMind-VL network. Build with `from_base` or `from_pretrained`; save with `save_pretrained`."""

    def __init__(self, qwen: nn.Module, processor, config: UMindConfig, peft_model: nn.Module | None = None):
        super().__init__()
        self.qwen = qwen  # Qwen3VLForConditionalGeneration, LoRA layers injected in place when config.lora is set
        patch_embed_as_matmul(qwen)  # at inference: its Conv3d's arithmetic in under a third of the time
        self.peft_model = peft_model  # the PeftModel wrapping it (saving and loading the adapter), or None
        keep_merged_token_rows(qwen)  # the adapter's token rows merged once per change, not at every forward
        self.processor = processor
        self.config = config
        hidden = qwen.config.text_config.hidden_size
        weight = embedding_weight(qwen)
        with torch.device(weight.device):
            self.mask_decoder = DynamicConvMaskDecoder(hidden, config.num_mask_tokens, config.mask_channels)
        self.mask_decoder.to(dtype=weight.dtype)
        self._seg_mask_id = config.grounding_token_ids[SEG_MASK]
        self._dice_bce = None
        self.loaded_from: Path | None = None  # the UMind folder this model was read from, if any

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_base(
        cls,
        qwen: nn.Module,
        processor,
        lora: LoraSettings | None = LoraSettings(),
        num_mask_tokens: int = 16,
        mask_channels: int = 128,
        base_model: str = "base",
        **loss_weights: float,
    ) -> "UMindVL":
        """Wrap a plain Qwen3-VL model: grounding tokens, a fresh decoder, fresh LoRA (or full training)."""
        token_ids, added = install_grounding_tokens(processor.tokenizer, qwen)
        config = UMindConfig(
            base_model=base_model,
            lora=lora,
            num_mask_tokens=num_mask_tokens,
            mask_channels=mask_channels,
            grounding_token_ids=token_ids,
            added_token_ids=added,
            **loss_weights,
        )
        peft_model = _wrap_lora(qwen, config) if lora is not None else None
        if lora is None:
            qwen.requires_grad_(True)
        return cls(qwen, processor, config, peft_model)

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype = torch.float32,
        trainable: bool = False,
        lora: LoraSettings | None = LoraSettings(),
    ) -> "UMindVL":
        """Load a UMind folder, or start from a plain Qwen3-VL base folder (fresh decoder and adapter).

        `lora` only applies to a base folder. Never touches the network: every read is `local_files_only`.
        """
        folder = Path(path).expanduser()
        dtype = _resolve_dtype(dtype)
        if not folder.is_dir():
            raise UMindModelError(f"model folder {folder} does not exist")
        if (folder / CONFIG_NAME).is_file():
            model = cls._load_umind_folder(folder, dtype, trainable)
        elif (folder / "config.json").is_file():
            _check_base_folder(folder)
            qwen = _load_qwen(folder, dtype)
            processor = _load_processor(folder)
            model = cls.from_base(qwen, processor, lora=lora, base_model=str(folder.resolve()))
            model.mask_decoder.to(dtype=dtype)
        else:
            raise UMindModelError(
                f"{folder} is neither a UMind model folder (no {CONFIG_NAME}) nor a Qwen3-VL base folder "
                "(no config.json)"
            )
        model.to(_resolve_device(device))
        model.train(trainable)
        if not trainable:
            model.requires_grad_(False)
        return model

    @classmethod
    def _load_umind_folder(cls, folder: Path, dtype: torch.dtype, trainable: bool) -> "UMindVL":
        config = UMindConfig.load(folder)
        base_dir = folder / config.base_model if config.base_is_copied else Path(config.base_model)
        missing = [str(p) for p in _required_umind_files(folder, config, base_dir) if not p.exists()]
        if missing:
            raise UMindModelError(f"UMind folder {folder} is incomplete, missing: {', '.join(missing)}")
        try:
            check_weights(base_dir)
        except BaseFolderError as exc:
            raise UMindModelError(f"{folder} refers to base weights that cannot load: {exc}") from None
        processor = _load_processor(folder / "processor")
        qwen = _load_qwen(base_dir, dtype)
        token_ids, added = install_grounding_tokens(processor.tokenizer, qwen)
        if token_ids != config.grounding_token_ids:
            raise UMindModelError(
                f"{folder}: the tokenizer gives grounding token ids {token_ids}, the folder was saved with "
                f"{config.grounding_token_ids}"
            )
        peft_model = None
        if config.lora is not None:
            from peft import PeftModel

            peft_model = PeftModel.from_pretrained(qwen, str(folder / "adapter"), is_trainable=trainable)
        model = cls(qwen, processor, config, peft_model)
        from safetensors.torch import load_file

        model.mask_decoder.load_state_dict(load_file(str(folder / DECODER_FILE)))
        model.mask_decoder.to(dtype=dtype)
        model.loaded_from = folder.resolve()
        if trainable and config.lora is None:
            qwen.requires_grad_(True)
        return model

    def base_folder(self) -> Path:
        """The folder holding this model's Qwen3-VL base weights (a copy inside the UMind folder, or a path)."""
        if not self.config.base_is_copied:
            return Path(self.config.base_model)
        if self.loaded_from is None:
            raise UMindModelError("this model was built in memory: save it (save_pretrained) and load it back "
                                  "before referring to its base weights by path")
        return self.loaded_from / self.config.base_model

    def attach_lora(self, settings: LoraSettings | None = None) -> "UMindVL":
        """Give a model without an adapter (a fully trained small model such as the demo) a fresh one.

        Retraining then changes only the adapter, the new token rows and the decoder, as the report does,
        instead of overwriting every weight on a handful of images; and a saved version holds only what
        changed, referring to the (unchanged, frozen) base weights by path instead of copying them.
        """
        if self.config.lora is not None:
            raise UMindModelError("this model already carries a LoRA adapter")
        base = self.base_folder().resolve()
        if not (base / "config.json").is_file():
            raise UMindModelError(f"the base weights of this model are not at {base}: cannot refer to them")
        self.config.lora = settings or LoraSettings()
        self.config.base_model = str(base)
        self.peft_model = _wrap_lora(self.qwen, self.config)
        keep_merged_token_rows(self.qwen)
        return self

    # ------------------------------------------------------------------ properties
    @property
    def tokenizer(self):
        return self.processor.tokenizer

    @property
    def token_ids(self) -> dict[str, int]:
        return dict(self.config.grounding_token_ids)

    @property
    def seg_mask_id(self) -> int:
        return self._seg_mask_id

    @property
    def image_token_id(self) -> int:
        return int(self.qwen.config.image_token_id)

    @property
    def num_mask_tokens(self) -> int:
        return self.config.num_mask_tokens

    @property
    def merge_size(self) -> int:
        return int(self.qwen.config.vision_config.spatial_merge_size)

    @property
    def patch_size(self) -> int:
        return int(self.qwen.config.vision_config.patch_size)

    @property
    def device(self) -> torch.device:
        return embedding_weight(self.qwen).device

    @property
    def dtype(self) -> torch.dtype:
        return embedding_weight(self.qwen).dtype

    def parameter_counts(self) -> dict[str, int]:
        """Total, trainable, base-only, decoder and LoRA parameter counts (shared tensors counted once)."""
        seen: set[int] = set()
        counts = {"total": 0, "trainable": 0, "decoder": 0, "lora": 0, "trainable_tokens": 0}
        for name, p in self.named_parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            n = p.numel()
            counts["total"] += n
            if p.requires_grad:
                counts["trainable"] += n
            if name.startswith("mask_decoder."):
                counts["decoder"] += n
            elif "lora_" in name:
                counts["lora"] += n
            elif "trainable_tokens_" in name:
                counts["trainable_tokens"] += n
        counts["base"] = counts["total"] - counts["decoder"] - counts["lora"] - counts["trainable_tokens"]
        return counts

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        pixel_values: torch.Tensor | None = None,
        image_grid_thw: torch.Tensor | None = None,
        mm_token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        mask_targets: Sequence[torch.Tensor | None] | None = None,
        position_ids: torch.Tensor | None = None,
        cache=None,
        use_cache: bool = False,
        mm_encoder_outputs: dict | None = None,
        decode_masks: bool = True,
        segment_ids: torch.Tensor | None = None,
        mask_views: Sequence[torch.Tensor | None] | None = None,
        logits: str = "all",
    ) -> UMindOutput:
        """One teacher-forced pass: logits, mask logits for every complete `<|seg_mask|>` group, and losses.

        mask_targets[b] is a (targets, h, w) {0,1} tensor for sample b, in the order its mask groups appear, or
        None when sample b has no mask supervision. Mask logits come out at the targets' size, otherwise at the
        size of the image the processor fed to the vision encoder. `segment_ids` marks a packed batch (several
        turns on one image prefix, see `packing`): attention and positions are then derived from it.
        `mask_views[b]` (an examination: several images in one sample) gives, per mask group of sample b, the
        index of the sample's image it decodes against; without it a group reads the last image before it.
        `logits` "last" or "none" skips the LM head where nobody reads it (an image prefix, a prompt whose last
        token alone picks the next): at a 151,936-token vocabulary it is a 778 MB product per call on the 4B.
        """
        if logits not in ("all", "last", "none"):
            raise ValueError(f"logits must be 'all', 'last' or 'none', got {logits!r}")
        if labels is not None and logits != "all":
            raise ValueError("a loss needs every position's logits: pass logits='all' with labels")
        if segment_ids is not None:
            if position_ids is None:
                position_ids, _ = self.rope_index(input_ids, mm_token_type_ids, image_grid_thw, attention_mask)
            position_ids = packed_position_ids(position_ids, segment_ids)
            attention_mask = packed_attention_mask(segment_ids)
        out = self.qwen.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            pixel_values=pixel_values,
            image_grid_thw=image_grid_thw,
            mm_token_type_ids=mm_token_type_ids,
            position_ids=position_ids,
            cache=cache,
            use_cache=use_cache,
            mm_encoder_outputs=mm_encoder_outputs,
        )
        hidden = out.last_hidden_state
        if logits != "none":
            logits = self.qwen.lm_head(hidden if logits == "all" else hidden[:, -1:])
        else:
            logits = None
        result = UMindOutput(logits=logits, hidden_states=hidden, cache=getattr(out, "cache", None))
        if decode_masks and image_grid_thw is not None and bool((input_ids == self.seg_mask_id).any()):
            result.mask_logits = self._masks_from_sequence(input_ids, hidden, image_grid_thw, mask_targets,
                                                           mask_views)
        losses = []
        if labels is not None:
            result.lm_loss = causal_lm_loss(logits, labels)
            losses.append(self.config.lm_loss_weight * result.lm_loss)
        if mask_targets is not None and any(t is not None for t in mask_targets):
            result.mask_loss = self.mask_loss(result.mask_logits, mask_targets)
            losses.append(self.config.mask_loss_weight * result.mask_loss)
        if losses:
            result.loss = torch.stack(losses).sum()
        return result

    def rope_index(self, input_ids: torch.Tensor, mm_token_type_ids: torch.Tensor, image_grid_thw: torch.Tensor,
                   attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(position_ids (3, B, L), delta (B, 1)): Qwen3-VL's M-RoPE positions of sequences with images, and the
        offset that places text after them (slot s at position s + delta). Here so that decoding on a cached image
        prefix (`decode_batch`) reads it from this model's interface, not from inside transformers' model."""
        return self.qwen.model.get_rope_index(
            input_ids, mm_token_type_ids, image_grid_thw=image_grid_thw, attention_mask=attention_mask
        )

    def encode_images(self, pixel_values: torch.Tensor,
                      image_grid_thw: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """(the image tokens' input embeddings (N, D), every image's in order; DeepStack's features, one (N, D) per
        language layer they join): the vision tower's output as the language model takes it, for a caller that
        runs the language layers itself (`fast_decode.FastDecoder.encode_prefix`)."""
        out = self.qwen.model.get_image_features(pixel_values, image_grid_thw, return_dict=True)
        return torch.cat(out.pooler_output, dim=0), [torch.cat(f, dim=0) for f in out.deepstack_features]

    def prefix_embeddings(self, input_ids: torch.Tensor,
                          image_embeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(input states (B, L, D) of a sequence with images: the token embeddings, the image placeholders
        replaced by `image_embeds` in order; the placeholder mask (B, L)), as transformers' forward builds them."""
        embeds = self.qwen.get_input_embeddings()(input_ids)
        visual = input_ids == self.image_token_id
        if int(visual.sum()) != image_embeds.shape[0]:
            raise ValueError(f"{int(visual.sum())} image placeholders for {image_embeds.shape[0]} image embeddings")
        return embeds.masked_scatter(visual[..., None], image_embeds.to(embeds.dtype)), visual

    def mask_loss(
        self, mask_logits: Sequence[torch.Tensor], mask_targets: Sequence[torch.Tensor | None]
    ) -> torch.Tensor:
        """Weighted Dice + BCE (MONAI's DiceCELoss on one sigmoid channel), averaged over targets."""
        if self._dice_bce is None:
            from monai.losses import DiceCELoss

            self._dice_bce = DiceCELoss(
                sigmoid=True, lambda_dice=self.config.dice_weight, lambda_ce=self.config.bce_weight
            )
        total, count = None, 0
        for logits, target in zip(mask_logits, mask_targets):
            if target is None or target.shape[0] == 0:
                continue
            if logits.shape != target.shape:
                raise ValueError(
                    f"mask logits {tuple(logits.shape)} do not match mask targets {tuple(target.shape)}"
                )
            loss = self._dice_bce(logits[:, None].float(), target[:, None].to(logits.device, torch.float32))
            total = loss * target.shape[0] if total is None else total + loss * target.shape[0]
            count += target.shape[0]
        if total is None:
            raise ValueError("mask targets were given but no sample has both targets and mask tokens")
        return total / count

    # ------------------------------------------------------------------ token geometry
    def image_spans(self, input_ids: torch.Tensor, image_grid_thw: torch.Tensor) -> list[list[tuple[int, int, int, int]]]:
        """Per sample, each image's (start, end, grid_h, grid_w) in token positions on the merged grid.

        Images appear in `image_grid_thw` in batch order, which is the order their placeholder runs appear in
        `input_ids`; a run whose length disagrees with its grid means the inputs do not belong together.
        """
        grids = image_grid_thw.tolist()
        merge = self.merge_size
        spans: list[list[tuple[int, int, int, int]]] = []
        cursor = 0
        for row in input_ids:
            sample_spans = []
            for start, end in _runs(row == self.image_token_id):
                if cursor >= len(grids):
                    raise ValueError("input_ids hold more image placeholder runs than image_grid_thw has images")
                t, h, w = grids[cursor]
                cursor += 1
                gh, gw = h // merge, w // merge
                if t != 1 or end - start != gh * gw:
                    raise ValueError(
                        f"image placeholder run of {end - start} tokens does not match grid {t}x{h}x{w} "
                        f"(expects {t * gh * gw} tokens of one frame)"
                    )
                sample_spans.append((start, end, gh, gw))
            spans.append(sample_spans)
        if cursor != len(grids):
            raise ValueError(f"image_grid_thw has {len(grids)} images but input_ids hold {cursor} placeholder runs")
        return spans

    def mask_groups(self, input_ids: torch.Tensor) -> list[list[int]]:
        """Per sample, the start position of each complete group of N `<|seg_mask|>` tokens."""
        n = self.num_mask_tokens
        groups = []
        for b, row in enumerate(input_ids):
            starts = []
            for start, end in _runs(row == self.seg_mask_id):
                if (end - start) % n:
                    raise ValueError(
                        f"sample {b} has a run of {end - start} {SEG_MASK} tokens at position {start}; "
                        f"every mask takes exactly {n}"
                    )
                starts.extend(range(start, end, n))
            groups.append(starts)
        return groups

    def image_states(self, hidden: torch.Tensor, span: tuple[int, int, int, int]) -> torch.Tensor:
        """(L, D) states of one image's tokens as the (H, W, D) map the decoder expects (row-major grid)."""
        start, end, gh, gw = span
        return hidden[start:end].reshape(gh, gw, hidden.shape[-1])

    def decode_masks(
        self,
        query_states: Sequence[torch.Tensor],
        image_states: Sequence[torch.Tensor],
        output_sizes: Sequence[tuple[int, int]],
    ) -> list[torch.Tensor]:
        """The decoder on already gathered states; the Predictor calls this with states from its KV-cached passes."""
        return self.mask_decoder(query_states, image_states, output_sizes)

    def _masks_from_sequence(self, input_ids, hidden, image_grid_thw, mask_targets,
                             mask_views=None) -> list[torch.Tensor]:
        spans = self.image_spans(input_ids, image_grid_thw)
        groups = self.mask_groups(input_ids)
        n = self.num_mask_tokens
        outputs: list[torch.Tensor] = []
        for b, starts in enumerate(groups):
            target = mask_targets[b] if mask_targets is not None else None
            if target is not None and target.shape[0] != len(starts):
                raise ValueError(
                    f"sample {b} has {len(starts)} mask groups but {target.shape[0]} mask targets"
                )
            if not starts:
                outputs.append(hidden.new_zeros((0, 1, 1)))
                continue
            views = mask_views[b] if mask_views is not None else None
            by_image = _group_owners(b, starts, spans[b], None if views is None else [int(v) for v in views])
            pieces: dict[int, torch.Tensor] = {}
            for image_index, members in by_image.items():
                span = spans[b][image_index]
                if target is not None:
                    size = tuple(target.shape[-2:])
                else:
                    size = (span[2] * self.merge_size * self.patch_size, span[3] * self.merge_size * self.patch_size)
                queries = torch.stack([hidden[b, starts[g] : starts[g] + n] for g in members])
                logits = self.mask_decoder.decode_image(queries, self.image_states(hidden[b], span), size)
                for g, lg in zip(members, logits):
                    pieces[g] = lg
            shapes = {tuple(p.shape) for p in pieces.values()}
            if len(shapes) == 1:
                outputs.append(torch.stack([pieces[g] for g in range(len(starts))]))
            else:  # targets of different images of different sizes in one sample: keep them at their own sizes
                raise ValueError(
                    f"sample {b} has masks on images of different sizes {sorted(shapes)}; give mask targets"
                )
        return outputs

    # ------------------------------------------------------------------ saving
    def save_pretrained(self, path: str | os.PathLike) -> Path:
        """Write the folder next to its final place and rename it there, so no half-written model is ever seen."""
        folder = Path(path).expanduser()
        if self.config.lora is None and not self.config.base_is_copied:
            raise UMindModelError(
                "a fully trained model must carry its own weights; save it with base_model='base'"
            )
        tmp = new_temp_dir(folder)
        try:
            self.processor.save_pretrained(str(tmp / "processor"))
            if self.config.base_is_copied:
                _save_clean_base(self.qwen, tmp / self.config.base_model)
            if self.peft_model is not None:
                self.peft_model.save_pretrained(str(tmp / "adapter"))
            from safetensors.torch import save_file

            state = {k: v.detach().contiguous().cpu() for k, v in self.mask_decoder.state_dict().items()}
            save_file(state, str(tmp / DECODER_FILE), metadata={"format": "pt"})
            self.config.save(tmp)
            replace_dir(tmp, folder)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return folder


# ---------------------------------------------------------------------- helpers
def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy on the positions whose label is not IGNORE_INDEX (the answer tokens)."""
    shift_logits = logits[:, :-1].reshape(-1, logits.shape[-1]).float()
    shift_labels = labels[:, 1:].reshape(-1).to(shift_logits.device)
    if not bool((shift_labels != IGNORE_INDEX).any()):
        return shift_logits.sum() * 0.0
    return nn.functional.cross_entropy(shift_logits, shift_labels, ignore_index=IGNORE_INDEX)


def _group_owners(b: int, starts: list[int], spans: list[tuple[int, int, int, int]],
                  views: list[int] | None) -> dict[int, list[int]]:
    """Image index -> the mask groups of sample b that decode against it, so that each image is decoded once.

    Without `views` a group reads the last image before it (one image per sample, or an image per turn); with
    them (an examination, all views in the prefix) group g reads image views[g], which must come before it."""
    if views is not None and len(views) != len(starts):
        raise ValueError(f"sample {b} has {len(starts)} mask groups but mask_views names {len(views)} images")
    by_image: dict[int, list[int]] = {}
    for g, start in enumerate(starts):
        before = [i for i, s in enumerate(spans) if s[1] <= start]
        if not before:
            raise ValueError(f"sample {b}: mask group at position {start} comes before any image")
        owner = before[-1] if views is None else views[g]
        if owner not in before:
            raise ValueError(f"sample {b}: mask group {g} names image {owner}, but the sample has "
                             f"{len(before)} image(s) before it")
        by_image.setdefault(owner, []).append(g)
    return by_image


def _runs(flags: torch.Tensor) -> list[tuple[int, int]]:
    """(start, end) of each run of True in a 1-D bool tensor."""
    if flags.numel() == 0:
        return []
    padded = torch.cat([flags.new_zeros(1), flags.to(torch.int8), flags.new_zeros(1).to(torch.int8)])
    diff = padded[1:].to(torch.int8) - padded[:-1].to(torch.int8)
    starts = torch.nonzero(diff == 1).flatten().tolist()
    ends = torch.nonzero(diff == -1).flatten().tolist()
    return list(zip(starts, ends))


def _wrap_lora(qwen: nn.Module, config: UMindConfig):
    from peft import LoraConfig, get_peft_model

    lora = config.lora
    kwargs = {}
    if config.added_token_ids:
        kwargs["trainable_token_indices"] = {"embed_tokens": list(config.added_token_ids)}
    peft_config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        bias="none",
        **kwargs,
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*tied.*")
        return get_peft_model(qwen, peft_config)


def _resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    if dtype not in names:
        raise UMindModelError(f"unknown dtype {dtype!r}; use one of {sorted(names)}")
    return names[dtype]


def _resolve_device(device: str | torch.device) -> torch.device:
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UMindModelError(f"device {device!r} was asked for but CUDA is not available on this machine")
    return dev


def _check_base_folder(folder: Path) -> None:
    """Kind, files, tokenizer and shards of a base folder, before any weight is read (rules in base_folder)."""
    try:
        config = read_config(folder)
        missing = [str(p) for p in _required_base_files(folder) if not p.exists()]
        if missing:
            raise UMindModelError(f"Qwen3-VL base folder {folder} is incomplete, missing: {', '.join(missing)}")
        check_tokenizer(folder, config)
        check_weights(folder)
    except BaseFolderError as exc:
        raise UMindModelError(str(exc)) from None


def _required_base_files(folder: Path) -> list[Path]:
    weights = folder / "model.safetensors"
    if not weights.exists() and (folder / "model.safetensors.index.json").exists():
        weights = folder / "model.safetensors.index.json"
    return [folder / "config.json", weights, folder / "tokenizer_config.json", _processor_config(folder)]


def _processor_config(folder: Path) -> Path:
    """transformers 5 writes processor_config.json; hub folders of Qwen3-VL ship preprocessor_config.json."""
    for name in ("processor_config.json", "preprocessor_config.json"):
        if (folder / name).exists():
            return folder / name
    return folder / "preprocessor_config.json"


def _required_umind_files(folder: Path, config: UMindConfig, base_dir: Path) -> list[Path]:
    files = [folder / DECODER_FILE, folder / "processor" / "tokenizer_config.json",
             _processor_config(folder / "processor")]
    files += _required_base_files(base_dir)[:2]
    if config.lora is not None:
        files += [folder / "adapter" / "adapter_config.json", folder / "adapter" / "adapter_model.safetensors"]
    return files


def _load_qwen(folder: Path, dtype: torch.dtype):
    from transformers import Qwen3VLForConditionalGeneration

    return Qwen3VLForConditionalGeneration.from_pretrained(str(folder), dtype=dtype, local_files_only=True)


def _load_processor(folder: Path):
    from transformers import Qwen3VLProcessor

    return Qwen3VLProcessor.from_pretrained(str(folder), local_files_only=True)


def _save_clean_base(qwen: nn.Module, target: Path) -> None:
    """Save the base weights without LoRA or token-adapter tensors, under the base model's own names."""
    state = {}
    for name, tensor in qwen.state_dict().items():
        if "lora_" in name or "trainable_tokens_" in name:
            continue
        state[name.replace(".token_adapter.base_layer.", ".").replace(".base_layer.", ".")] = tensor
    qwen.save_pretrained(str(target), state_dict=state, safe_serialization=True)
