"""What image and PDF content blocks cost a chat model: by pixels and pages, not by their base64."""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
import zlib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from langchain_pacms._lru import LruMemo

__all__ = [
    "IMAGE_TOKENS",
    "MEDIA_TYPES",
    "PDF_PAGE_TOKENS",
    "carries_media",
    "image_size",
    "image_tokens",
    "media_tokens",
    "pdf_pages",
    "pdf_tokens",
]

IMAGE_TOKENS = 1_600
"""Tokens charged for an image of unknown size: about the most one image costs.

Anthropic scales an image down until it costs at most about 1,600 tokens; OpenAI's high detail
charges at most 1,445 (GPT-4o); Gemini 258 per tile.
"""

PDF_PAGE_TOKENS = 3_000 + IMAGE_TOKENS
"""Tokens charged for each page of a PDF: a dense page's text and the page as an image.

Anthropic and OpenAI send a model both for every page (Anthropic: 1,500-3,000 text tokens a
page, plus the image).
"""

MEDIA_TYPES = frozenset(
    {"image", "image_url", "input_image", "file", "input_file", "document", "audio", "input_audio"}
    | {"video", "text-plain"}
)
"""Content block types that carry data other than the message's text (LangChain's, OpenAI's,
Anthropic's)."""

_HEAD_CHARS = 1 << 18  # base64 characters decoded to find the dimensions (192 KiB of image)
_SPACE = re.compile(r"\s+")
_MEASURED: LruMemo[tuple[str, int, int, str], Any] = LruMemo(4096)  # by the data's value
_ABSENT: Any = object()
_JPEG_SIZE_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_PDF_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z])")
_PDF_OBJECT_STREAM = re.compile(rb"/Type\s*/ObjStm")
_PDF_STREAM = re.compile(rb"stream\r?\n")
_PDF_INFLATED = 1 << 24  # bytes of one object stream read for page objects


def media_tokens(block: Mapping[str, Any]) -> int | None:
    """Tokens an image or an inline PDF block costs; ``None`` for any other block.

    See :func:`image_tokens` and :func:`pdf_tokens`; other blocks cost the tokens of their JSON.

    Example:
        >>> media_tokens({"type": "image", "url": "https://example.com/a.png"})
        1600
        >>> media_tokens({"type": "json", "json": {}}) is None
        True
    """
    image = image_tokens(block)
    return image if image is not None else pdf_tokens(block)


def carries_media(block: Any) -> bool:
    """Whether a content block carries an image, a file, audio or video (:data:`MEDIA_TYPES`).

    Example:
        >>> carries_media({"type": "file", "url": "https://example.com/r.pdf"})
        True
        >>> carries_media({"type": "text", "text": "hi"})
        False
    """
    if not isinstance(block, Mapping):
        return False
    return block.get("type") in MEDIA_TYPES or media_tokens(block) is not None


def pdf_tokens(block: Mapping[str, Any]) -> int | None:
    r"""Tokens an inline PDF block costs (:data:`PDF_PAGE_TOKENS` a page), else ``None``.

    Reads LangChain's ``file`` blocks (``base64``, or ``data`` in the older form), OpenAI's
    (``{"type": "file", "file": {"file_data": ...}}``, ``input_file``) and Anthropic's
    (``{"type": "document", "source": {"type": "base64", ...}}``). ``None`` when the block is
    no PDF or its pages cannot be counted (the block then costs its JSON).

    Example:
        >>> pdf = b"%PDF-1.4\n1 0 obj << /Type /Page >> endobj 2 0 obj << /Type /Pages >> endobj"
        >>> pdf_tokens({"type": "file", "base64": base64.b64encode(pdf).decode()})
        4600
    """
    if block.get("type") not in ("file", "document", "input_file"):
        return None
    data = _file_data(block)
    if data is None:
        return None
    pages = _measured("pdf", data, lambda d: pdf_pages(_decoded(d)))
    return None if pages is None else pages * PDF_PAGE_TOKENS


def pdf_pages(raw: bytes) -> int | None:
    r"""How many pages a PDF file has (page objects, also in object streams), else ``None``.

    Example:
        >>> pdf_pages(b"%PDF-1.7\n<< /Type /Page >> << /Type /Page >> << /Type /Pages >>")
        2
        >>> pdf_pages(b"GIF89a") is None
        True
    """
    if b"%PDF-" not in raw[:1024]:
        return None
    pages = len(_PDF_PAGE.findall(raw))
    for found in _PDF_OBJECT_STREAM.finditer(raw):  # compressed objects (PDF 1.5 and later)
        start = _PDF_STREAM.search(raw, found.end())
        if start is None:
            continue
        end = raw.find(b"endstream", start.end())
        try:  # at most _PDF_INFLATED bytes: a stream that inflates without bound is cut there
            inner = zlib.decompressobj().decompress(raw[start.end() : end], _PDF_INFLATED)
        except zlib.error:
            continue
        pages += len(_PDF_PAGE.findall(inner))
    return pages or None


def _file_data(block: Mapping[str, Any]) -> str | None:
    """The base64 data (or data URL) of a file block, else ``None``."""
    for key in ("base64", "data", "file_data"):
        value = block.get(key)
        if isinstance(value, str):
            return value
    inner = block.get("file")
    if isinstance(inner, Mapping) and isinstance(inner.get("file_data"), str):
        return str(inner["file_data"])
    return _source_data(block)


def image_tokens(block: Mapping[str, Any]) -> int | None:
    """Tokens an image content block costs, or ``None`` when ``block`` is no image.

    Inline (base64) images of a known format (PNG, JPEG, GIF, WebP) cost the larger of OpenAI's
    high-detail charge (85 + 170 per 512-pixel tile after scaling to fit 2048 and to 768 on the
    short side) and Anthropic's (width x height / 750, at most :data:`IMAGE_TOKENS`); any other
    image (a URL, a file id, data that cannot be read) costs :data:`IMAGE_TOKENS`. Blocks in
    LangChain's standard form (``{"type": "image", "base64": ...}``, also its older
    ``source_type`` form), OpenAI's (``image_url``, ``input_image``) and Anthropic's
    (``"source": {"type": "base64", ...}``) are read.

    Example:
        >>> image_tokens({"type": "image", "url": "https://example.com/a.png"})
        1600
        >>> image_tokens({"type": "text", "text": "hi"}) is None
        True
    """
    kind = block.get("type")
    if kind not in ("image", "image_url", "input_image"):
        return None
    size = image_size(_inline_data(block))
    if size is None:
        return IMAGE_TOKENS
    width, height = size
    anthropic = min(IMAGE_TOKENS, math.ceil(width * height / 750))
    return max(_openai_high_detail(width, height), anthropic)


def image_size(data: str | None) -> tuple[int, int] | None:
    """``(width, height)`` of a base64 PNG, JPEG, GIF or WebP image (a data URL too), else ``None``.

    Example:
        >>> gif = b"GIF89a" + (640).to_bytes(2, "little") + (480).to_bytes(2, "little")
        >>> image_size(base64.b64encode(gif).decode())
        (640, 480)
    """
    if not data:
        return None
    return _measured("image", data, _image_size)


T = TypeVar("T")


def _measured(kind: str, data: str, measure: Callable[[str], T]) -> T:
    """``measure(data)``, memoised by the data's value (a history re-read holds new strings)."""
    key = (kind, len(data), hash(data), data[-64:])
    found = _MEASURED.get(key, _ABSENT)
    if found is not _ABSENT:
        return cast(T, found)
    value = measure(data)
    _MEASURED.put(key, value)
    return value


def _base64(data: str) -> str | None:
    """The base64 part of a data URL (``data`` itself when it is none), else ``None``."""
    if not data.startswith("data:"):
        return data
    head, _, data = data.partition(",")
    return data if ";base64" in head else None


def _decoded(data: str) -> bytes:
    """The bytes of base64 ``data`` (a data URL too; line breaks allowed), else ``b""``."""
    chars = _base64(data)
    if chars is None:
        return b""
    try:  # the plain string first: base64 in a block rarely holds line breaks
        return base64.b64decode(chars, validate=True)
    except (binascii.Error, ValueError):
        pass
    try:
        return base64.b64decode(_SPACE.sub("", chars), validate=True)
    except (binascii.Error, ValueError):
        return b""


def _image_size(data: str) -> tuple[int, int] | None:
    chars = _base64(data)
    if chars is None:
        return None
    chars = _SPACE.sub("", chars[: _HEAD_CHARS + _HEAD_CHARS // 8])[:_HEAD_CHARS]
    try:
        raw = base64.b64decode(chars[: len(chars) // 4 * 4], validate=True)
    except (binascii.Error, ValueError):
        return None
    size = _dimensions(raw)
    return size if size is not None and size[0] > 0 and size[1] > 0 else None


def _inline_data(block: Mapping[str, Any]) -> str | None:
    """The base64 data (or data URL) of an image block, else ``None``."""
    for key in ("base64", "data", "image_url", "url"):
        value = block.get(key)
        if isinstance(value, Mapping):  # OpenAI: {"image_url": {"url": ...}}
            value = value.get("url")
        if isinstance(value, str) and (key in ("base64", "data") or value.startswith("data:")):
            return value
    return _source_data(block)


def _dimensions(raw: bytes) -> tuple[int, int] | None:
    if raw[:8] == b"\x89PNG\r\n\x1a\n" and raw[12:16] == b"IHDR":
        width, height = struct.unpack(">II", raw[16:24])
        return width, height
    if raw[:6] in (b"GIF87a", b"GIF89a") and len(raw) >= 10:
        width, height = struct.unpack("<HH", raw[6:10])
        return width, height
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
        return _webp(raw)
    if raw[:2] == b"\xff\xd8":
        return _jpeg(raw)
    return None


def _webp(raw: bytes) -> tuple[int, int] | None:
    chunk = raw[12:16]
    if chunk == b"VP8X" and len(raw) >= 30:
        width = int.from_bytes(raw[24:27], "little") + 1
        return width, int.from_bytes(raw[27:30], "little") + 1
    if chunk == b"VP8L" and len(raw) >= 25:
        bits = int.from_bytes(raw[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and len(raw) >= 30:
        width, height = struct.unpack("<HH", raw[26:30])
        return width & 0x3FFF, height & 0x3FFF
    return None


def _jpeg(raw: bytes) -> tuple[int, int] | None:
    at = 2
    while at + 9 <= len(raw):
        if raw[at] != 0xFF:
            return None
        marker = raw[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in _JPEG_SIZE_MARKERS:
            height, width = struct.unpack(">HH", raw[at + 5 : at + 9])
            return width, height
        if marker in (0x01, *range(0xD0, 0xD9)):  # markers without a length
            at += 2
            continue
        at += 2 + int.from_bytes(raw[at + 2 : at + 4], "big")
    return None


def _openai_high_detail(width: int, height: int) -> int:
    fit = min(1.0, 2048 / max(width, height))
    wide, high = width * fit, height * fit
    short = min(1.0, 768 / min(wide, high))
    tiles = math.ceil(wide * short / 512) * math.ceil(high * short / 512)
    return 85 + 170 * tiles


def _source_data(block: Mapping[str, Any]) -> str | None:
    """The base64 data of Anthropic's ``"source": {"type": "base64", ...}``, else ``None``."""
    source = block.get("source")
    if isinstance(source, Mapping) and source.get("type") == "base64":
        data = source.get("data")
        return data if isinstance(data, str) else None
    return None
