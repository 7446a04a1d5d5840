"""Training: configuration, the Alg. 1 loop on Lightning Fabric, run directories."""

from lbhash.train.config import TrainConfig, build_config, load_config_file
from lbhash.train.run import train

__all__ = ["TrainConfig", "build_config", "load_config_file", "train"]
