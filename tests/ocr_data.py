"""Real-weight OCR models shipped in a pip package, and text-line data rendered for them.

``rapidocr-onnxruntime`` (the test extra) ships PaddleOCR's PP-OCRv4 text detector (DB),
its text recognizer (SVTR-LCNet, CTC over 6,625 classes) and a text-line orientation
classifier (0 or 180 degrees), converted by paddle2onnx with symbolic dims
(``p2o.DynamicDimension.0``, ``?``). They are real networks with trained weights that
were not written by torch's exporter, which is why the tests use them. The package is
located without being imported (its ``__init__`` imports OpenCV, which needs libGL).

The data is rendered here with Pillow from DejaVu/Liberation fonts (installed with
Graphviz and Chromium in CI) and preprocessed as rapidocr does (height 48, width by the
aspect ratio, padded to the batch's width, scaled to [-1, 1]).
"""

from __future__ import annotations

import functools
import importlib.util
import random
from pathlib import Path

import numpy as np

from tests.missing import missing

MODELS = {
    "det": "ch_PP-OCRv4_det_infer.onnx",
    "rec": "ch_PP-OCRv4_rec_infer.onnx",
    "cls": "ch_ppocr_mobile_v2.0_cls_infer.onnx",
}
FONT_DIRS = ("/usr/share/fonts/truetype/dejavu", "/usr/share/fonts/truetype/liberation")
WORDS = (
    "invoice total amount order date number account paid balance due customer item price quantity tax net gross "
    "shipping address street city phone email reference payment bank transfer discount"
).split()
HEIGHT = 48


def model_path(kind: str) -> Path:
    """The ONNX file of ``kind`` (det, rec, cls) inside the installed rapidocr-onnxruntime."""
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        missing("rapidocr-onnxruntime is not installed (pip install -e '.[test]')")
    path = Path(next(iter(spec.submodule_search_locations))) / "models" / MODELS[kind]
    if not path.is_file():
        missing(f"rapidocr-onnxruntime has no {path.name}")
    return path


@functools.cache
def alphabet() -> tuple[str, ...]:
    """The recognizer's classes: CTC blank, the dictionary in the file's metadata, then space (PaddleOCR's order)."""
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(model_path("rec")), load_external_data=False).metadata_props}
    return ("", *meta["character"].split("\n"), " ")


def fonts() -> list[str]:
    found = sorted(str(p) for d in FONT_DIRS for p in Path(d).glob("*.ttf") if "Bold" not in p.name)
    if not found:
        missing("no DejaVu or Liberation TrueType fonts (apt-get install -y fonts-dejavu-core)")
    return found


def random_text(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(1, 3))]
    words = [w.capitalize() if rng.random() < 0.5 else w for w in words]
    return " ".join([*words, str(rng.randint(0, 99999))])


def render_line(text: str, rng: random.Random, width: int | None = None) -> np.ndarray:
    """``text`` on a white line, as the recognizer's input [1, 3, 48, W] (W: the line's own width, or ``width``)."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype(rng.choice(fonts()), rng.randint(22, 30))
    left, top, right, bottom = font.getbbox(text)
    image = Image.new("RGB", (right + 12, HEIGHT), "white")
    ImageDraw.Draw(image).text((6, (HEIGHT - (bottom - top)) // 2 - top), text, fill="black", font=font)
    if width is not None and image.width > width:  # rapidocr squeezes a line wider than the batch's width
        image = image.resize((width, HEIGHT), Image.Resampling.BILINEAR)
    pixels = (np.asarray(image, np.float32) / 255 - 0.5) / 0.5
    line = np.ascontiguousarray(pixels.transpose(2, 0, 1)[None])
    if width is None:
        return line
    padded = np.zeros((1, 3, HEIGHT, width), np.float32)
    padded[..., : line.shape[3]] = line
    return padded


def text_lines(count: int, seed: int = 0, width: int | None = 320) -> list[tuple[str, np.ndarray]]:
    """``count`` (text, image) pairs; fixed ``width`` pads every line (None keeps each line's own width)."""
    rng = random.Random(seed)
    return [(text, render_line(text, rng, width)) for text in (random_text(rng) for _ in range(count))]


#: The detector's normalization (rapidocr's DetPreProcess: ImageNet mean and deviation on [0, 1] pixels).
DET_MEAN, DET_STD = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)


def text_page(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A white page of ``height`` x ``width`` with rendered text lines on it, as the detector's input [1, 3, H, W].

    The detector answers ~1e-7 everywhere on noise, so its numerics are only meaningful on text.
    """
    rng = random.Random(seed)
    page = np.ones((height, width, 3), np.float32)
    top = rng.randint(0, 8)
    while top + HEIGHT <= height:
        line = (render_line(random_text(rng), rng)[0].transpose(1, 2, 0) + 1) / 2  # back to [0, 1] pixels
        left = rng.randint(0, 16)
        span = min(line.shape[1], width - left)
        page[top : top + HEIGHT, left : left + span] = line[:, :span]
        top += HEIGHT + rng.randint(0, 12)
    return np.ascontiguousarray(((page - DET_MEAN) / DET_STD).transpose(2, 0, 1)[None])


def ctc_decode(probabilities: np.ndarray) -> str:
    """Greedy CTC: the best class per step, repeats merged, blanks dropped ([1, T, C] -> text)."""
    classes, chars = probabilities[0].argmax(-1), alphabet()
    keep = np.ones(len(classes), bool)
    keep[1:] = classes[1:] != classes[:-1]
    return "".join(chars[c] for c in classes[keep & (classes != 0)])


def edit_distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (ca != cb))
    return row[-1]


def recognition_scores(run, lines: list[tuple[str, np.ndarray]]) -> tuple[float, float]:
    """(exact-string accuracy, character error rate) of ``run(image) -> probabilities`` on ``lines``."""
    exact = errors = chars = 0
    for text, image in lines:
        read = ctc_decode(run(image))
        exact += read == text
        errors += edit_distance(read, text)
        chars += len(text)
    return exact / len(lines), errors / chars
