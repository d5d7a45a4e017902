"""`random`: a uniformly random unlabeled image.

MONAI Label's stock Random weights each image by the seconds since the strategy last served it, so when
every unlabeled image was served within the current second all weights are 0 and the request fails with
a bare 500 ("Total of weights must be greater than zero"). Uniform choice has no such state and is the
baseline the annotation-loop benchmark compares `umind_uncertainty` against.
"""

from __future__ import annotations

import random

from monailabel.interfaces.datastore import Datastore
from monailabel.interfaces.tasks.strategy import Strategy

__all__ = ["RandomUnlabeled"]


class RandomUnlabeled(Strategy):
    def __init__(self, seed: int | None = None):
        super().__init__("A uniformly random unlabeled image")
        self._rng = random.Random(seed)

    def __call__(self, request, datastore: Datastore):
        images = sorted(datastore.get_unlabeled_images(request.get("label_tag"), request.get("labels")))
        if not images:
            return None
        return {"id": self._rng.choice(images)}
