"""Escalation policies: what a valid policy is, and its validation.

A policy is an ordered list of levels; each level names targets and a wait before the next level;
the last level may repeat up to ten times. Grafana OnCall's step vocabulary (notify, wait, repeat)
is the model, without schedules or rotations.

Everything here is pure: no database, no clock, no I/O. The run of a policy on one card (its state
and the one step function) is in operations.notify.steps.

`validate_policy` is the single definition of a valid policy: the admin form and the
`loadpolicies` command both call it (through operations.notify.store), and it names every problem
at once, like a profile's validation.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

from operations.notify.kinds import TARGETS, Kind, Ref, targets_in_order
from operations.validation import Problem

MAX_LEVELS = 10
MAX_TARGETS_PER_LEVEL = 20
REPEAT_RANGE = (0, 10)
# A wait is whole seconds: at least 1 (a wait <= 0 is refused), at most a day (a longer silence
# between levels is a policy nobody meant).
WAIT_RANGE_S = (1, 24 * 3600)
# An acknowledgement timeout shorter than a minute would page again before anyone could decide;
# longer than a day is an acknowledgement that never times out.
ACK_TIMEOUT_RANGE_S = (60, 24 * 3600)
NAME_MAX = 100

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,99}")
# The variable's name, never its value. Like a profile's credential variable it has a prefix of its
# own (ONCALL_), so a policy can never send one of pollerdash's settings or a provider's credential
# to a chat or a pager, and a profile can never send a routing key to a provider.
ENV_PREFIX = "ONCALL_"
_ENV_NAME = re.compile(r"ONCALL_[A-Z0-9_]{1,93}")
_SLACK_CHANNEL = re.compile(r"[CGD][A-Z0-9]{6,20}")
# Deliberately simple: one @, no spaces or control characters, a dot in the domain. Django's
# EmailValidator runs in the admin form as well; this keeps the pure check dependency-free.
_EMAIL = re.compile(r"[^@\s\x00-\x1f\x7f]{1,64}@[^@\s\x00-\x1f\x7f]+\.[^@\s\x00-\x1f\x7f]+")


@dataclass(frozen=True)
class Target:
    kind: Kind
    ref: str

    @property
    def key(self) -> str:
        """Stable identity inside a policy; carries env names, never secret values."""
        ref = self.ref.lower() if self.kind is Kind.EMAIL else self.ref
        return f"{self.kind}:{ref}"


@dataclass(frozen=True)
class Level:
    wait_s: int
    targets: tuple[Target, ...]


@dataclass(frozen=True)
class Policy:
    """A validated policy. Stored as a snapshot on each card's run when the card opens, so an
    edit made while a card is open never rewrites what that card is doing (OnCall's rule)."""

    name: str
    levels: tuple[Level, ...]
    repeat_last_level: int
    # A card acknowledged but not decided within this goes back to the policy (None: never).
    ack_timeout_s: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "repeat_last_level": self.repeat_last_level,
            "ack_timeout_s": self.ack_timeout_s,
            "levels": [
                {"wait_s": level.wait_s, "targets": [{"kind": str(t.kind), "ref": t.ref} for t in level.targets]}
                for level in self.levels
            ],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Policy:
        return cls(
            name=data["name"],
            repeat_last_level=int(data["repeat_last_level"]),
            # Snapshots taken before 2.5 have no timeout.
            ack_timeout_s=None if data.get("ack_timeout_s") is None else int(data["ack_timeout_s"]),
            levels=tuple(
                Level(
                    wait_s=int(level["wait_s"]),
                    targets=tuple(Target(kind=Kind(t["kind"]), ref=t["ref"]) for t in level["targets"]),
                )
                for level in data["levels"]
            ),
        )

    @property
    def total_sends(self) -> int:
        """Level steps in one round: every level once, then the last level's repetitions."""
        return len(self.levels) + self.repeat_last_level


# --- validation -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Directory:
    """What exists, read by the caller before validating (the check itself stays pure)."""

    usernames: Set[str]
    groups: Set[str]
    slack_app_configured: bool


def validate_policy(raw: object, *, directory: Directory) -> Policy | list[Problem]:
    """The policy, or every problem with it. The whole policy is refused if any part is wrong."""
    if not isinstance(raw, Mapping):
        return [Problem("policy", "must be a table")]
    problems: list[Problem] = []
    unknown = sorted(set(raw) - {"name", "levels", "repeat_last_level", "ack_timeout_s", "description"})
    problems += [
        Problem(key, "is not a policy key (name, description, levels, repeat_last_level, ack_timeout_s)")
        for key in unknown
    ]
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        problems.append(Problem("name", "must be 1-100 of a-z 0-9 _ - starting with a letter or digit"))
    repeat = raw.get("repeat_last_level", 0)
    if isinstance(repeat, bool) or not isinstance(repeat, int) or not REPEAT_RANGE[0] <= repeat <= REPEAT_RANGE[1]:
        problems.append(
            Problem("repeat_last_level", f"must be a whole number from {REPEAT_RANGE[0]} to {REPEAT_RANGE[1]}")
        )
    ack_timeout = raw.get("ack_timeout_s")
    low, high = ACK_TIMEOUT_RANGE_S
    if ack_timeout is not None and (
        isinstance(ack_timeout, bool) or not isinstance(ack_timeout, int) or not low <= ack_timeout <= high
    ):
        problems.append(Problem("ack_timeout_s", f"must be whole seconds from {low} to {high} (or left out)"))
    levels_raw = raw.get("levels")
    levels: list[Level] = []
    if not isinstance(levels_raw, Sequence) or isinstance(levels_raw, str | bytes) or not levels_raw:
        problems.append(Problem("levels", "needs at least one level"))
    elif len(levels_raw) > MAX_LEVELS:
        problems.append(Problem("levels", f"has {len(levels_raw)} levels; at most {MAX_LEVELS}"))
    else:
        for index, level_raw in enumerate(levels_raw):
            level, level_problems = _level(level_raw, where=f"levels[{index}]", directory=directory)
            problems += level_problems
            if level is not None:
                levels.append(level)
    if problems:
        return problems
    return Policy(
        # No problems, so every value above passed its check and has its type.
        name=name,  # type: ignore[arg-type]
        levels=tuple(levels),
        repeat_last_level=repeat,
        ack_timeout_s=ack_timeout,
    )


def _level(raw: object, *, where: str, directory: Directory) -> tuple[Level | None, list[Problem]]:
    if not isinstance(raw, Mapping):
        return None, [Problem(where, "must be a table with wait_s and targets")]
    problems = [
        Problem(f"{where}.{key}", "is not a level key (wait_s, targets)")
        for key in sorted(set(raw) - {"wait_s", "targets"})
    ]
    wait = raw.get("wait_s")
    if isinstance(wait, bool) or not isinstance(wait, int) or not WAIT_RANGE_S[0] <= wait <= WAIT_RANGE_S[1]:
        problems.append(
            Problem(f"{where}.wait_s", f"must be whole seconds from {WAIT_RANGE_S[0]} to {WAIT_RANGE_S[1]}")
        )
    targets_raw = raw.get("targets")
    targets: list[Target] = []
    if not isinstance(targets_raw, Sequence) or isinstance(targets_raw, str | bytes) or not targets_raw:
        problems.append(Problem(f"{where}.targets", "needs at least one target"))
    elif len(targets_raw) > MAX_TARGETS_PER_LEVEL:
        problems.append(Problem(f"{where}.targets", f"has {len(targets_raw)} targets; at most {MAX_TARGETS_PER_LEVEL}"))
    else:
        seen: set[str] = set()
        for index, target_raw in enumerate(targets_raw):
            target, problem = _target(target_raw, where=f"{where}.targets[{index}]", directory=directory)
            if problem is not None:
                problems.append(problem)
            elif target is not None:
                if target.key in seen:
                    problems.append(Problem(f"{where}.targets[{index}]", f"repeats {target.kind} {target.ref!r}"))
                seen.add(target.key)
                targets.append(target)
    if problems:
        return None, problems
    # No problems, so every value above passed its check and has its type.
    return Level(wait_s=wait, targets=tuple(targets)), []  # type: ignore[arg-type]


def _target(raw: object, *, where: str, directory: Directory) -> tuple[Target | None, Problem | None]:
    """A target is a one-key table: {user = "alice"}, {pagerduty = "ONCALL_PD_PAYMENTS"}, ..."""
    kinds = ", ".join(str(k) for k in targets_in_order())
    if not isinstance(raw, Mapping) or len(raw) != 1:
        return None, Problem(where, f"must be one of {{{kinds}}} = value")
    ((kind_raw, ref),) = raw.items()
    kind = next((k for k in TARGETS if k.value == kind_raw), None)
    if kind is None:
        return None, Problem(where, f"{kind_raw!r} is not a target kind ({kinds})")
    if not isinstance(ref, str) or not ref or ref != ref.strip():
        return None, Problem(f"{where}.{kind}", "must be a non-empty string without surrounding spaces")
    problem = _REF_CHECKS[TARGETS[kind]](ref, directory)
    if problem:
        return None, Problem(f"{where}.{kind}", problem)
    return Target(kind=kind, ref=ref), None


def _user_problem(ref: str, directory: Directory) -> str:
    return "" if ref in directory.usernames else f"no user named {ref!r}"


def _group_problem(ref: str, directory: Directory) -> str:
    return "" if ref in directory.groups else f"no group named {ref!r}"


def _email_problem(ref: str, directory: Directory) -> str:
    return "" if len(ref) <= 254 and _EMAIL.fullmatch(ref) else "is not an email address"


def _env_problem(ref: str, directory: Directory) -> str:
    if not _ENV_NAME.fullmatch(ref):
        # The commonest mistake is pasting the secret itself: say so without echoing it.
        return f"must name an environment variable ({ENV_PREFIX} then A-Z, 0-9, _), not hold the secret itself"
    if ref.endswith("_FILE"):
        return "name the variable itself: its _FILE form is read too"
    return ""


def _channel_problem(ref: str, directory: Directory) -> str:
    if not _SLACK_CHANNEL.fullmatch(ref):
        return "must be a Slack channel id such as C0123456789"
    if not directory.slack_app_configured:
        return "needs the Slack app (SLACK_BOT_TOKEN); use slack_webhook without it"
    return ""


# How each kind of value is checked (operations.notify.kinds.TARGETS says which kind holds which).
_REF_CHECKS: Mapping[Ref, Callable[[str, Directory], str]] = {
    Ref.USER: _user_problem,
    Ref.GROUP: _group_problem,
    Ref.EMAIL: _email_problem,
    Ref.ENV: _env_problem,
    Ref.CHANNEL: _channel_problem,
}
