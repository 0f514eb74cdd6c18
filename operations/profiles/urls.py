"""A profile's URL templates (status, cancel, console) and the job id pattern that fills their
`{job_id}`: each check returns its problems (empty when the value is acceptable); no I/O."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from operations.agents import job_ids
from operations.profiles.values import text
from operations.providers.origins import placeholder_problem

_URL_FORBIDDEN = re.compile(r"[\x00-\x20\x7f]")


def url(value: object) -> list[str]:
    problems = text(value, max_length=500)
    if problems:
        return problems
    assert isinstance(value, str)
    if _URL_FORBIDDEN.search(value):
        return ["must not contain spaces or control characters"]
    if value.count("{job_id}") != 1:
        return ["must contain {job_id} exactly once"]
    if "{" in value.replace("{job_id}", "") or "}" in value.replace("{job_id}", ""):
        return ["must have no placeholder other than {job_id}"]
    try:
        parts = urlsplit(value)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError for a malformed port
    except ValueError:
        return ["is not a valid URL"]
    if parts.scheme not in {"http", "https"} or not host:
        return ["must be an http:// or https:// URL with a host"]
    if "{job_id}" in parts.netloc:
        # The job id comes from the agent: it may pick a path segment, never the host.
        return ["{job_id} must be in the path, not in the host"]
    if parts.username is not None or parts.password is not None:
        return ["must not carry credentials; name them with credential_env"]
    problem = placeholder_problem(value)
    return [problem] if problem else []


def _top_level_alternation(pattern: str) -> bool:
    """True when `|` splits the whole pattern, so `^a|b$` anchors only one branch at each end."""
    depth = 0
    in_class = False
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            index += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            # A "]" first in a class (after an optional "^") is a literal member, not the end.
            if pattern[index + 1 : index + 2] == "^":
                index += 1
            if pattern[index + 1 : index + 2] == "]":
                index += 1
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            return True
        index += 1
    return False


def _ends_unescaped(pattern: str, token: str) -> bool:
    if not pattern.endswith(token):
        return False
    head = pattern[: len(pattern) - len(token)]
    # An odd run of backslashes before the token escapes it ("\\$" is a literal dollar sign).
    return (len(head) - len(head.rstrip("\\"))) % 2 == 0


def job_id_pattern(value: object) -> list[str]:
    problems = text(value, max_length=500)
    if problems:
        return problems
    assert isinstance(value, str)
    try:
        re.compile(value)
    except re.error as exc:
        return [f"does not compile: {exc}"]
    try:
        job_ids.compile_pattern(value)
    except job_ids.PatternError as exc:
        return [
            f"does not compile in RE2 syntax, which job ids are matched with (linear time; no lookaround "
            f"or backreferences): {exc}"
        ]
    anchored = (
        value.startswith(("^", r"\A"))
        and (_ends_unescaped(value, "$") or _ends_unescaped(value, r"\Z"))
        and not _top_level_alternation(value)
    )
    if not anchored:
        return [
            "must be anchored as ^...$ around the whole pattern (wrap alternatives as ^(?:a|b)$): "
            "a partial match would let a job id like a/../b through"
        ]
    return []
