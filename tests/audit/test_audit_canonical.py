"""Golden vectors: the exact bytes and hash of an entry, RFC 8785 examples, and a DB round trip.

If any of these change, every existing audit export stops verifying: the files under golden/
must never be regenerated to make a test pass.
"""

from __future__ import annotations

import hashlib
import json
import struct
from datetime import UTC, datetime
from pathlib import Path

import pytest
import rfc8785
from django.db import transaction
from hypothesis import given, settings
from hypothesis import strategies as st

from operations.audit import entries as audit
from operations.audit import verify as av
from operations.models import AuditEntry

GOLDEN = Path(__file__).parent / "golden"


def golden_entry() -> dict:
    return json.loads((GOLDEN / "entry.input.json").read_text())


def test_golden_entry_has_its_checked_in_bytes_and_hash():
    body = (GOLDEN / "entry.body").read_bytes()
    expected_hash = (GOLDEN / "entry.sha256").read_text().strip()
    assert audit.canonical(golden_entry()) == body
    # The hash is computed here from the definition, independently of the code under test.
    assert hashlib.sha256(b"pollerdash/audit/entry/v1\n" + body).hexdigest() == expected_hash
    assert av.ENTRY_TAG == b"pollerdash/audit/entry/v1\n" and av.GENESIS_PREV == "0" * 64


def test_golden_version_2_entry_and_its_leaf_hash():
    """The version-2 body: the same entry without seq and prev, v 2; hashed as an RFC 9162 leaf."""
    body = (GOLDEN / "entry-v2.body").read_bytes()
    source = {key: value for key, value in golden_entry().items() if key not in ("seq", "prev")}
    assert audit.canonical({**source, "v": 2}) == body
    leaf = hashlib.sha256(b"\x00" + body).hexdigest()
    assert leaf == (GOLDEN / "entry-v2.leaf").read_text().strip() == av.merkle.leaf_hash(body).hex()


@pytest.mark.django_db
def test_append_writes_the_golden_bytes(settings):
    settings.AUDIT_LOG_NAME = "pollerdash/audit"
    source = golden_entry()
    with transaction.atomic():
        entry = audit.append(
            entry_type=source["type"],
            actor=source["actor"],
            operation_id=source["operation_id"],
            data=source["data"],
            at=datetime(2026, 12, 1, 10, 20, 31, 42, tzinfo=UTC),
        )
    stored = AuditEntry.objects.get(pk=entry.pk)
    assert bytes(stored.body) == (GOLDEN / "entry-v2.body").read_bytes()
    assert stored.entry_hash == (GOLDEN / "entry-v2.leaf").read_text().strip()


# --- RFC 8785 examples ----------------------------------------------------------------------------------


def test_rfc8785_section_3_2_2_example():
    # RFC 8785 section 3.2.2: numbers, escapes and literals.
    data = json.loads(
        '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
        ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        ' "literals": [null, true, false]}'
    )
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    assert rfc8785.dumps(data) == expected.encode()


def test_rfc8785_section_3_2_3_sorts_keys_by_utf16_code_units():
    data = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    ordered = list(json.loads(rfc8785.dumps(data)).values())
    assert ordered == [
        "Carriage Return",
        "One",
        "Control",
        "Latin Small Letter O With Diaeresis",
        "Euro Sign",
        "Emoji: Grinning Face",  # U+1F600 is D83D DE00 in UTF-16: before U+FB33, unlike code point order
        "Hebrew Letter Dalet With Dagesh",
    ]


@pytest.mark.parametrize(
    ("ieee", "expected"),
    [
        # RFC 8785 appendix B: IEEE 754 bit patterns and their canonical text.
        ("0000000000000000", "0"),
        ("8000000000000000", "0"),
        ("0000000000000001", "5e-324"),
        ("8000000000000001", "-5e-324"),
        ("7fefffffffffffff", "1.7976931348623157e+308"),
        ("ffefffffffffffff", "-1.7976931348623157e+308"),
        ("4340000000000000", "9007199254740992"),
        ("c340000000000000", "-9007199254740992"),
        ("4430000000000000", "295147905179352830000"),
        ("44b52d02c7e14af5", "9.999999999999997e+22"),
        ("44b52d02c7e14af6", "1e+23"),
        ("44b52d02c7e14af7", "1.0000000000000001e+23"),
        ("444b1ae4d6e2ef4e", "999999999999999700000"),
        ("444b1ae4d6e2ef4f", "999999999999999900000"),
        ("444b1ae4d6e2ef50", "1e+21"),
        ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
        ("3eb0c6f7a0b5ed8d", "0.000001"),
        ("41b3de4355555553", "333333333.3333332"),
        ("41b3de4355555554", "333333333.33333325"),
        ("41b3de4355555555", "333333333.3333333"),
        ("41b3de4355555556", "333333333.3333334"),
        ("41b3de4355555557", "333333333.33333343"),
        ("becbf647612f3696", "-0.0000033333333333333333"),
        ("43143ff3c1cb0959", "1424953923781206.2"),
    ],
)
def test_rfc8785_appendix_b_number_formatting(ieee, expected):
    value = struct.unpack(">d", bytes.fromhex(ieee))[0]
    assert rfc8785.dumps(value) == expected.encode()


def test_entries_refuse_what_has_no_single_canonical_form():
    with pytest.raises(audit.AuditError, match="float"):
        audit.build_data("controller.decision", {"delay_ms": 1.5})
    with pytest.raises(audit.AuditError, match="interoperable"):
        audit.build_data("controller.decision", {"delay_ms": 2**53})
    with pytest.raises(audit.AuditError, match="unknown data keys"):
        audit.build_data("controller.decision", {"surprise": 1})
    with pytest.raises(audit.AuditError, match="unknown audit entry type"):
        audit.build_data("controller.guess", {})
    with pytest.raises(audit.AuditError, match="naive"):
        audit.iso(datetime(2026, 12, 1))  # noqa: DTZ001 - the point of the test


def test_every_key_is_present_and_long_or_broken_text_is_bounded():
    data = audit.build_data("controller.decision", {"reason": "x" * 10_000, "provider_state": "bad \ud800 surrogate"})
    assert set(data) == set(audit.DATA_KEYS["controller.decision"]) and data["state"] is None
    assert len(data["reason"]) < 4100 and data["reason"].endswith("6000 more characters not recorded]")
    assert data["provider_state"] == "bad ? surrogate"


# The offline verifier's --strict mode re-serialises with the standard library instead of rfc8785
# (it must run without it). For entries - ASCII keys, integers, strings, null, booleans - the two
# must agree byte for byte, whatever the text.
_key = st.text(alphabet=st.characters(max_codepoint=127, blacklist_categories=("Cs",)), min_size=1, max_size=8)
_scalar = st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=40)
_value = st.recursive(_scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_key, inner, max_size=3))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_key, _value, max_size=6))
def test_standard_library_canonical_form_matches_rfc8785_for_entry_shaped_documents(document):
    try:
        expected = rfc8785.dumps(document)
    except rfc8785.CanonicalizationError:
        return  # lone surrogates: audit.append replaces them before they reach the encoder
    assert av.compact_json(document) == expected
