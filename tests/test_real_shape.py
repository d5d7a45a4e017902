"""The Qwen3-VL-4B-Instruct architecture on the meta device: the real model goes through the same code path.

No weights exist here; the meta device builds the full module tree without allocating memory, so parameter
counts of the real shape (and the trainable share LoRA leaves) are measured, not assumed.
"""

from __future__ import annotations

import pytest
import torch

from umind_core.answers import grounding
from umind_core.modeling.tiny import QWEN_SPECIAL_TOKENS
from umind_core.modeling.umind import UMindVL

# config.json of Qwen3-VL-4B-Instruct as the hub ships it (transformers 5 key names)
QWEN3_VL_4B = {
    "text_config": {
        "vocab_size": 151936, "hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 262144,
        "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 5000000, "mrope_section": [24, 20, 20],
                            "mrope_interleaved": True},
    },
    "vision_config": {
        "depth": 24, "hidden_size": 1024, "intermediate_size": 4096, "num_heads": 16, "patch_size": 16,
        "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 2560, "num_position_embeddings": 2304,
        "deepstack_visual_indexes": [5, 11, 17], "hidden_act": "gelu_pytorch_tanh",
    },
    "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
    "vision_end_token_id": 151653, "tie_word_embeddings": True,
}
QWEN_FIRST_SPECIAL_ID = 151643  # <|endoftext|>; Qwen's 26 special tokens follow it, the tokenizer has 151669 ids
QWEN3_EXTRA = ("<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
               "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>")


class QwenLayoutTokenizer:
    """Qwen3's special-token id layout without its 150k BPE merges: what install_grounding_tokens reads."""

    def __init__(self):
        specials = list(QWEN_SPECIAL_TOKENS) + list(QWEN3_EXTRA)
        self.vocab = {tok: QWEN_FIRST_SPECIAL_ID + i for i, tok in enumerate(specials)}

    def get_vocab(self):
        return dict(self.vocab)

    def add_special_tokens(self, mapping, replace_extra_special_tokens=False):
        for tok in mapping["additional_special_tokens"]:
            self.vocab.setdefault(tok, QWEN_FIRST_SPECIAL_ID + len(self.vocab))

    def convert_tokens_to_ids(self, tok):
        return self.vocab[tok]

    def __len__(self):
        return QWEN_FIRST_SPECIAL_ID + len(self.vocab)


class _Processor:
    def __init__(self):
        self.tokenizer = QwenLayoutTokenizer()


@pytest.fixture(scope="module")
def umind_4b():
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    with torch.device("meta"):
        qwen = Qwen3VLForConditionalGeneration(Qwen3VLConfig(**QWEN3_VL_4B))
    base_params = sum(p.numel() for p in qwen.parameters())
    model = UMindVL.from_base(qwen, _Processor(), base_model="/models/Qwen3-VL-4B-Instruct")
    return model, base_params


def test_base_is_about_4_4_billion_parameters(umind_4b):
    _, base_params = umind_4b
    assert 4.3e9 < base_params < 4.5e9, base_params


def test_grounding_tokens_fit_qwens_spare_rows(umind_4b):
    model, _ = umind_4b
    ids = model.token_ids
    assert ids[grounding.BOX_START] == 151648 and ids[grounding.REF_START] == 151646  # reused, Qwen's own ids
    assert sorted(model.config.added_token_ids) == [151669, 151670, 151671, 151672, 151673]
    # Qwen3-VL-4B's embedding has 151936 rows, so nothing was resized
    assert model.qwen.get_input_embeddings().weight.shape[0] == 151936


def test_decoder_and_lora_on_the_real_shape(umind_4b):
    model, base_params = umind_4b
    dec = model.mask_decoder
    assert (dec.hidden_size, dec.num_queries, dec.channels) == (2560, 16, 128)
    counts = model.parameter_counts()
    # decoder: 2560*128+128 + 2560*512+512 + 2560*4+4 + 2*16
    assert counts["decoder"] == 2560 * 128 + 128 + 2560 * 512 + 512 + 2560 * 4 + 4 + 32
    assert counts["base"] == base_params
    assert counts["trainable"] == counts["decoder"] + counts["lora"] + counts["trainable_tokens"]
    assert counts["trainable_tokens"] == 5 * 2560
    # rank-16 LoRA on 36 layers x 7 projections plus the merger: tens of millions, about 1% of the base
    assert 1e7 < counts["lora"] < 1e8
    assert counts["trainable"] / counts["total"] < 0.02
    print(f"\n4B-shaped UMindVL: {counts}")
