"""Witness cosignatures in the C2SP tlog-cosignature format (cosignature/v1, Ed25519).

A witness signs ``cosignature/v1\\ntime <unix seconds>\\n`` followed by the checkpoint's text and
adds a signature line ``— <witness name> base64(key id || 8-byte big-endian time || signature)``
to the note. Its key id is ``SHA-256(name || 0x0A || 0x04 || public key)[:4]`` and its verifier
key ``<name>+<hex key id>+base64(0x04 || public key)``. A witness cosigns a checkpoint only after
checking it is consistent with the last one it cosigned (operations.audit.witness), so a log
showing two different histories needs the witnesses' keys too.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .base import BAD_SIGNATURE, Note, UsageError, VerifyFailure

ALGORITHM_COSIGNATURE = b"\x04"
_NAME_RE = re.compile(r"\A[!-*,-~]+\Z")


def witness_key_id(name: str, public_raw: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + ALGORITHM_COSIGNATURE + public_raw).digest()[:4]


def cosigned_message(body: str, timestamp: int) -> bytes:
    return f"cosignature/v1\ntime {timestamp}\n{body}".encode()


def cosignature_line(*, name: str, public_raw: bytes, timestamp: int, signature: bytes) -> str:
    blob = witness_key_id(name, public_raw) + timestamp.to_bytes(8, "big") + signature
    return f"\u2014 {name} {base64.b64encode(blob).decode()}\n"


@dataclass(frozen=True)
class WitnessKey:
    name: str
    key_id: bytes
    public_raw: bytes

    @property
    def line(self) -> str:
        encoded = base64.b64encode(ALGORITHM_COSIGNATURE + self.public_raw).decode()
        return f"{self.name}+{self.key_id.hex()}+{encoded}"


def witness_key(name: str, public_raw: bytes) -> WitnessKey:
    if not _NAME_RE.match(name):
        raise ValueError(f"witness name {name!r} must be printable ASCII without spaces or '+'")
    return WitnessKey(name, witness_key_id(name, public_raw), public_raw)


def parse_witness_keys(text: str) -> list[WitnessKey]:
    """Witness verifier keys, one per line (`#` starts a comment)."""
    keys = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split("+", 2)
        try:
            blob = base64.b64decode(parts[2], validate=True) if len(parts) == 3 else b""
        except ValueError:
            blob = b""
        if len(blob) != 33 or blob[:1] != ALGORITHM_COSIGNATURE or not _NAME_RE.match(parts[0]):
            raise UsageError(f"witness keys line {number}: not a cosignature/v1 Ed25519 key (name+id+base64)")
        key = witness_key(parts[0], blob[1:])
        if key.key_id.hex() != parts[1]:
            raise UsageError(f"witness keys line {number}: key id {parts[1]!r} does not match the key")
        keys.append(key)
    if not keys:
        raise UsageError("the witness keys file holds no key")
    return keys


def witnesses_of(note: Note, keys: Sequence[WitnessKey]) -> set[str]:
    """The names of the trusted witnesses whose cosignature on the note verifies. A cosignature by
    a key not in `keys` counts for nothing; one claiming a trusted key that does not verify is
    tampering (BAD_SIGNATURE)."""
    seen = set()
    for sig in note.signatures:
        for key in keys:
            if key.name != sig.name or key.key_id != sig.key_id:
                continue
            blob = sig.signature
            timestamp = int.from_bytes(blob[:8], "big")
            try:
                if len(blob) != 72:
                    raise InvalidSignature
                Ed25519PublicKey.from_public_bytes(key.public_raw).verify(
                    blob[8:], cosigned_message(note.body, timestamp)
                )
            except InvalidSignature:
                detail = f"the cosignature of witness {key.name}+{key.key_id.hex()} does not verify"
                raise VerifyFailure(BAD_SIGNATURE, detail, seq=note.size) from None
            seen.add(key.name)
    return seen
