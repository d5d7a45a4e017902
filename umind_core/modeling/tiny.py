"""Small Qwen3-VL models built offline, for tests and for the demo model the project trains itself.

They are real `Qwen3VLForConditionalGeneration` instances with a real Qwen image processor; only the sizes and
the tokenizer differ from Qwen3-VL-4B. The tokenizer is a byte-level BPE trained here on an ultrasound
vocabulary, with Qwen's special tokens and every digit a token of its own (as in Qwen's tokenizer), so that
coordinates on the 0..1000 grid are sequences of digit tokens the model can learn.
Everything is deterministic from the seed and takes a few seconds.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

import torch

from .config import LoraSettings
from .umind import UMindVL

__all__ = ["TinySpec", "SIZES", "QWEN_SPECIAL_TOKENS", "build_tokenizer", "build_processor", "build_qwen", "build_model"]

# Qwen2.5/3-VL's special tokens, in Qwen's order (the grounding pair and box pair are among them).
QWEN_SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
)


@dataclass(frozen=True)
class TinySpec:
    text_hidden: int
    text_layers: int
    text_heads: int
    text_kv_heads: int
    head_dim: int
    text_intermediate: int
    mrope_section: tuple[int, int, int]
    vision_depth: int
    vision_hidden: int
    vision_heads: int
    vision_intermediate: int
    vocab_size: int
    image_size: int  # images are resized to about image_size**2 pixels


SIZES: dict[str, TinySpec] = {
    # unit tests: well under a million parameters, a forward in milliseconds
    "tiny": TinySpec(64, 2, 4, 2, 16, 128, (4, 2, 2), 2, 32, 2, 64, 700, 256),
    # the demo model: a few million parameters, trainable on a CPU in about an hour; 512 px gives a 16x16
    # token grid (256 px only 8x8, which caps mask quality)
    "small": TinySpec(256, 4, 4, 2, 64, 768, (16, 8, 8), 4, 128, 4, 256, 2000, 512),
}

_SITES = ["breast", "thyroid", "kidney", "liver", "fetal head", "heart", "carotid", "lung", "prostate", "ovary"]
_FINDINGS = ["lesion", "nodule", "cyst", "mass", "organ", "calcification", "shadowing", "enhancement", "pole",
             "diameter", "circumference", "length", "cortex", "sinus", "skull", "margin", "echogenicity"]
_WORDS = ("segment detect locate find mark measure point box outline draw describe diagnose report answer "
          "question image ultrasound scan the a an of in on this that is are was be not no visible present "
          "benign malignant normal abnormal suspicious hypoechoic hyperechoic anechoic isoechoic oval round "
          "irregular spiculated circumscribed wider taller than posterior acoustic upper lower left right "
          "biparietal head site finding size impression birads mm cm yes what where which how there "
          "please show all each every object target structure region cannot does image shows found").split()


def _corpus(seed: int) -> list[str]:
    """Deterministic training text for the tokenizer: domain words, phrases and coordinate strings."""
    gen = torch.Generator().manual_seed(seed)
    words = _WORDS + _SITES + _FINDINGS
    lines = []
    for site, finding in itertools.product(_SITES, _FINDINGS):
        lines.append(f"Segment the {site} {finding} in this ultrasound image.")
        lines.append(f"The {site} {finding} is benign, not malignant. Size: 12.5 x 8.0 mm.")
    for _ in range(400):
        idx = torch.randint(len(words), (8,), generator=gen).tolist()
        nums = torch.randint(1001, (4,), generator=gen).tolist()
        lines.append(" ".join(words[i] for i in idx) + f" ({nums[0]},{nums[1]}),({nums[2]},{nums[3]}).")
    return lines


def build_tokenizer(vocab_size: int = 700, seed: int = 0):
    """A byte-level BPE tokenizer with Qwen's special tokens and single-digit tokens, wrapped for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(QWEN_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(seed), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=32768,
        padding_side="right",
    )


def build_processor(tokenizer, image_size: int = 256):
    """The real Qwen3-VL processor (patch 16, merge 2, mean/std 0.5) around our tokenizer."""
    from transformers import Qwen3VLProcessor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    pixels = image_size * image_size
    common = dict(patch_size=16, merge_size=2, temporal_patch_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    image_processor = Qwen2VLImageProcessor(size={"shortest_edge": pixels, "longest_edge": pixels}, **common)
    video_processor = Qwen3VLVideoProcessor(**common)
    return Qwen3VLProcessor(image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor)


def check_image_size(image_size: int) -> None:
    """An input side the vision tower can take: whole merged patches (16 px patches merged 2 x 2)."""
    if image_size < 64 or image_size % 32:
        raise ValueError(f"image size must be a multiple of 32 and at least 64, got {image_size}")


def set_max_image_size(processor, image_size: int) -> None:
    """Let images larger than the model's input keep up to about image_size**2 pixels (smaller ones keep the
    processor's least size). Why: a real scan (HC18's 800 x 540) is resized to the input's pixel count, where a small
    fetal head is a few dozen pixels across; a trained model continued at a larger input keeps the synthetic 256 px
    images as they were. Saved with the processor, so the trained model reads images as it was trained."""
    least, _ = _pixel_range(processor)
    pixels = _checked_pixels(image_size)
    if pixels < least:
        raise ValueError(f"image size {image_size} is below the model's own input ({least} pixels); it only grows")
    _set_pixel_range(processor, least, pixels)


def set_min_image_size(processor, image_size: int) -> None:
    """Read images smaller than image_size**2 pixels enlarged to about that many (larger ones as before). Why: a
    256 px image (a BUSI scan, a synthetic one) is 8 x 8 merged tokens, 32 px of the image each, coarse for a
    lesion's margin and shape, which tell benign from malignant; enlarged, the same pixels meet more of the
    network. Never above the largest size, so large images keep theirs. Saved with the processor, as above."""
    _, most = _pixel_range(processor)
    pixels = _checked_pixels(image_size)
    if pixels > most:
        raise ValueError(f"image size {image_size} is above the model's largest input ({most} pixels); raise "
                         "--max-image-size first")
    _set_pixel_range(processor, pixels, most)


def _pixel_range(processor) -> tuple[int, int]:
    """(least, most) pixels the processor resizes an image to (Qwen's shortest_edge / longest_edge are pixel counts)."""
    size = processor.image_processor.size
    return int(size.shortest_edge or 0), int(size.longest_edge or 0)


def _checked_pixels(image_size: int) -> int:
    check_image_size(image_size)
    return image_size * image_size


def _set_pixel_range(processor, least: int, most: int) -> None:
    from transformers.image_processing_utils import SizeDict

    processor.image_processor.size = SizeDict(shortest_edge=least, longest_edge=most)


def build_qwen(spec: TinySpec, tokenizer, seed: int = 0):
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    if sum(spec.mrope_section) * 2 != spec.head_dim:
        raise ValueError(f"mrope_section {spec.mrope_section} must sum to head_dim/2 = {spec.head_dim // 2}")
    ids = tokenizer.convert_tokens_to_ids
    config = Qwen3VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer),
            hidden_size=spec.text_hidden,
            intermediate_size=spec.text_intermediate,
            num_hidden_layers=spec.text_layers,
            num_attention_heads=spec.text_heads,
            num_key_value_heads=spec.text_kv_heads,
            head_dim=spec.head_dim,
            max_position_embeddings=8192,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                             "mrope_section": list(spec.mrope_section), "mrope_interleaved": True},
            pad_token_id=ids("<|endoftext|>"),
            tie_word_embeddings=True,
        ),
        vision_config=dict(
            depth=spec.vision_depth,
            hidden_size=spec.vision_hidden,
            intermediate_size=spec.vision_intermediate,
            num_heads=spec.vision_heads,
            patch_size=16,
            spatial_merge_size=2,
            temporal_patch_size=2,
            out_hidden_size=spec.text_hidden,
            num_position_embeddings=(spec.image_size // 16) ** 2,
            deepstack_visual_indexes=list(range(min(spec.vision_depth, 3))),
        ),
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=True,
    )
    config.eos_token_id = [ids("<|im_end|>"), ids("<|endoftext|>")]
    config.pad_token_id = ids("<|endoftext|>")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3VLForConditionalGeneration(config)
    return model


def build_model(
    size: str = "tiny", seed: int = 0, lora: LoraSettings | None = LoraSettings(), image_size: int | None = None
) -> UMindVL:
    """A fresh UMindVL on a small Qwen3-VL config. `lora=None` trains every weight (random-init demo model).

    `image_size` overrides the config's input resolution (images are resized to about image_size**2 pixels):
    the token grid, and with it the cost of a step and the detail masks can have, grows with it.
    """
    if size not in SIZES:
        raise ValueError(f"unknown model size {size!r}; choose one of {sorted(SIZES)}")
    spec = SIZES[size]
    if image_size is not None:
        check_image_size(image_size)
        spec = dataclasses.replace(spec, image_size=int(image_size))
    tokenizer = build_tokenizer(spec.vocab_size, seed)
    processor = build_processor(tokenizer, spec.image_size)
    qwen = build_qwen(spec, tokenizer, seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + 1)
        return UMindVL.from_base(qwen, processor, lora=lora)
