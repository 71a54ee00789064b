"""Fixtures of the Dagster-level tests: a fresh namespace on each catalog kind, its config.toml
and IO manager (a module that needs another destination defines its own)."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture
def namespace():
    return "t_" + uuid.uuid4().hex[:8]


@pytest.fixture
def config_file(tmp_path, catalog, namespace):
    path = tmp_path / "config.toml"
    path.write_text(catalog.config_toml(namespace))
    return str(path)


@pytest.fixture
def io_manager(spark, catalog, namespace):
    """On each catalog kind (tests/catalogs.py): the Hadoop folder and a JDBC catalog."""
    return catalog.io_manager(namespace)
