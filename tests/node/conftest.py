"""The node collector's tests report to a real `attribution serve` on a real PostgreSQL (one per module)."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import create_engine

from tests.harness.service import start_service


@pytest.fixture(scope="module")
def node_db(pg_server, pg_template):
    name = f"node_{uuid.uuid4().hex[:12]}"
    url = pg_server.create_database(name, template=pg_template)
    try:
        yield url
    finally:
        pg_server.drop_database(name)


@pytest.fixture(scope="module")
def node_service(node_db, tmp_path_factory):
    svc = start_service(node_db, tmp_path_factory.mktemp("node-service"),
                        extra_tokens="report 0123456789abcdef0123456789abcdef n1-token cluster=hard nodes=n[1-4]\n")
    try:
        yield svc
    finally:
        svc.stop()


@pytest.fixture(scope="module")
def node_engine(node_db):
    engine = create_engine(node_db)
    try:
        yield engine
    finally:
        engine.dispose()
