"""A dmlplug bundle as an MLflow pyfunc model: images in, the bundle's embeddings out.

The model's input is a table with one column, ``image``, of encoded image files (PNG, JPEG … anything Pillow reads);
its output is the ``N×D`` float32 embeddings of :meth:`dmlplug.load_bundle(...).embed`, one row per image, in input
order. The column's MLflow type is ``binary``: in Python it holds ``bytes``; in JSON (``mlflow models serve``'s
``/invocations``) MLflow expects, and decodes, base64 text, so a client sends
``{"dataframe_split": {"columns": ["image"], "data": [["<base64 of a PNG>"], ...]}}``.

MLflow loads the model by running :mod:`.mlflow_model_code`, which makes a :class:`BundleModel` of this module: the
installed dmlplug's code, no pickled object. Loading needs dmlplug and MLflow, not the tracking server once the model
is downloaded.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pandas as pd
from mlflow.pyfunc.model import PythonModel

#: The input column: one encoded image file per row.
IMAGE_COLUMN = "image"
#: The bundle folder's key among the model's artifacts (MLflow copies the folder into the model).
BUNDLE_ARTIFACT = "bundle"


class BundleModel(PythonModel):
    """The pyfunc model: loads the bundle that was logged with it, and embeds the images of ``image``.

    The bundle is checked as :func:`dmlplug.load_bundle` always does (the model file's sha256 against
    ``bundle.json``) when MLflow loads the model.
    """

    def load_context(self, context: Any) -> None:
        """Load the bundle from the model's artifacts."""
        import dmlplug

        self.bundle = dmlplug.load_bundle(context.artifacts[BUNDLE_ARTIFACT])

    # MLflow reads the hints: a DataFrame in means "validate against the signature", no schema inferred from them.
    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> np.ndarray:
        """The embeddings (``N×D`` float32) of the images in the ``image`` column of ``model_input``.

        Args:
            context: MLflow's context (unused: the bundle was loaded by :meth:`load_context`).
            model_input: A pandas DataFrame with an ``image`` column of encoded image files (bytes).
            params: Unused; MLflow's inference parameters.
        """
        images = [_decode(value, row) for row, value in enumerate(model_input[IMAGE_COLUMN])]
        return self.bundle.embed(images)


def _decode(value: Any, row: int) -> Any:
    """One encoded image file as an RGB PIL image (fully decoded, so a truncated file fails here)."""
    from PIL import Image

    from dmlplug.bundle.errors import BundleError

    try:
        with Image.open(io.BytesIO(bytes(value))) as image:
            return image.convert("RGB")
    except Exception as exc:  # any decoder failure: not an image, truncated, unknown format
        raise BundleError(f"row {row} of column {IMAGE_COLUMN!r} is not an image file Pillow can read: "
                          f"{type(exc).__name__}: {exc}", where=f"{IMAGE_COLUMN}[{row}]",
                          fix="send the bytes of an image file (PNG, JPEG …), base64-encoded in JSON") from None
