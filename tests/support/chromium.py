"""Headless Chromium (Debian's `chromium`) for checks of the Prefect UI: the DOM after the
page's scripts ran, screenshots, and the words OCR (tesseract) reads in a screenshot.

The UI draws a run's graph on a canvas, so its node labels are not in the DOM; reading them
from pixels is how a test can see what a person sees. `python -m tests.support.chromium URL OUT.png`
takes a screenshot (how docs/*.png were made).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image, ImageOps

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def chromium() -> str | None:
    """The Chromium binary, or None when it is not installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _chromium(url: str, *args: str, budget_ms: int) -> subprocess.CompletedProcess:
    binary = chromium()
    if binary is None:
        raise RuntimeError("chromium is not installed (scripts/install-system-deps.sh)")
    with tempfile.TemporaryDirectory(prefix="rldag-chromium-") as profile:
        command = [binary, *FLAGS, f"--user-data-dir={profile}"]
        command += [f"--virtual-time-budget={budget_ms}", *args, url]
        return subprocess.run(command, capture_output=True, text=True, timeout=180, check=True)


def dump_dom(url: str, budget_ms: int = 15_000) -> str:
    """The page's DOM after `budget_ms` of virtual time (scripts ran, API calls answered)."""
    return _chromium(url, "--dump-dom", budget_ms=budget_ms).stdout


def screenshot(
    url: str, out: Path, size: tuple[int, int] = (1400, 900), scale: int = 1, budget_ms=15_000
) -> Path:
    """A PNG of the page at `size` CSS pixels times `scale`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    window = f"--window-size={size[0]},{size[1]}"
    _chromium(
        url,
        window,
        f"--force-device-scale-factor={scale}",
        f"--screenshot={out.resolve()}",
        budget_ms=budget_ms,
    )
    return out


def read_text(png: Path, box: tuple[float, float, float, float] = (0, 0, 1, 1)) -> str:
    """What tesseract reads in `box` (fractions left, top, right, bottom) of a dark-theme
    screenshot: only near-white pixels are kept (labels, not the grey edges over them)."""
    image = Image.open(png).convert("L")
    w, h = image.size
    image = image.crop((int(box[0] * w), int(box[1] * h), int(box[2] * w), int(box[3] * h)))
    image = ImageOps.invert(image.point(lambda v: 255 if v > 190 else 0))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ocr.png"
        image.save(path)
        done = subprocess.run(
            ["tesseract", str(path), "stdout", "--psm", "11"],
            capture_output=True,
            text=True,
            check=True,
        )
    return done.stdout


if __name__ == "__main__":
    screenshot(sys.argv[1], Path(sys.argv[2]))
