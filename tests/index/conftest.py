"""Fixtures of the index tests that more than one module uses."""

from __future__ import annotations

from pathlib import Path

import pytest
from bounds_fixtures import build_bound_indexes
from typer.testing import CliRunner


@pytest.fixture(scope="module")
def indexes(tmp_path_factory: pytest.TempPathFactory, tiny_bert: Path) -> dict[str, Path]:
    """The bound tests' indexes (`bounds_fixtures.build_bound_indexes`), built once per module."""
    return build_bound_indexes(tmp_path_factory.mktemp("bounds"), tiny_bert)


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner()
