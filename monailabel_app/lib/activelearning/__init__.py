"""Active learning from the model's own uncertainty."""

from .uncertainty import MostUncertain, UMindUncertainty, UncertaintyStore, uncertainty_score

__all__ = ["MostUncertain", "UMindUncertainty", "UncertaintyStore", "uncertainty_score"]
