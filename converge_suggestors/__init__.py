"""Ready-made suggestors for converge: reference seeds and reactions, and more to come."""

from ._react import ReactOnceSuggestor
from ._seed import SeedSuggestor

__all__ = ["ReactOnceSuggestor", "SeedSuggestor"]
