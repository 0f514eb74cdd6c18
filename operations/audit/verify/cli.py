"""The pollerdash-audit-verify command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import BinaryIO

from .base import EXIT_OK, EXIT_TAMPERED, EXIT_USAGE, UsageError, VerifyFailure, parse_cli_time
from .files import load_keys, read_pin, verify_export


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="pollerdash-audit-verify",
        description="Verify a pollerdash audit export offline. Exit 0 valid, 1 tampered, 2 usage or I/O error.",
    )
    parser.add_argument("file", help="the export (JSONL); - reads standard input")
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
    return parser


def run(argv: Sequence[str] | None = None, *, stdin: BinaryIO | None = None) -> tuple[int, dict[str, object]]:
    """The command without printing: (exit status, the JSON object it prints)."""
    try:
        args = build_parser().parse_args(argv)
        keys = load_keys(args.keys)
        pins = [read_pin(path) for path in args.pin]
        if args.file == "-":
            stream = stdin or sys.stdin.buffer
            result = verify_export(stream, keys=keys, covered_until=args.covered_until, pins=pins, strict=args.strict)
        else:
            with open(args.file, "rb", buffering=1 << 16) as handle:
                result = verify_export(
                    handle, keys=keys, covered_until=args.covered_until, pins=pins, strict=args.strict
                )
    except UsageError as exc:
        return EXIT_USAGE, {"ok": False, "reason": "USAGE", "detail": str(exc)}
    except OSError as exc:
        return EXIT_USAGE, {"ok": False, "reason": "IO", "detail": f"{exc.strerror or exc}: {exc.filename}"}
    except VerifyFailure as exc:
        return EXIT_TAMPERED, exc.as_dict()
    return EXIT_OK, result


def main(argv: Sequence[str] | None = None) -> int:
    status, result = run(argv)
    sys.stdout.write(json.dumps(result, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    return status
