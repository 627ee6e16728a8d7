"""Images cost what chat models charge for them (by pixels), not the tokens of their base64."""

import base64
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from langchain_pacms.integrations import create_pacms_hook
from langchain_pacms.messages.images import IMAGE_TOKENS, image_size, image_tokens
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
