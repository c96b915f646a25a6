"""The lock (constraints.txt) against the environment this Python runs in.

    python scripts/lock_drift.py constraints.txt          # the releases that differ from the lock
    python scripts/lock_drift.py --write constraints.txt  # the lock, from this environment

The first form is what `make test-newest` prints when the suite fails on the newest releases: the
packages whose installed version is not the locked one, so the release that broke a test is among
a short list. The second writes every installed distribution but embedkit itself and torch (the
Makefile's TORCH picks that build: CPU, CUDA or another index) as `name==version`, sorted.
"""

from __future__ import annotations

import argparse
import platform
import re
import sys
from importlib import metadata
from pathlib import Path

UNLOCKED = {"embedkit", "torch", "pip", "setuptools", "wheel"}


def canonical(name: str) -> str:
    """PEP 503's normalized name: `PyYAML` and `pyyaml`, `ruamel.yaml` and `ruamel-yaml` are one."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed() -> dict[str, str]:
    found = {canonical(d.metadata["Name"]): d.version for d in metadata.distributions() if d.metadata["Name"]}
    return {name: version for name, version in found.items() if name not in UNLOCKED}


def read_lock(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonical(name)] = version.strip()
    return pins


def write_lock(path: Path) -> None:
    python = ".".join(platform.python_version_tuple()[:2])
    header = [
        "# The versions the test suite passed with: `make setup`, `make test` and CI install these",
        f"# (-c constraints.txt). Written by `make lock` on {platform.system()} {platform.machine()}, Python "
        f"{python}; torch is the Makefile's TORCH.",
        "# pyproject.toml keeps ranges for installs into your own environment; `make test-newest` runs",
        "# the suite on the newest releases they allow.",
    ]
    pins = [f"{name}=={version}" for name, version in sorted(installed().items())]
    path.write_text("\n".join(header + pins) + "\n", encoding="utf-8")
    print(f"{path}: {len(pins)} packages")


def drift(path: Path) -> int:
    locked, now = read_lock(path), installed()
    changed = [(name, locked[name], new) for name, new in sorted(now.items()) if locked.get(name, new) != new]
    added = sorted(set(now) - set(locked))
    if not changed and not added:
        print(f"every installed release is the one {path} locks")
        return 0
    print(f"releases that differ from {path}:")
    for name, old, new in changed:
        print(f"  {name} {old} -> {new}")
    for name in added:
        print(f"  {name} {now[name]} (not in the lock)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lock", type=Path)
    parser.add_argument("--write", action="store_true", help="write the lock from this environment")
    args = parser.parse_args()
    if args.write:
        write_lock(args.lock)
        return 0
    return drift(args.lock)


if __name__ == "__main__":
    sys.exit(main())
