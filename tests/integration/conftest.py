"""Real pollerdash processes against the pytest test database and the fake provider.

`processes` starts `manage.py qcluster` and `manage.py dispatch_polls` subprocesses pointed at the
test database (committed rows only: these tests use `transactional_db`), each in its own process
group, and stops them in teardown (SIGTERM, then SIGKILL for the group). The fake provider runs in
its own process too. Tests wait on outcomes with deadlines; nothing sleeps for time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.support import FAST_ENV, Processes, ProviderProcess, subprocess_database_env
from tests.support import CANARY, has_canary


@pytest.fixture(scope="session")
def fake_provider() -> Iterator[ProviderProcess]:
    provider = ProviderProcess()
    try:
        yield provider
    finally:
        provider.stop()


@pytest.fixture
def processes(transactional_db: None, fake_provider: Any, pgbouncer: Any, tmp_path: Path) -> Iterator[Processes]:
    env = dict(os.environ)
    env.update(
        **subprocess_database_env(pgbouncer),
        SECRET_KEY=os.environ.get("SECRET_KEY", "test-only-not-secret"),
        PROVIDER_FAKE_TOKEN=CANARY,
        LOG_LEVEL="INFO",
        PYTHONUNBUFFERED="1",
        **FAST_ENV,
    )
    env.pop("DEBUG", None)
    group = Processes(log_dir=tmp_path, base_env=env)
    try:
        yield group
    finally:
        group.stop_all()
        leaked = [p.log_path.name for p in group.started if has_canary(p.log())]
        assert not leaked, f"the canary credential leaked into process output: {leaked}"
