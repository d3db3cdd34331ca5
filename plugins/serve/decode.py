"""Uploaded bytes to RGB images, refusing what must not be decoded.

A service decodes what strangers send, so every refusal happens before the pixels are: the header alone gives
the size, and an image larger than the pixel limit is refused before Pillow allocates it (a 20,000 × 20,000 PNG
of a few kilobytes would otherwise take 1.2 GB). A truncated file fails at ``load`` (with Pillow's default
``ImageFile.LOAD_TRUNCATED_IMAGES = False``).
"""

from __future__ import annotations

import io
from typing import Any

#: Default limit of width × height: a 40-megapixel photograph passes, a decompression bomb does not.
DEFAULT_MAX_PIXELS = 40_000_000


class BadImage(ValueError):
    """An upload that is not an image this service decodes (the message says why, for the client)."""


def decode_image(data: bytes, *, name: str, max_pixels: int = DEFAULT_MAX_PIXELS) -> Any:
    """Decode ``data`` as an RGB ``PIL.Image.Image``.

    Args:
        data: The uploaded file's bytes.
        name: The upload's name, for the message.
        max_pixels: Largest width × height accepted; checked from the header, before decoding.

    Raises:
        BadImage: Empty, not an image Pillow knows, larger than ``max_pixels``, or truncated or corrupt.
    """
    from PIL import Image, UnidentifiedImageError

    if not data:
        raise BadImage(f"{name}: the file is empty")
    # Pillow's own bomb guard warns at MAX_IMAGE_PIXELS and raises at twice that, process-wide; the check below
    # is this service's limit, so the global one is left as the user's code set it.
    try:
        image = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        raise BadImage(f"{name}: not an image file (Pillow cannot identify it)") from None
    except Image.DecompressionBombError:
        raise BadImage(f"{name}: the image is over the limit of {max_pixels:,} pixels (Pillow refused its header "
                       "as a possible decompression bomb)") from None
    except OSError as exc:
        raise BadImage(f"{name}: cannot read the image header ({exc})") from None
    width, height = image.size
    if width * height > max_pixels:
        raise BadImage(f"{name}: {width} × {height} pixels is over the limit of {max_pixels:,} pixels "
                       "(the server's --max-pixels)")
    try:
        image.load()
        # an RGB image is returned as it is, loaded and its bytes read: converting would only copy the pixels
        rgb = image if image.mode == "RGB" else image.convert("RGB")
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        # Truncated files raise OSError ("image file is truncated"), some corrupt headers SyntaxError.
        image.close()
        raise BadImage(f"{name}: the image data is truncated or corrupt ({exc})") from None
    if rgb is not image:
        image.close()
    return rgb
