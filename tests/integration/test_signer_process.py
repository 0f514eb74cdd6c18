"""The audit signer as `make demo` runs it: a clean stop leaves no "silent" process on /system/."""

from __future__ import annotations

import pytest

from operations.audit import checkpoints
from operations.models import AuditCheckpoint, ProcessHeartbeat
from tests.integration.support import wait_until

pytestmark = pytest.mark.integration


def test_a_stopped_signer_leaves_the_process_list_and_a_running_one_signs(processes, tmp_path):
    key_path = tmp_path / "audit-signing-key.pem"
    checkpoints.generate_key_file(key_path)
    signer = processes.start("signer", AUDIT_SIGNING_KEY_FILE=key_path)

    wait_until(
        lambda: ProcessHeartbeat.objects.filter(kind="signer").exists() and AuditCheckpoint.objects.exists(),
        timeout=60,
        what="the signer's heartbeat and first checkpoint",
        processes=processes,
    )

    assert signer.stop() == 0, signer.log()
    assert not ProcessHeartbeat.objects.filter(kind="signer").exists()
    assert "stopped" in signer.log()
