"""Hash models: backbone -> hash head -> `bits` real outputs."""

from lbhash.models.hash_model import FeatureNorm, HashHead, HashModel, create_feature_model

__all__ = ["FeatureNorm", "HashHead", "HashModel", "create_feature_model"]
