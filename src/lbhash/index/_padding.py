"""How a top-k row shorter than k is padded, by every backend and by re-ranking: id `PAD_ID`
(-1) and distance `PAD_DISTANCE` (the int32 maximum, FAISS's own padding value, which no real
distance can reach)."""

import numpy as np

PAD_ID = -1
PAD_DISTANCE = int(np.iinfo(np.int32).max)
