"""Training: batches from manifests (collate) for UMindVL's teacher-forced forward."""

from umind_core.training.collate import (
    IGNORE_INDEX,
    CollateError,
    EncodedSample,
    ManifestDataset,
    collate,
    encode_sample,
    encode_turns,
    to_rgb_uint8,
)

__all__ = ["IGNORE_INDEX", "CollateError", "EncodedSample", "ManifestDataset", "collate", "encode_sample",
           "encode_turns", "to_rgb_uint8"]
