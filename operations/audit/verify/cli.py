"""The pollerdash-audit-verify command line."""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import zlib
from collections.abc import Sequence
from typing import BinaryIO

from .base import EXIT_OK, EXIT_TAMPERED, EXIT_USAGE, PARSE, SEQ_GAP, UsageError, VerifyFailure, parse_cli_time
from .files import load_keys, load_witness_keys, read_pin, verify_export


class _Parser(argparse.ArgumentParser):
    # Typing: argparse's error is NoReturn; ours raises UsageError instead of exiting (mypy: a narrower override).
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="pollerdash-audit-verify",
        description="Verify a pollerdash audit export offline. Exit 0 valid, 1 tampered, 2 usage or I/O error.",
    )
    parser.add_argument(
        "file",
        nargs="+",
        help="the export (JSONL, or JSONL compressed with gzip; - reads standard input), or archives oldest first"
        " and then a newer full export",
    )
    parser.add_argument("--keys", required=True, help="file of trusted verifier keys, one per line")
    parser.add_argument(
        "--covered-until",
        type=parse_cli_time,
        metavar="T",
        help="fail (STALE) unless a checkpoint signed at or after T minus 60 s is present",
    )
    parser.add_argument(
        "--pin",
        action="append",
        default=[],
        metavar="CHECKPOINT",
        help="a checkpoint kept elsewhere (a witness copy); the export must contain its size and head",
    )
    parser.add_argument("--strict", action="store_true", help="also require every entry in RFC 8785 form")
    parser.add_argument(
        "--witness-key",
        action="append",
        default=[],
        metavar="FILE",
        help="file of trusted witness keys (cosignature/v1), one per line; other witnesses count for nothing",
    )
    parser.add_argument(
        "--witnesses-required",
        type=int,
        metavar="K",
        help="fail (UNWITNESSED) unless some checkpoint carries cosignatures of K witnesses (default 1 with keys)",
    )
    return parser


def run(argv: Sequence[str] | None = None, *, stdin: BinaryIO | None = None) -> tuple[int, dict[str, object]]:
    """The command without printing: (exit status, the JSON object it prints)."""
    try:
        args = build_parser().parse_args(argv)
        keys = load_keys(args.keys)
        pins = [read_pin(path) for path in args.pin]
        witness_keys = load_witness_keys(args.witness_key)
        required = args.witnesses_required if args.witnesses_required is not None else min(1, len(witness_keys))
        if required < 0 or required > len({key.name for key in witness_keys}):
            raise UsageError(f"--witnesses-required {required}: give at least that many --witness-key keys")
        options = {
            "keys": keys,
            "covered_until": args.covered_until,
            "pins": pins,
            "strict": args.strict,
            "witness_keys": witness_keys,
            "witnesses_required": required,
        }
        results = []
        for path in args.file:
            if path == "-":
                results.append(_verify_stream(stdin or sys.stdin.buffer, options))
            else:
                with open(path, "rb", buffering=1 << 16) as handle:
                    results.append(_verify_stream(handle, options))
        result = _together(args.file, results)
    except UsageError as exc:
        return EXIT_USAGE, {"ok": False, "reason": "USAGE", "detail": str(exc)}
    except OSError as exc:
        return EXIT_USAGE, {"ok": False, "reason": "IO", "detail": f"{exc.strerror or exc}: {exc.filename}"}
    except VerifyFailure as exc:
        return EXIT_TAMPERED, exc.as_dict()
    return EXIT_OK, result


def _verify_stream(stream: BinaryIO, options: dict[str, object]) -> dict[str, object]:
    """An export compressed with gzip (`audit_export -o FILE.gz`) is read through gzip, streaming."""
    peek = getattr(stream, "peek", None)
    if peek is None or peek(2)[:2] != b"\x1f\x8b":
        # Typing: options are the parsed command line, built for verify_export's keywords.
        return verify_export(stream, **options)  # type: ignore[arg-type]
    try:
        with gzip.GzipFile(fileobj=stream, mode="rb") as unpacked:
            # Typing: options are the parsed command line, built for verify_export's keywords.
            return verify_export(unpacked, **options)  # type: ignore[arg-type]
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        # BadGzipFile is an OSError: without this it would read as an I/O error, not a damaged file.
        raise VerifyFailure(PARSE, f"the compressed export is truncated or damaged ({exc})") from None


def _together(paths: Sequence[str], results: list[dict[str, object]]) -> dict[str, object]:
    """Archives and a newer export checked together: each file starts where the one before ends,
    on the same right edge of the tree (so the archived entries are the ones the newer file's
    roots were computed over)."""
    if len(results) == 1:
        return results[0]
    named = list(zip(paths, results, strict=True))
    for (before_path, before), (path, after) in zip(named, named[1:], strict=False):
        if before.get("scope") != "full" or after.get("scope") != "full":
            raise VerifyFailure(PARSE, "only full exports and archives are checked together")
        if after.get("from") != before.get("size") or after.get("start_frontier") != before.get("frontier"):
            detail = (
                f"{path} starts at size {after.get('from')} on another tree than {before_path} ends at "
                f"(size {before.get('size')}): a range is missing or altered"
            )
            raise VerifyFailure(SEQ_GAP, detail, seq=int(str(before.get("size"))))
    last = results[-1]
    return {
        **last,
        "files": len(results),
        "entries": sum(int(str(r["entries"])) for r in results),
        "checkpoints": sum(int(str(r["checkpoints"])) for r in results),
        "from": results[0].get("from"),
    }


def main(argv: Sequence[str] | None = None) -> int:
    status, result = run(argv)
    sys.stdout.write(json.dumps(result, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    return status
