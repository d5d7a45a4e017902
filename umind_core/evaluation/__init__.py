"""Evaluation: the UMind-VL report's metrics, the U2-Bench protocol, and report writing.

Importing this package does not import torch or MONAI; the mask and box metrics load them on first use.
"""

from .metrics import (
    NON_REFUSAL_PHRASES,
    PRF,
    REFUSAL_PHRASES,
    MetricInputError,
    box_iou,
    box_iou_matrix,
    classification_metrics,
    detection_best_f1,
    detection_prf,
    is_refusal,
    keypoint_errors,
    mask_dice,
    mask_iou,
    match_boxes,
    measurement_error,
    measurement_errors,
    refusal_accuracy,
    segmentation_miou,
)
from .report import ReportInputError, ReportPaths, render_markdown, to_jsonable, write_report
from .u2bench import (
    CVE_RANGES,
    NOT_VISIBLE,
    POSITION_CLASSES,
    U2_DATASETS,
    U2_WEIGHTS,
    U2BenchInputError,
    bleu4,
    bleu_lenient,
    classification_accuracy,
    cve_rmse,
    localization_accuracy,
    normalize_position,
    position_class,
    region_of,
    task_scores,
    tokenize,
    u2_score,
)

__all__ = [
    "MetricInputError", "PRF", "REFUSAL_PHRASES", "NON_REFUSAL_PHRASES",
    "mask_iou", "mask_dice", "segmentation_miou", "box_iou", "box_iou_matrix", "match_boxes",
    "detection_prf", "detection_best_f1", "keypoint_errors", "measurement_error", "measurement_errors",
    "classification_metrics", "is_refusal", "refusal_accuracy",
    "U2BenchInputError", "POSITION_CLASSES", "NOT_VISIBLE", "U2_WEIGHTS", "U2_DATASETS", "CVE_RANGES",
    "position_class", "region_of", "normalize_position", "localization_accuracy", "classification_accuracy",
    "cve_rmse", "bleu4", "bleu_lenient", "tokenize", "task_scores", "u2_score",
    "ReportInputError", "ReportPaths", "render_markdown", "write_report", "to_jsonable",
]
