"""Images and PDFs cost what chat models charge (by pixels and pages), not their base64's tokens."""

import base64
import io
import json
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from langchain_pacms.integrations import create_pacms_hook
from langchain_pacms.messages import media
from langchain_pacms.messages.media import (
    IMAGE_TOKENS,
    PDF_PAGE_TOKENS,
    image_size,
    image_tokens,
    media_tokens,
    pdf_pages,
)
from langchain_pacms.messages.text import message_tokens
from langchain_pacms.tokens import TokenCounter

Image = pytest.importorskip("PIL.Image", reason="Pillow (a dependency of the plot extra)")

FORMATS = {
    "PNG": {},
    "GIF": {},
    "JPEG": {"quality": 80},
    "progressive JPEG": {"progressive": True, "quality": 70},
    "WEBP": {"quality": 60},
    "lossless WEBP": {"lossless": True},
}


def encoded(width: int, height: int, kind: str = "PNG", mode: str = "RGB") -> str:
    """A real image file of that size, base64-encoded; JPEGs carry EXIF before their frame."""
    picture = Image.new(mode, (width, height), "teal")
    out = io.BytesIO()
    options = dict(FORMATS[kind])
    if "JPEG" in kind:
        exif = Image.Exif()
        exif[0x010E] = "x" * 5_000  # an image description: the frame header comes after it
        options["exif"] = exif.tobytes()
    picture.save(out, kind.split()[-1], **options)
    return base64.b64encode(out.getvalue()).decode()


def blocks(data: str) -> list[dict]:
    """One image in every block form the package reads."""
    url = f"data:image/png;base64,{data}"
    return [
        {"type": "image", "base64": data, "mime_type": "image/png"},  # LangChain v1
        {"type": "image", "source_type": "base64", "data": data, "mime_type": "image/png"},
        {"type": "image_url", "image_url": {"url": url}},  # OpenAI chat
        {"type": "image_url", "image_url": url},
        {"type": "input_image", "image_url": url},  # OpenAI responses
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
    ]


@settings(max_examples=30, deadline=None)
@given(
    width=st.integers(1, 1_500),
    height=st.integers(1, 1_500),
    kind=st.sampled_from(sorted(FORMATS)),
)
def test_the_size_is_read_from_every_format(width, height, kind):
    assert image_size(encoded(width, height, kind)) == (width, height)


def test_webp_with_alpha_and_every_block_form_cost_the_same():
    data = encoded(321, 123, "WEBP", mode="RGBA")  # the extended (VP8X) header
    assert image_size(data) == (321, 123)
    assert {image_tokens(b) for b in blocks(data)} == {255}


@pytest.mark.parametrize(
    ("size", "tokens"),
    [
        ((400, 300), 255),  # one OpenAI tile (85 + 170) over Anthropic's 160
        ((100, 100), 255),
        ((1024, 1024), 1_399),  # Anthropic: 1,048,576 / 750, rounded up
        ((1920, 1080), IMAGE_TOKENS),  # both charge their most
        ((4000, 1000), IMAGE_TOKENS),
    ],
)
def test_an_image_costs_the_larger_of_openai_high_detail_and_anthropic(size, tokens):
    assert image_tokens({"type": "image", "base64": encoded(*size)}) == tokens


def test_images_whose_size_is_unknown_cost_the_most_an_image_costs():
    for block in [
        {"type": "image", "url": "https://example.com/shot.png"},
        {"type": "image", "file_id": "file-1"},
        {"type": "image_url", "image_url": {"url": "https://example.com/shot.png"}},
        {"type": "image", "base64": "not base64 at all!"},
        {"type": "image", "base64": base64.b64encode(b"%PDF-1.7 not an image").decode()},
        {"type": "image_url", "image_url": {"url": "data:image/svg+xml,<svg/>"}},
    ]:
        assert image_tokens(block) == IMAGE_TOKENS
    assert image_tokens({"type": "text", "text": "x"}) is None
    assert image_size(None) is None


def test_a_message_with_a_large_screenshot_costs_its_text_and_the_image():
    count = TokenCounter()
    data = encoded(1280, 800, "PNG", mode="RGB")
    noisy = base64.b64encode(bytes(range(256)) * 4_000).decode()  # 1.3 MB of base64 beside it
    said = HumanMessage(
        [
            {"type": "text", "text": "what does the dialog say?"},
            {"type": "image", "base64": data, "mime_type": "image/png"},
        ]
    )
    shot = ToolMessage(
        [{"type": "image", "base64": noisy[:-1] + data, "mime_type": "image/png"}],
        tool_call_id="c1",
    )
    assert message_tokens(said, count) == count("what does the dialog say?\n[image]") + 1_366
    assert message_tokens(shot, count) <= count("tool: [image]") + IMAGE_TOKENS
    other = HumanMessage([{"type": "json", "json": {"rows": list(range(500))}}])
    assert message_tokens(other, count) > 500  # any other block still costs its JSON


def test_a_screenshot_in_the_newest_message_leaves_room_for_the_history():
    # before, the image counted as the tokens of its base64 (about 700,000 here), so the hook
    # sent only the system prompt and the newest message
    history = [SystemMessage("You test web pages.")]
    for i in range(20):
        history += [HumanMessage(f"page {i}: the login button is at x={i * 10}"), AIMessage("ok")]
    image = {"type": "image", "base64": encoded(1920, 1080, "PNG"), "mime_type": "image/png"}
    history.append(HumanMessage([{"type": "text", "text": "where is it on page 7?"}, image]))
    sent = create_pacms_hook(2_500).invoke({"messages": history})["llm_input_messages"]
    assert len(sent) == len(history)
    assert any("page 7:" in m.text for m in sent)


# -- PDFs ---------------------------------------------------------------------------------------
def pdf_file(pages: int, words: int = 20, scan: int = 0) -> bytes:
    """A real PDF (matplotlib's writer): ``pages`` pages of text, each with a ``scan`` x ``scan``
    noise image (a scanned page's bytes)."""
    matplotlib = pytest.importorskip("matplotlib", reason="the plot extra")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.backends.backend_pdf import PdfPages

    noise = np.random.default_rng(0)
    out = io.BytesIO()
    with PdfPages(out) as pdf:
        for page in range(pages):
            figure = plt.figure()
            figure.text(0.1, 0.5, f"page {page} " * words)
            if scan:
                figure.figimage(noise.random((scan, scan, 3)))
            pdf.savefig(figure)
            plt.close(figure)
    return out.getvalue()


def with_object_stream(pages: int) -> bytes:
    """A PDF 1.5 whose page objects sit compressed in an object stream (as most writers do)."""
    objects = b" ".join(b"<< /Type /Page /Parent 2 0 R >>" for _ in range(pages))
    packed = zlib.compress(objects + b" << /Type /Pages /Count %d >>" % pages)
    head = b"3 0 obj << /Type /ObjStm /N %d /Filter /FlateDecode /Length %d >>\nstream\n" % (
        pages + 1,
        len(packed),
    )
    catalog = b"%PDF-1.5\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n"
    return catalog + head + packed + b"\nendstream\nendobj\n%%EOF\n"


def pdf_blocks(raw: bytes) -> list[dict]:
    """One PDF in every block form the package reads."""
    data = base64.b64encode(raw).decode()
    url = f"data:application/pdf;base64,{data}"
    return [
        {"type": "file", "base64": data, "mime_type": "application/pdf"},  # LangChain v1
        {"type": "file", "source_type": "base64", "data": data, "mime_type": "application/pdf"},
        {"type": "file", "file": {"file_data": url, "filename": "a.pdf"}},  # OpenAI chat
        {"type": "input_file", "file_data": url, "filename": "a.pdf"},  # OpenAI responses
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": data},
        },
    ]


@pytest.mark.parametrize("pages", [1, 3, 12])
def test_a_pdf_costs_its_pages_in_every_block_form(pages):
    raw = pdf_file(pages)
    assert pdf_pages(raw) == pages
    assert {media_tokens(b) for b in pdf_blocks(raw)} == {pages * PDF_PAGE_TOKENS}


def test_pages_inside_compressed_object_streams_count():
    assert pdf_pages(with_object_stream(7)) == 7


def test_files_whose_pages_cannot_be_counted_cost_their_json():
    count = TokenCounter()
    zipped = base64.b64encode(b"PK\x03\x04" + bytes(range(256)) * 20).decode()
    for block in [
        {"type": "file", "base64": zipped, "mime_type": "application/zip"},
        {"type": "file", "url": "https://example.com/a.pdf"},
        {"type": "file", "base64": "not base64!"},
    ]:
        assert media_tokens(block) is None
        message = HumanMessage([block])
        assert message_tokens(message, count) > count(json.dumps(block, sort_keys=True)) - 1
    assert pdf_pages(b"%PDF-1.7 nothing here") is None


def test_base64_with_line_breaks_is_read():
    wrapped = "\n".join(base64.encodebytes(pdf_file(4)).decode().split())
    assert media_tokens({"type": "file", "base64": wrapped}) == 4 * PDF_PAGE_TOKENS
    image = encoded(640, 480)
    folded = "\r\n".join(image[i : i + 76] for i in range(0, len(image), 76))
    assert image_size(folded) == (640, 480)


def test_a_history_read_again_is_not_decoded_again(monkeypatch):
    """A checkpointed history comes back as new strings of the same value: measured once."""
    counted = []
    monkeypatch.setattr(media, "pdf_pages", lambda raw: counted.append(raw) or 2)
    data = base64.b64encode(pdf_file(2) + b"%% unique to this test").decode()
    for _ in range(3):
        again = json.loads(json.dumps({"base64": data}))["base64"]  # a new string object
        assert again is not data
        assert media_tokens({"type": "file", "base64": again}) == 2 * PDF_PAGE_TOKENS
    assert len(counted) == 1


def test_a_scanned_pdf_from_an_earlier_turn_stays_selectable():
    # before, ten scanned pages counted as the tokens of their base64 (about 2.5 million), so
    # the follow-up question lost the report; by pages it costs 46,000 and fits
    report = pdf_file(10, scan=300)
    attached = HumanMessage(
        [{"type": "text", "text": "summarise the report"}, pdf_blocks(report)[0]]
    )
    history = [attached, AIMessage("It covers Q3 revenue."), HumanMessage("what does page 7 say?")]
    count = TokenCounter()
    cost = count("summarise the report\n[file]") + 10 * PDF_PAGE_TOKENS
    assert message_tokens(attached, count) == cost
    assert count(base64.b64encode(report).decode()) > 2_000_000
    sent = create_pacms_hook(100_000).invoke({"messages": history})["llm_input_messages"]
    assert attached in sent
