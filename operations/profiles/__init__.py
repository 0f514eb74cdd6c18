"""Provider profiles (docs/DESIGN.md section 2): validation (`spec`, `checks`), TOML files (`files`) and the
one write service (`store`)."""

from __future__ import annotations

from operations.profiles.checks import FIELD_TO_KEY, KEY_TO_FIELD, STATE_KEYS
from operations.profiles.files import ProfilesInvalid, load_profiles_file, parse_profiles
from operations.profiles.spec import Problem, ProfileSpec, raw_from_model_values, validate_profile
from operations.profiles.store import ApplyResult, Outcome, profile_delete, profile_save, profiles_apply

__all__ = [
    "FIELD_TO_KEY",
    "KEY_TO_FIELD",
    "STATE_KEYS",
    "ApplyResult",
    "Outcome",
    "Problem",
    "ProfileSpec",
    "ProfilesInvalid",
    "load_profiles_file",
    "parse_profiles",
    "profile_delete",
    "profile_save",
    "profiles_apply",
    "raw_from_model_values",
    "validate_profile",
]
