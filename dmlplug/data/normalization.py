"""The ImageNet channel statistics every built-in pipeline normalises with.

A module of its own, torch-free, so that :mod:`dmlplug.data.transforms` and the torch-importing
:mod:`dmlplug.data.image_ops` both read it without importing each other.
"""

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
