"""Dataset contract: what a dataset plugin returns.

A dataset factory returns a :class:`DatasetBundle` of :class:`ImageSource` splits. Sources yield PIL
images and integer labels; the engine applies the recipe's transforms and builds the DataLoaders.
"""

from dmlplug.data.base import ArraySource, DatasetBundle, ImageSource

__all__ = ["ArraySource", "DatasetBundle", "ImageSource"]
