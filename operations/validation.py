"""What a validator of a loaded file (a provider profile, an escalation policy) says is wrong (pure)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One reason a profile or a policy is refused, naming the TOML key it concerns (as the admin form
    and the loader both show it)."""

    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"
