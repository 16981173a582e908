"""The tiny tasks' built models ship with the project, so every machine starts RL from the
same weights.

A model trained here comes out different on every processor (float results differ between
CPU kernels: AVX-512, AVX2, MKL's code paths), and so would every learning curve that
starts from it. The builds under ``examples/tiny_models/<name>/`` were made once by the
recipe (``python -m examples.tiny_task --rebuild``); each holds ``SHA256SUMS``, the
SHA-256 of each of its files (``sha256sum -c`` reads it). A build is installed by copying
it after checking every file against those sums, and an installed copy is up to date only
while its files still match them.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

SHIPPED_ROOT = Path(__file__).resolve().parents[1] / "tiny_models"
CHECKSUMS = "SHA256SUMS"
STAMP_FILE = "build.json"


class ShippedBuildError(RuntimeError):
    """A shipped (or installed) build whose files do not match its ``SHA256SUMS``."""


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != CHECKSUMS)


def write_checksums(root: Path) -> None:
    """Writes ``root/SHA256SUMS`` over every other file under ``root``."""
    lines = [f"{_digest(p)}  {p.relative_to(root).as_posix()}\n" for p in _files(root)]
    (root / CHECKSUMS).write_text("".join(lines))


def read_checksums(root: Path) -> dict[str, str] | None:
    """``root/SHA256SUMS`` as {relative path: sha256}, or None when there is none."""
    try:
        text = (root / CHECKSUMS).read_text()
    except OSError:
        return None
    sums = {}
    for line in text.splitlines():
        digest, _, name = line.partition("  ")
        sums[name] = digest
    return sums


def mismatches(root: Path, sums: dict[str, str]) -> list[str]:
    """The files under ``root`` that are missing, extra or differ from ``sums``."""
    present = {p.relative_to(root).as_posix() for p in _files(root)}
    wrong = sorted(present.symmetric_difference(sums))
    wrong += [n for n in sorted(present & set(sums)) if _digest(root / n) != sums[n]]
    return wrong


def shipped_build(key: dict[str, Any], root: Path = SHIPPED_ROOT) -> Path | None:
    """The shipped build whose ``build.json`` carries every entry of ``key``, or None (a
    build with other parameters, or an installed package without the examples)."""
    for stamp in sorted(root.glob(f"*/{STAMP_FILE}")):
        try:
            found = json.loads(stamp.read_text())
        except (OSError, ValueError):
            continue
        if all(found.get(name) == value for name, value in key.items()):
            return stamp.parent
    return None


def verified_sums(shipped: Path) -> dict[str, str]:
    """The shipped build's checksums, after checking every file against them."""
    sums = read_checksums(shipped)
    if not sums:
        raise ShippedBuildError(f"{shipped}: no {CHECKSUMS}; the shipped build is incomplete")
    wrong = mismatches(shipped, sums)
    if wrong:
        raise ShippedBuildError(
            f"{shipped}: {', '.join(wrong)} do not match {CHECKSUMS} (a damaged checkout? "
            "`git checkout -- examples/tiny_models` restores them; "
            "`python -m examples.tiny_task --rebuild` trains a build of your own instead)"
        )
    return sums


def is_installed(out: Path, shipped: Path) -> bool:
    """Whether ``out`` holds exactly the shipped build's files (by their checksums)."""
    sums = read_checksums(shipped)
    return bool(sums) and read_checksums(out) == sums and not mismatches(out, sums)


def install(shipped: Path, into: Path) -> None:
    """Copies the verified shipped build into the empty directory ``into``."""
    sums = verified_sums(shipped)
    shutil.copytree(shipped, into, dirs_exist_ok=True)
    if mismatches(into, sums):  # a copy gone wrong (a full disk) is no install
        raise ShippedBuildError(f"copying {shipped} into {into} did not give the same files")
