"""Figures as the project writes them: a palette PNG (256 colours, a third of the size of
matplotlib's full-colour file for the same plot, so that results stay small enough to commit),
written atomically."""

from __future__ import annotations

import io

from datagen.errors import atomic_path


def save_figure(fig, path: str, dpi: int = 120) -> str:
    """Write matplotlib figure `fig` to `path` as a palette PNG; return `path`.

    Raises:
        UserError: the file cannot be written.
    """
    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    buffer.seek(0)
    image = Image.open(buffer).convert("RGB").quantize(256)
    with atomic_path(path, ".png") as tmp:
        image.save(tmp, format="PNG", optimize=True)
    return path

