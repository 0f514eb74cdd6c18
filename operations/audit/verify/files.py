"""Reading a whole export file: lines, header, and the version-1 layout."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import BinaryIO

from .base import (
    CHECKPOINT_MISMATCH,
    EXPORT_FORMAT,
    EXPORT_FORMAT_V2,
    EXPORT_FORMAT_V3,
    HEADER_CONSTANTS,
    HEADER_KEYS,
    HEADER_V2_CONSTANTS,
    HEADER_V2_KEYS,
    MAX_LINE_BYTES,
    PARSE,
    PIN_MISMATCH,
    SCOPES,
    Note,
    UsageError,
    VerifierKey,
    VerifyFailure,
    check_note_signature,
    checkpoint_line,
    compact_json,
    parse_keys,
    parse_note,
)
from .chain import ChainVerifier, parse_json_line
from .tree import TreeVerifier
from .witness import WitnessKey, parse_witness_keys

# --- a whole export file ----------------------------------------------------------------------------------


# Read 256 KiB at a time: one C-level split and scan per block instead of a readline and three
# checks per line (the per-line work of a million-entry export is what bounds its speed).
_BLOCK_BYTES = 1 << 18


def iter_batches(stream: BinaryIO) -> Iterator[tuple[int, list[bytes]]]:
    """(number of the first line, lines without LF), a block at a time. PARSE on a CR, blank line,
    long line or missing final LF - raised only after every line before the bad one was yielded,
    so the first failure in file order is the one reported."""
    number, rest = 1, b""
    read = stream.read
    while block := read(_BLOCK_BYTES):
        lines = block.split(b"\n")
        carried, rest = rest, lines.pop()  # after the last LF: the start of the next line
        if carried:
            if lines:
                lines[0] = carried + lines[0]
            else:
                rest = carried + rest
        if len(rest) > MAX_LINE_BYTES:
            lines.append(rest)  # reported as too long, after the complete lines before it
        # C-speed scans of the block and its lines; a blank line is looked for among the lines because
        # searching the block for two LFs in a row costs twenty times more (it stops at every LF).
        if b"\r" in block or b"\r" in carried or b"" in lines or (lines and max(map(len, lines)) > MAX_LINE_BYTES):
            bad = _first_bad(lines)
            if bad is not None:
                index, reason = bad
                if index:
                    yield number, lines[:index]
                raise VerifyFailure(PARSE, reason, line=number + index)
        if lines:
            yield number, lines
            number += len(lines)
    if rest:
        raise VerifyFailure(PARSE, "the file does not end with a line feed (truncated?)", line=number)


def _first_bad(lines: list[bytes]) -> tuple[int, str] | None:
    for index, line in enumerate(lines):
        if len(line) > MAX_LINE_BYTES:
            return index, f"line longer than {MAX_LINE_BYTES} bytes"
        if not line:
            return index, "blank line"
        if b"\r" in line:
            return index, "carriage return (CRLF line endings are not allowed)"
    return None


def iter_lines(stream: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """(line number, line without LF), with the checks of `iter_batches`."""
    for number, lines in iter_batches(stream):
        yield from enumerate(lines, start=number)


def _parse_header(line: bytes) -> dict[str, object]:
    if line.startswith(b"\xef\xbb\xbf"):
        raise VerifyFailure(PARSE, "byte order mark at the start of the file", line=1)
    try:
        obj = parse_json_line(line)
    except (UnicodeDecodeError, ValueError) as exc:
        raise VerifyFailure(PARSE, f"header is not valid JSON: {exc}", line=1) from None
    if type(obj) is not dict or list(obj) != ["header"] or type(obj["header"]) is not dict:
        raise VerifyFailure(PARSE, 'the first line is not {"header": {...}}', line=1)
    header = obj["header"]
    if header.get("format") in (EXPORT_FORMAT_V2, EXPORT_FORMAT_V3):
        return _parse_header_v2(header, obj, line)
    if header.get("format") != EXPORT_FORMAT:
        known = f"{EXPORT_FORMAT}, {EXPORT_FORMAT_V2} or {EXPORT_FORMAT_V3}"
        raise VerifyFailure(PARSE, f"unknown export format (expected {known})", line=1)
    _check_header(header, obj, line, keys=HEADER_KEYS, constants=HEADER_CONSTANTS, name=EXPORT_FORMAT)
    for key in ("first_seq", "last_seq"):
        value = header[key]
        if not (value is None or type(value) is int) or (key == "last_seq" and value is None):
            raise VerifyFailure(PARSE, f"header {key} is not an integer", line=1)
    return header


def _check_header(
    header: dict[str, object],
    obj: object,
    line: bytes,
    *,
    keys: frozenset[str],
    constants: Mapping[str, object],
    name: str,
) -> None:
    """What every export format's header must satisfy: its fields, canonical bytes, scope."""
    if header.keys() != keys:
        raise VerifyFailure(PARSE, f"header fields differ from {name}", line=1)
    if compact_json(obj) != line:
        raise VerifyFailure(PARSE, "header is not in canonical form", line=1)
    for key, value in constants.items():
        if header[key] != value:
            raise VerifyFailure(PARSE, f"header {key} must be {value!r}", line=1)
    scope, operation_id = header["scope"], header["operation_id"]
    if scope not in SCOPES or (operation_id is not None) != (scope == "operation"):
        raise VerifyFailure(PARSE, "header scope and operation_id disagree", line=1)
    if operation_id is not None and (type(operation_id) is not str or not operation_id):
        raise VerifyFailure(PARSE, "header operation_id is not a string", line=1)
    if type(header["log"]) is not str or type(header["exported_at"]) is not str:
        raise VerifyFailure(PARSE, "header log and exported_at are strings", line=1)


def _parse_header_v2(header: dict[str, object], obj: object, line: bytes) -> dict[str, object]:
    """Formats 2 and 3 share their header fields; format 3 is for operation and range exports."""
    name = str(header["format"])
    _check_header(header, obj, line, keys=HEADER_V2_KEYS, constants=HEADER_V2_CONSTANTS, name=name)
    if name == EXPORT_FORMAT_V3 and header["scope"] == "full":
        raise VerifyFailure(PARSE, f"a full export is written in {EXPORT_FORMAT_V2}, not {name}", line=1)
    if type(header["size"]) is not int or type(header["from"]) is not int or not 0 <= header["from"] <= header["size"]:
        raise VerifyFailure(PARSE, "header size and from are integers, from at most size", line=1)
    if header["from"] and header["scope"] != "full":
        raise VerifyFailure(PARSE, "only a full export starts after an archive (from > 0)", line=1)
    return header


def _check_header_against(header: dict[str, object], verifier: ChainVerifier) -> None:
    last = verifier.last_note
    if last is None:
        raise VerifyFailure(PARSE, "the export holds no checkpoint", line=verifier._line)
    if header["last_seq"] != last.size or header["exported_at"] != last.time_text:
        raise VerifyFailure(
            CHECKPOINT_MISMATCH,
            f"the header says the export closes at size {header['last_seq']} signed {header['exported_at']}; "
            f"its last checkpoint is size {last.size} signed {last.time_text} (truncated?)",
            seq=last.size,
            line=verifier._line,
        )
    if header["first_seq"] != verifier.first_seq or header["prev_of_first"] != verifier.prev_of_first:
        raise VerifyFailure(PARSE, "the header's first_seq / prev_of_first do not match the entries", line=1)


def verify_export(
    stream: BinaryIO,
    *,
    keys: Sequence[VerifierKey],
    covered_until: datetime | None = None,
    pins: Sequence[Note] = (),
    strict: bool = False,
    witness_keys: Sequence[WitnessKey] = (),
    witnesses_required: int = 0,
) -> dict[str, object]:
    """Verify one export read from `stream`; returns the summary or raises VerifyFailure."""
    batches = iter_batches(stream)
    first = next(batches, None)
    if first is None:
        raise VerifyFailure(PARSE, "empty file", line=1)
    header = _parse_header(first[1][0])
    batches = itertools.chain([(first[0] + 1, first[1][1:])], batches)
    for pin in pins:
        if pin.origin != header["log"]:
            raise VerifyFailure(PIN_MISMATCH, "the pinned checkpoint belongs to another log", seq=pin.size)
        try:
            check_note_signature(pin, keys)
        except VerifyFailure as exc:
            raise VerifyFailure(PIN_MISMATCH, f"the pinned checkpoint does not verify: {exc.detail}") from None
    if header["format"] in (EXPORT_FORMAT_V2, EXPORT_FORMAT_V3):
        return _verify_v2(
            header,
            batches,
            keys=keys,
            covered_until=covered_until,
            pins=pins,
            strict=strict,
            witness_keys=witness_keys,
            witnesses_required=witnesses_required,
        )
    if witnesses_required:
        raise UsageError(f"{EXPORT_FORMAT} exports carry no witness cosignatures")
    verifier = ChainVerifier(
        keys=keys,
        log=str(header["log"]),
        scope=str(header["scope"]),
        # Typing: the header passed its check: operation_id is a string or None.
        operation_id=header["operation_id"],  # type: ignore[arg-type]
        strict=strict,
        pins=pins,
    )
    checkpoint_prefix = b'{"checkpoint":'
    entry = verifier.entry
    for number, line in (numbered for start, lines in batches for numbered in enumerate(lines, start=start)):
        if line.startswith(checkpoint_prefix):
            verifier.checkpoint(checkpoint_note(line, number, verifier.head_seq), number=number)
            verifier.skipped_pins()
        else:
            entry(line, number=number)
    result = verifier.finish(covered_until=covered_until)
    _check_header_against(header, verifier)
    result["scope"] = header["scope"]
    result["operation_id"] = header["operation_id"]
    return result


def _verify_v2(
    header: dict[str, object],
    batches: Iterator[tuple[int, list[bytes]]],
    *,
    keys: Sequence[VerifierKey],
    covered_until: datetime | None,
    pins: Sequence[Note],
    strict: bool,
    witness_keys: Sequence[WitnessKey],
    witnesses_required: int,
) -> dict[str, object]:
    verifier = TreeVerifier(
        keys=keys,
        log=str(header["log"]),
        scope=str(header["scope"]),
        # Typing: the header passed its check: operation_id is a string or None.
        operation_id=header["operation_id"],  # type: ignore[arg-type]
        strict=strict,
        pins=pins,
        witness_keys=witness_keys,
        witnesses_required=witnesses_required,
        batch=header["format"] == EXPORT_FORMAT_V3,
    )
    number = 1
    replay = verifier.replay
    for start, lines in batches:
        index, count = 0, len(lines)
        while (index := replay(lines, index, first=start)) < count:
            number, line = start + index, lines[index]
            if line.startswith(b'{"checkpoint":'):
                verifier.checkpoint(checkpoint_note(line, number, verifier.tree.size), number=number)
            elif line.startswith(b'{"inclusion":'):
                verifier.inclusion(line, number=number)
            elif line.startswith(b'{"batch":'):
                verifier.batch_line(line, number=number)
            elif line.startswith(b'{"consistency":'):
                verifier.consistency_line(line, number=number)
            elif line.startswith(b'{"frontier":'):
                # Typing: the header passed its check: from is an integer.
                verifier.frontier_line(line, number=number, start=int(header["from"]))  # type: ignore[call-overload]
            else:
                verifier.entry(line, number=number)
            index += 1
        number = start + count - 1
    if header["from"] and verifier.start_frontier is None:
        raise VerifyFailure(PARSE, f"the export starts at size {header['from']} without its frontier line")
    result = verifier.finish(covered_until=covered_until)
    _check_closing_checkpoint(header, verifier=verifier, number=number)
    result["scope"] = header["scope"]
    result["operation_id"] = header["operation_id"]
    result["format"] = header["format"]
    result["from"] = header["from"]
    return result


def _check_closing_checkpoint(header: dict[str, object], *, verifier: TreeVerifier, number: int) -> None:
    """The export's last checkpoint is the one its header names: an export cut short fails here."""
    last = verifier.last_note
    assert last is not None
    if header["size"] != last.size or header["exported_at"] != last.time_text:
        raise VerifyFailure(
            CHECKPOINT_MISMATCH,
            f"the header says the export closes at size {header['size']} signed {header['exported_at']}; "
            f"its last checkpoint is size {last.size} signed {last.time_text} (truncated?)",
            seq=last.size,
            line=number,
        )


def checkpoint_note(line: bytes, number: int, seq: int) -> str:
    try:
        obj = parse_json_line(line)
    except (UnicodeDecodeError, ValueError) as exc:
        raise VerifyFailure(PARSE, f"checkpoint line is not valid JSON: {exc}", seq=seq, line=number) from None
    if type(obj) is not dict or list(obj) != ["checkpoint"] or type(obj["checkpoint"]) is not str:
        raise VerifyFailure(PARSE, 'a checkpoint line is {"checkpoint": "<note>"}', seq=seq, line=number)
    if checkpoint_line(obj["checkpoint"]) != line + b"\n":
        raise VerifyFailure(PARSE, "checkpoint line is not in canonical form", seq=seq, line=number)
    return obj["checkpoint"]


def read_pin(path: str) -> Note:
    """A pinned checkpoint: the note text itself, or an export's {"checkpoint": ...} line."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(64 * 1024)
    except OSError as exc:
        raise UsageError(f"cannot read --pin {path}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
        if text.lstrip().startswith("{"):
            obj = parse_json_line(text.strip().encode())
            if type(obj) is not dict or type(obj.get("checkpoint")) is not str:
                raise ValueError('expected {"checkpoint": "<note>"}')
            text = obj["checkpoint"]
        return parse_note(text)
    except (UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"--pin {path} is not a checkpoint: {exc}") from None


def load_keys(path: str) -> list[VerifierKey]:
    try:
        with open(path, encoding="utf-8") as handle:
            return parse_keys(handle.read(1 << 20))
    except OSError as exc:
        raise UsageError(f"cannot read --keys {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"--keys {path} is not UTF-8 text") from None


def load_witness_keys(paths: Sequence[str]) -> list[WitnessKey]:
    keys: list[WitnessKey] = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as handle:
                keys += parse_witness_keys(handle.read(1 << 20))
        except OSError as exc:
            raise UsageError(f"cannot read --witness-key {path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise UsageError(f"--witness-key {path} is not UTF-8 text") from None
    return keys
