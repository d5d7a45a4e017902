"""The offline model builders: deterministic, the two sizes the project promises, and clear errors."""

from __future__ import annotations

import pytest
import torch

from umind_core.modeling import tiny


def test_same_seed_same_weights_and_tokenizer():
    a, b = tiny.build_model("tiny", seed=3), tiny.build_model("tiny", seed=3)
    assert a.tokenizer.get_vocab() == b.tokenizer.get_vocab()
    for (na, pa), (nb, pb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert na == nb
        torch.testing.assert_close(pa, pb, rtol=0, atol=0)
    c = tiny.build_model("tiny", seed=4)
    assert not torch.equal(a.mask_decoder.proj_img.weight, c.mask_decoder.proj_img.weight)


def test_sizes():
    counts = {size: tiny.build_model(size).parameter_counts() for size in ("tiny", "small")}
    assert counts["tiny"]["total"] < 1_000_000
    assert 2_000_000 < counts["small"]["total"] < 10_000_000
    print(f"\nparameter counts: {counts}")


def test_unknown_size_is_named():
    with pytest.raises(ValueError, match="unknown model size 'huge'"):
        tiny.build_model("huge")


def test_processor_uses_qwen3_vl_image_settings():
    ip = tiny.build_model("tiny").processor.image_processor
    assert (ip.patch_size, ip.merge_size, list(ip.image_mean), list(ip.image_std)) == (16, 2, [0.5] * 3, [0.5] * 3)


def test_image_size_override_changes_the_token_grid():
    import numpy as np

    model = tiny.build_model("tiny", image_size=128)
    enc = model.processor(images=[np.zeros((300, 300, 3), np.uint8)], text=["<|image_pad|>"], return_tensors="pt")
    assert enc["image_grid_thw"].tolist() == [[1, 8, 8]]  # 128 px / 16 per patch
    with pytest.raises(ValueError, match="multiple of 32"):
        tiny.build_model("tiny", image_size=100)


def test_max_image_size_grows_large_images_only_and_is_saved_with_the_processor(tmp_path):
    import numpy as np
    from transformers import AutoProcessor

    processor = tiny.build_model("tiny", image_size=128).processor
    wide, small = np.zeros((540, 800, 3), np.uint8), np.zeros((128, 128, 3), np.uint8)

    def grid(p, image):
        return p.image_processor(images=[image], return_tensors="pt")["image_grid_thw"].tolist()

    assert grid(processor, wide) == [[1, 6, 8]]  # at most 128 x 128 pixels
    tiny.set_max_image_size(processor, 256)
    assert grid(processor, wide) == [[1, 12, 18]]  # about 256 x 256 pixels, the same aspect
    assert grid(processor, small) == [[1, 8, 8]]  # an image at the model's own input keeps its size
    processor.save_pretrained(tmp_path)
    assert grid(AutoProcessor.from_pretrained(tmp_path), wide) == [[1, 12, 18]]
    with pytest.raises(ValueError, match="only grows"):
        tiny.set_max_image_size(processor, 64)
    with pytest.raises(ValueError, match="multiple of 32"):
        tiny.set_max_image_size(processor, 300)


def test_min_image_size_enlarges_small_images_only_and_is_saved_with_the_processor(tmp_path):
    import numpy as np
    from transformers import AutoProcessor

    processor = tiny.build_model("tiny", image_size=128).processor
    wide, small = np.zeros((540, 800, 3), np.uint8), np.zeros((128, 128, 3), np.uint8)

    def grid(p, image):
        return p.image_processor(images=[image], return_tensors="pt")["image_grid_thw"].tolist()

    with pytest.raises(ValueError, match="above the model's largest input"):
        tiny.set_min_image_size(processor, 192)  # the largest is still 128 x 128
    tiny.set_max_image_size(processor, 256)
    tiny.set_min_image_size(processor, 192)
    assert grid(processor, small) == [[1, 12, 12]]  # enlarged to 192 x 192
    assert grid(processor, wide) == [[1, 12, 18]]  # a large image keeps the largest size
    processor.save_pretrained(tmp_path)
    assert grid(AutoProcessor.from_pretrained(tmp_path), small) == [[1, 12, 12]]
    with pytest.raises(ValueError, match="multiple of 32"):
        tiny.set_min_image_size(processor, 200)
