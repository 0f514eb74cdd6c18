"""`manage.py archive` to an S3-compatible bucket (settings `AUDIT_ARCHIVE_S3_*`, django-storages),
against a real S3 API served on 127.0.0.1 (moto's server): the archive lands in the bucket, is
read back from it (and again, verified, just before the prune) before anything is removed,
verifies offline with a newer export, and never replaces an object already there."""

from __future__ import annotations

import socket
from datetime import timedelta
from io import StringIO

import boto3
import pytest
from django.core.management import CommandError, call_command
from moto.server import ThreadedMotoServer

from operations.audit import archive, checkpoints
from operations.audit import verify as av
from operations.audit.export import stream_export
from operations.models import AuditArchive, AuditEntry
from pollerdash.storage import s3_audit_archive
from tests.support import T0

pytestmark = pytest.mark.django_db

BUCKET = "pollerdash-archives"


@pytest.fixture
def bucket(monkeypatch: pytest.MonkeyPatch, settings: object):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    # boto3's own credential chain, as in production: nothing in settings.
    for name, value in {"AWS_ACCESS_KEY_ID": "archiver", "AWS_SECRET_ACCESS_KEY": "not-a-real-secret"}.items():
        monkeypatch.setenv(name, value)
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    settings.STORAGES = {
        **settings.STORAGES,
        "audit_archive": s3_audit_archive(bucket=BUCKET, prefix="audit", endpoint_url=endpoint, region="us-east-1"),
    }
    try:
        yield client
    finally:
        server.stop()


def test_an_archive_goes_to_the_bucket_verifies_from_it_and_never_replaces_an_object(
    sample_export, keys_file, bucket, tmp_path
):
    name = "pollerdash_audit-000000000001-000000000004.jsonl"
    bucket.put_object(Bucket=BUCKET, Key=f"audit/{name}", Body=b"someone else's object\n")
    out = StringIO()
    call_command("archive", "--before", "2026-12-01T10:01:00Z", stdout=out)  # no --to: the configured storage
    assert "archived audit entries 1-4" in out.getvalue() and "removed 4 archived audit entries" in out.getvalue()
    saved = AuditArchive.objects.get().name
    assert saved != name and saved.startswith(name.removesuffix(".jsonl"))  # the taken name was not reused
    assert bucket.get_object(Bucket=BUCKET, Key=f"audit/{name}")["Body"].read() == b"someone else's object\n"
    archived = tmp_path / "archived.jsonl"
    archived.write_bytes(bucket.get_object(Bucket=BUCKET, Key=f"audit/{saved}")["Body"].read())
    newer = tmp_path / "newer.jsonl"
    newer.write_bytes(b"".join(stream_export()))
    status, result = av.run([str(archived), str(newer), "--keys", str(keys_file)])
    assert status == 0 and result["files"] == 2, result
    assert not AuditEntry.objects.filter(seq__lte=4).exists()


def test_a_bucket_that_refuses_the_archive_stops_the_command_before_anything_is_removed(
    sample_export, bucket, settings
):
    options = settings.STORAGES["audit_archive"]["OPTIONS"]
    settings.STORAGES = {
        **settings.STORAGES,
        "audit_archive": {**settings.STORAGES["audit_archive"], "OPTIONS": {**options, "bucket_name": "no-such"}},
    }
    with pytest.raises(
        CommandError, match="NOTHING ARCHIVED: the archive storage failed, nothing removed: .*NoSuchBucket"
    ):
        call_command("archive", "--before", "2026-12-01T10:01:00Z", stdout=StringIO())
    assert not AuditArchive.objects.exists() and AuditEntry.objects.exclude(seq=None).count() == 11


def test_an_archive_replaced_in_the_bucket_before_the_prune_removes_nothing(sample_export, keys_file, bucket):
    # The prune reads the archive back from the bucket and verifies it first, whatever the backend:
    # an object replaced after it was recorded (here with an older, shorter range) stops it.
    storage = archive.archive_storage()
    done = archive.archive_before(before=T0 + timedelta(minutes=2), storage=storage)
    checkpoints.sign_checkpoint()  # its audit.archived entry, signed
    key = f"audit/{done.name}"
    original = bucket.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    bucket.put_object(Bucket=BUCKET, Key=key, Body=original.replace(b'"decision":"wait"', b'"decision":"done"', 1))
    with pytest.raises(archive.ArchiveError, match="reads back differently.*does not verify"):
        archive.prune_archived(storage=storage)
    assert AuditEntry.objects.filter(seq__lte=8).count() == 8
    bucket.put_object(Bucket=BUCKET, Key=key, Body=original)
    assert archive.prune_archived(storage=storage).removed == 8
