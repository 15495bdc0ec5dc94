"""Sample images made locally with Pillow: distinct originals and their near-duplicates.

Each original is a seeded composition of gradients, shapes and noise; its near-duplicates
are the same picture resized, cropped or recompressed as a low-quality JPEG. One sample is
deliberately corrupt so the system has a failure to show. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import io
import random
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter

SIZE = 256
VARIANTS = ("original", "resized", "cropped", "recompressed")


@dataclass(frozen=True)
class Sample:
    """One file to upload; `group` is the original it derives from (None: corrupt)."""

    filename: str
    content: bytes
    group: int | None
    variant: str


def original(seed: int) -> Image.Image:
    """A distinct picture for `seed`: a two-colour gradient, shapes, then light noise."""
    rng = random.Random(seed)
    picture = Image.new("RGB", (SIZE, SIZE))
    draw = ImageDraw.Draw(picture)
    start = [rng.randrange(256) for _ in range(3)]
    end = [rng.randrange(256) for _ in range(3)]
    vertical = rng.random() < 0.5
    for i in range(SIZE):
        t = i / (SIZE - 1)
        colour = tuple(round(a + (b - a) * t) for a, b in zip(start, end, strict=True))
        line = [(0, i), (SIZE, i)] if vertical else [(i, 0), (i, SIZE)]
        draw.line(line, fill=colour)
    for _ in range(rng.randint(4, 8)):
        x0, y0 = rng.randrange(SIZE - 40), rng.randrange(SIZE - 40)
        x1, y1 = x0 + rng.randint(30, 150), y0 + rng.randint(30, 150)
        fill = tuple(rng.randrange(256) for _ in range(3))
        shape = rng.choice(("ellipse", "rectangle", "polygon"))
        if shape == "ellipse":
            draw.ellipse([x0, y0, x1, y1], fill=fill)
        elif shape == "rectangle":
            draw.rectangle([x0, y0, x1, y1], fill=fill)
        else:
            points = [(rng.randrange(SIZE), rng.randrange(SIZE)) for _ in range(rng.randint(3, 6))]
            draw.polygon(points, fill=fill)
    # Noise from the seeded generator (not Pillow's effect_noise) keeps samples reproducible.
    noise = Image.frombytes("L", (SIZE, SIZE), rng.randbytes(SIZE * SIZE)).convert("RGB")
    return Image.blend(picture, noise, 0.08).filter(ImageFilter.SMOOTH)


def encode(picture: Image.Image, fmt: str, **options: int) -> bytes:
    """The picture as file bytes in `fmt` ("PNG" or "JPEG")."""
    buffer = io.BytesIO()
    picture.save(buffer, format=fmt, **options)
    return buffer.getvalue()


def variant(picture: Image.Image, kind: str) -> tuple[bytes, str]:
    """Bytes and file extension of one near-duplicate `kind` of `picture`."""
    if kind == "original":
        return encode(picture, "PNG"), "png"
    if kind == "resized":
        return encode(
            picture.resize((SIZE * 5 // 8, SIZE * 5 // 8), Image.Resampling.LANCZOS), "PNG"
        ), "png"
    if kind == "cropped":
        margin = SIZE // 50  # a 2% border: phash tolerates it, bigger crops drift apart
        return encode(picture.crop((margin, margin, SIZE - margin, SIZE - margin)), "PNG"), "png"
    if kind == "recompressed":
        return encode(picture, "JPEG", quality=30), "jpg"
    raise ValueError(f"unknown variant {kind!r}; use one of {', '.join(VARIANTS)}")


def corrupt() -> Sample:
    """A file that claims to be a PNG but is not one: its hash fails, on purpose."""
    content = b"\x89PNG\r\n\x1a\n" + b"this upload was cut short" * 8
    return Sample("corrupt.png", content, None, "corrupt")


def generate(groups: int = 8, *, seed: int = 2026, with_corrupt: bool = True) -> list[Sample]:
    """`groups` originals, each with 1-3 near-duplicates, shuffled; plus one corrupt file.

    Raises ValueError for `groups` < 1.
    """
    if groups < 1:
        raise ValueError(f"groups must be at least 1, got {groups}")
    rng = random.Random(seed)
    samples: list[Sample] = []
    for group in range(groups):
        picture = original(seed * 1000 + group)
        kinds = ["original", *rng.sample(VARIANTS[1:], rng.randint(1, 3))]
        for kind in kinds:
            content, ext = variant(picture, kind)
            samples.append(Sample(f"g{group:02d}-{kind}.{ext}", content, group, kind))
    rng.shuffle(samples)
    if with_corrupt:
        samples.insert(len(samples) // 2, corrupt())
    return samples


def replacement() -> Sample:
    """A valid picture to put in place of the corrupt upload before retrying it."""
    content, _ = variant(original(424242), "original")
    return Sample("corrupt.png", content, None, "replacement")


def main(argv: list[str] | None = None) -> int:
    """`python -m examples.imagededup.samples DIR`: write the samples as files, for curl."""
    parser = argparse.ArgumentParser(
        prog="python -m examples.imagededup.samples", description=main.__doc__
    )
    parser.add_argument(
        "directory", type=Path, help="where to write the files (created if missing)"
    )
    parser.add_argument("--groups", type=int, default=4, help="distinct originals (default 4)")
    args = parser.parse_args(argv)
    if args.groups < 1:
        parser.error(f"--groups must be at least 1, got {args.groups}")
    args.directory.mkdir(parents=True, exist_ok=True)
    files = generate(args.groups)
    for sample in files:
        (args.directory / sample.filename).write_bytes(sample.content)
    print(f"wrote {len(files)} files to {args.directory}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
