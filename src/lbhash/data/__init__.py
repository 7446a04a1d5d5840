"""Data sets and split protocols (docs/data.md).

`base` (the HashDataset contract), `features`, `images` and its readers (`image_loaders`,
`image_arrays`, `image_sources`, `per_class`, `pixel_cache`, `batches`, `augment`), `spec`
(data-spec strings and their registry), `protocols` (seeded splits, paper Sec. 6.1.1), `transforms`
and `data_options` (`DataOptions`: a run's data options). The names below are imported on first use
(lbhash._lazy): a command that reads one module of the package (a photo's perceptual hash, an edit) loads
neither the data readers nor pydantic, and `transforms` (which imports torch) loads only with its names.
"""

from lbhash._lazy import lazy_names

_HOMES = {
    **dict.fromkeys(("HashDataset", "InputOptions", "INPUT_KINDS"), "base"),
    **dict.fromkeys(("CLASS_NAME_KEYS", "DEQUANTIZE_MODES", "FEATURE_KEYS", "LABEL_KEYS", "SPLIT_KEYS",
                     "ArrayDataset", "count_unlabelled", "load_digits", "load_features"), "features"),
    "load_image_arrays": "image_arrays",
    **dict.fromkeys(("LIST_PRESETS", "ListPreset", "load_cifar10", "load_image_folder", "load_image_lists"),
                    "image_loaders"),
    **dict.fromkeys(("CACHE_MODES", "ImageDataset", "check_images"), "images"),
    **dict.fromkeys(("PARAMETRIC_PROTOCOLS", "PROTOCOLS", "ProtocolSpec", "Split", "carve_validation", "load_split",
                     "make_split", "parse_protocol", "save_split"), "protocols"),
    **dict.fromkeys(("DATA_KINDS", "DataKind", "DataSpec", "absolute_spec", "load_data", "load_image_inputs",
                     "missing_paths", "parse_data_spec", "register_data_kind"), "spec"),
    **dict.fromkeys(("DataOptions", "MIN_NATIVE_SIDE"), "data_options"),
    **dict.fromkeys(("build_transforms", "TRANSFORM_PRESETS", "IMAGENET_MEAN", "IMAGENET_STD", "Compose", "ToFloat",
                     "Resize", "CenterCrop", "RandomCrop", "RandomHorizontalFlip", "Normalize", "TransformedImages"),
                    "transforms"),
}

__all__ = [name for name in _HOMES if name != "MIN_NATIVE_SIDE"]  # (a constant of the training options, not public)
__getattr__, __dir__ = lazy_names(__name__, _HOMES, globals())
