"""Storage backends named in settings (kept here so tests build the same entries settings do)."""

from __future__ import annotations


def s3_audit_archive(*, bucket: str, prefix: str, endpoint_url: str, region: str) -> dict[str, object]:
    """`STORAGES["audit_archive"]` for an S3-compatible bucket (django-storages, `pollerdash[s3]`).

    Credentials are left to boto3's own chain (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or an
    instance role), never put in settings: nothing in a settings dump or an error page holds them.
    """
    return {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": bucket,
            "location": prefix,
            "endpoint_url": endpoint_url or None,  # MinIO, Ceph, R2 and the like; None is AWS itself
            "region_name": region or None,
            # An archive is never replaced: a name already taken gets a suffix, which is what gets recorded.
            "file_overwrite": False,
        },
    }
