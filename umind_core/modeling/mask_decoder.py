"""The Dynamic Conv Mask Decoder of UMind-VL (report, section 3.3).

The decoder is deliberately weak: three linear layers and one LayerNorm are its only parameters, so that the
burden of localising a target falls on the vision encoder and the LLM (the report's design argument). Every
target's N mask-query states become the *weights* of two 2x transposed convolutions applied to the image
features; nothing else is learned here.

Shapes, with D the LLM width, C the decoder channels (128), N the mask tokens per target (16), k = 2:

    image states  (H*W, D) --Proj_img--> H0 (C, H, W)
    query states  (N, D)   --Proj_ker1--> K1 (N, C, k, k): output channel n of DeConv1 is query n's kernel
    H1 = DeConv_K1(H0)                      (N, 2H, 2W)
    H1' = LayerNorm over the N channels
    query states  (N, D)   --Proj_ker2--> K2 (N, k, k): input channel n of DeConv2 is query n's kernel
    H2 = DeConv_K2(H1')                     (1, 4H, 4W)
    M = bilinear upsample of H2 to the requested size: mask logits.

Because stride == kernel size, each transposed convolution is a non-overlapping scatter and is exactly one
einsum; all targets of an image are decoded in one call, and the only Python loop is over images.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["DynamicConvMaskDecoder"]


class DynamicConvMaskDecoder(nn.Module):
    def __init__(self, hidden_size: int, num_queries: int = 16, channels: int = 128, kernel_size: int = 2):
        super().__init__()
        if hidden_size <= 0 or num_queries <= 0 or channels <= 0 or kernel_size <= 0:
            raise ValueError(
                f"decoder sizes must be positive, got hidden_size={hidden_size}, num_queries={num_queries}, "
                f"channels={channels}, kernel_size={kernel_size}"
            )
        self.hidden_size = hidden_size
        self.num_queries = num_queries
        self.channels = channels
        self.kernel_size = kernel_size
        k2 = kernel_size * kernel_size
        self.proj_img = nn.Linear(hidden_size, channels)
        self.proj_ker1 = nn.Linear(hidden_size, channels * k2)
        self.norm = nn.LayerNorm(num_queries)
        self.proj_ker2 = nn.Linear(hidden_size, k2)

    @property
    def upsample_factor(self) -> int:
        """Two transposed convolutions of stride k: the grid grows by k*k before the final interpolation."""
        return self.kernel_size * self.kernel_size

    def forward(
        self,
        query_states: Sequence[torch.Tensor],
        image_states: Sequence[torch.Tensor],
        output_sizes: Sequence[tuple[int, int]],
    ) -> list[torch.Tensor]:
        """Decode every target of every image.

        query_states[i]: (T_i, N, D) mask-token states of image i's T_i targets (T_i may be 0).
        image_states[i]: (H_i, W_i, D) LLM states at image i's tokens on the merged patch grid.
        output_sizes[i]: (height, width) of the logits for image i.
        Returns one (T_i, height_i, width_i) tensor of mask logits per image.
        """
        if not (len(query_states) == len(image_states) == len(output_sizes)):
            raise ValueError(
                f"need one entry per image, got {len(query_states)} query sets, {len(image_states)} feature maps "
                f"and {len(output_sizes)} output sizes"
            )
        return [
            self.decode_image(q, f, size) for q, f, size in zip(query_states, image_states, output_sizes)
        ]

    def decode_image(
        self, queries: torch.Tensor, features: torch.Tensor, output_size: tuple[int, int]
    ) -> torch.Tensor:
        """All targets of one image: queries (T, N, D), features (H, W, D) -> logits (T, h, w)."""
        if queries.dim() != 3 or queries.shape[1:] != (self.num_queries, self.hidden_size):
            raise ValueError(
                f"mask queries must have shape (targets, {self.num_queries}, {self.hidden_size}), "
                f"got {tuple(queries.shape)}"
            )
        if features.dim() != 3 or features.shape[-1] != self.hidden_size:
            raise ValueError(f"image features must have shape (H, W, {self.hidden_size}), got {tuple(features.shape)}")
        height, width = (int(s) for s in output_size)
        if height <= 0 or width <= 0:
            raise ValueError(f"output size must be positive, got {output_size}")
        n_targets = queries.shape[0]
        grid_h, grid_w = features.shape[0], features.shape[1]
        k, n, c = self.kernel_size, self.num_queries, self.channels
        if n_targets == 0:
            return features.new_zeros((0, height, width))

        h0 = self.proj_img(features).permute(2, 0, 1)  # (C, H, W)
        k1 = self.proj_ker1(queries).view(n_targets, n, c, k, k)
        h1 = torch.einsum("chw,tncij->tnhiwj", h0, k1).reshape(n_targets, n, grid_h * k, grid_w * k)
        h1 = self.norm(h1.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        k2 = self.proj_ker2(queries).view(n_targets, n, k, k)
        h2 = torch.einsum("tnhw,tnij->thiwj", h1, k2).reshape(n_targets, 1, grid_h * k * k, grid_w * k * k)
        logits = F.interpolate(h2, size=(height, width), mode="bilinear", align_corners=False)
        return logits[:, 0]
