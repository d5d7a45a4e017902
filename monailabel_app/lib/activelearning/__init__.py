"""Active learning: the model's disagreement with itself, and a uniform random baseline."""

from .random_pick import RandomUnlabeled
from .uncertainty import MostUncertain, UMindUncertainty, UncertaintyStore, uncertainty_score

__all__ = ["MostUncertain", "RandomUnlabeled", "UMindUncertainty", "UncertaintyStore", "uncertainty_score"]
