"""Data sets and split protocols.

- `features`: ArrayDataset, feature files (.npz/.npy/.mat) and the bundled digits set;
- `spec`: data-spec strings (`digits`, `features:PATH?x=feat&y=labels`) and their kind registry;
- `protocols`: seeded train/query/database splits (SPEC §7), saved with a run.

No torch here: the torch Dataset wrappers live in a later layer.
"""

from lbhash.data.features import (
    CLASS_NAME_KEYS,
    DEQUANTIZE_MODES,
    FEATURE_KEYS,
    LABEL_KEYS,
    SPLIT_KEYS,
    ArrayDataset,
    count_unlabelled,
    load_digits,
    load_features,
)
from lbhash.data.protocols import (
    PARAMETRIC_PROTOCOLS,
    PROTOCOLS,
    ProtocolSpec,
    Split,
    load_split,
    make_split,
    parse_protocol,
    save_split,
)
from lbhash.data.spec import DATA_KINDS, DataKind, DataSpec, load_data, parse_data_spec, register_data_kind

__all__ = [
    "ArrayDataset", "load_features", "load_digits", "count_unlabelled", "load_data",
    "parse_data_spec", "register_data_kind", "DataSpec", "DataKind", "DATA_KINDS",
    "Split", "make_split", "save_split", "load_split", "parse_protocol", "ProtocolSpec",
    "PROTOCOLS", "PARAMETRIC_PROTOCOLS",
    "FEATURE_KEYS", "LABEL_KEYS", "SPLIT_KEYS", "CLASS_NAME_KEYS", "DEQUANTIZE_MODES",
]
