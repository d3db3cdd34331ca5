"""``multipart/form-data`` bodies split into files and fields by python-multipart's parser, in memory.

The image routes read the whole body first (the body limit, :mod:`.limits`, has already bounded it), then feed
it to python-multipart's ``MultipartParser`` (the parser Starlette's form parsing drives) with callbacks that
collect each part's bytes in memory. Why not ``request.form()``: Starlette wraps every file in a spooled
temporary file and reads it back through ``await``, which at one small image per request cost more than the
rest of the request's Python together. The headers are read as Starlette reads them (python-multipart's
``parse_options_header`` on ``Content-Disposition``), so names and file names decode the same way (tested
against Starlette's parser); the counts of files and fields are limited while parsing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class FormError(ValueError):
    """A body that is not the multipart form it claims to be (the message says why, for the client)."""


@dataclass
class Form:
    """The parts of a form: ``files`` as ``(field, file name, bytes)`` and ``fields`` as ``{field: text}``."""

    files: list[tuple[str, str, bytes]] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)
    field_parts: int = 0  # counted apart from ``fields``: a name sent again is one more part to limit


def _decode(raw: bytes, charset: str) -> str:
    try:
        return raw.decode(charset)
    except (UnicodeDecodeError, LookupError):
        return raw.decode("latin-1")


class _Collector:
    """python-multipart's callbacks: each part's headers and data gathered, each finished part added to a form."""

    def __init__(self, form: Form, charset: str, max_files: int, max_fields: int):
        self.form, self.charset, self.max_files, self.max_fields = form, charset, max_files, max_fields
        self.header_field, self.header_value = bytearray(), bytearray()
        self.disposition: bytes | None = None
        self.data: list[bytes] = []
        self.open = False  # a part has begun and not ended: the body stopped inside it

    def callbacks(self) -> Any:
        """The callback table ``MultipartParser`` takes."""
        return {"on_part_begin": self.part_begin, "on_header_field": self.header_field_data,
                "on_header_value": self.header_value_data, "on_header_end": self.header_end,
                "on_part_data": self.part_data, "on_part_end": self.part_end}

    def part_begin(self) -> None:
        self.disposition, self.data, self.open = None, [], True

    def header_field_data(self, data: bytes, start: int, end: int) -> None:
        self.header_field += data[start:end]

    def header_value_data(self, data: bytes, start: int, end: int) -> None:
        self.header_value += data[start:end]

    def header_end(self) -> None:
        if bytes(self.header_field).strip().lower() == b"content-disposition":
            self.disposition = bytes(self.header_value).strip()
        self.header_field, self.header_value = bytearray(), bytearray()

    def part_data(self, data: bytes, start: int, end: int) -> None:
        self.data.append(data[start:end])

    def part_end(self) -> None:
        from python_multipart.multipart import parse_options_header

        self.open = False
        _, options = parse_options_header(self.disposition or b"")
        if b"name" not in options:
            raise FormError('The Content-Disposition header field "name" must be provided.')
        form, name, data = self.form, _decode(options[b"name"], self.charset), b"".join(self.data)
        if b"filename" in options:
            if len(form.files) >= self.max_files:
                raise FormError(f"Too many files. Maximum number of files is {self.max_files}.")
            form.files.append((name, _decode(options[b"filename"], self.charset), data))
        else:
            form.field_parts += 1
            if form.field_parts > self.max_fields:
                raise FormError(f"Too many fields. Maximum number of fields is {self.max_fields}.")
            form.fields[name] = _decode(data, self.charset)


def parse_form(body: bytes, content_type: str, *, max_files: int, max_fields: int) -> Form:
    """The files and fields of a ``multipart/form-data`` ``body``.

    Args:
        body: The whole request body.
        content_type: The request's ``Content-Type`` header (it carries the boundary).
        max_files: Most file parts accepted.
        max_fields: Most other parts accepted (a field given twice keeps its last value).

    Raises:
        FormError: No boundary, a body python-multipart cannot parse, one that ends inside a part or holds
            none, a part without a name, too many parts.
    """
    from python_multipart.exceptions import MultipartParseError
    from python_multipart.multipart import MultipartParser, parse_options_header

    _, params = parse_options_header(content_type)
    boundary = params.get(b"boundary")
    if not boundary:
        raise FormError("Missing boundary in multipart.")
    if b"--" + boundary not in body:
        raise FormError("the body holds no part: the boundary is not found")
    form = Form()
    collector = _Collector(form, _decode(params.get(b"charset", b"utf-8"), "latin-1"), max_files, max_fields)
    parser = MultipartParser(boundary, collector.callbacks())
    try:
        parser.write(body)
        parser.finalize()
    except MultipartParseError as exc:
        raise FormError(f"the body is not a multipart form: {exc}") from exc
    if collector.open or not (form.files or form.field_parts):
        raise FormError("the body ends before its closing boundary")
    return form
