"""Training and evaluation data: the JSONL manifest and the synthetic ultrasound generator."""

from umind_core.data.manifest import (
    Annotations,
    Conversation,
    Keypoint,
    Line,
    ManifestError,
    ManifestObject,
    Record,
    View,
    read_manifest,
    write_manifest,
    write_synthetic_dataset,
)
from umind_core.data.synthetic import (
    FINDINGS,
    GEOMETRIES,
    SITES,
    SyntheticError,
    SyntheticObject,
    SyntheticSample,
    generate,
    generate_many,
    ramanujan_perimeter,
    usaugment_hook,
)

__all__ = [
    "Annotations", "Conversation", "Keypoint", "Line", "ManifestError", "ManifestObject", "Record", "View",
    "read_manifest", "write_manifest", "write_synthetic_dataset",
    "FINDINGS", "GEOMETRIES", "SITES", "SyntheticError", "SyntheticObject", "SyntheticSample",
    "generate", "generate_many", "ramanujan_perimeter", "usaugment_hook",
]
