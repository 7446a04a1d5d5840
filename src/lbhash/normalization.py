"""The input statistics every image transform normalises with (ImageNet's RGB mean and std on
0..1), in the bottom layer so that models and data read the same numbers."""

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
