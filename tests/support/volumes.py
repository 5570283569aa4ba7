"""Secret files the way Kubernetes mounts and rotates them."""

from __future__ import annotations

import os
import time
from pathlib import Path


def kubernetes_secret(directory: Path, name: str, value: str) -> Path:
    """Write (or rotate) ``name`` in a secret volume as the kubelet does: ``name -> ..data/name``,
    ``..data -> ..<timestamp>/``; an update writes a new timestamped directory and renames a
    new ``..data`` symlink over the old one, so the path never changes and never reads half a value."""
    stamp = directory / f"..{time.time_ns()}"
    stamp.mkdir(parents=True, mode=0o700)
    (stamp / name).write_text(value + "\n")
    (stamp / name).chmod(0o600)
    staged = directory / "..data_tmp"
    staged.symlink_to(stamp.name)
    os.replace(staged, directory / "..data")
    link = directory / name
    if not link.is_symlink():
        link.symlink_to(f"..data/{name}")
    return link
