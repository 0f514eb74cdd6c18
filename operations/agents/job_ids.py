"""Job id patterns, matched in linear time.

A profile's `job_id_pattern` is matched against every job id an agent registers. Python's `re`
backtracks, so a pattern like ^(a+)+$ takes exponential time on a 30-character id and stalls the
process that checks it; RE2 (package google-re2) matches in time linear in the id, whatever the
pattern. RE2 has no backreferences or lookaround, which a job id pattern never needs.
"""

from __future__ import annotations

import re
from functools import lru_cache

import re2

# Python's \Z (end of text) is RE2's \z; an escaped backslash before Z is not an anchor.
_PYTHON_END = re.compile(r"(?<!\\)((?:\\\\)*)\\Z")


class PatternError(ValueError):
    pass


@lru_cache(maxsize=256)
def compile_pattern(pattern: str) -> re2._Regexp:
    options = re2.Options()
    # Refusals are reported to the caller; RE2 would also print them to stderr.
    options.log_errors = False
    try:
        return re2.compile(_PYTHON_END.sub(r"\1\\z", pattern), options)
    except re2.error as exc:
        detail = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise PatternError(detail) from None


def matches(*, pattern: str, job_id: str) -> bool:
    """Whether the whole job id matches; an unusable pattern matches nothing."""
    try:
        return compile_pattern(pattern).fullmatch(job_id) is not None
    except PatternError:
        return False
