"""Provider profile validation (docs/DESIGN.md section 2) and the idempotent apply service."""

from __future__ import annotations

import pytest

from operations.models import ProviderAccount, ProviderProfile
from operations.profiles import (
    KEY_TO_FIELD,
    ApplyResult,
    Outcome,
    Problem,
    ProfilesInvalid,
    ProfileSpec,
    parse_profiles,
    profiles_apply,
    raw_from_model_values,
    validate_profile,
)

STATUS_URL = "https://api.acme.test/v1/jobs/{job_id}"
OPERATOR = {"kind": "operator", "id": "test"}


def valid_raw(**overrides: object) -> dict[str, object]:
    """The docs/DESIGN.md section 2 example, in file key names."""
    raw: dict[str, object] = {
        "slug": "acme-export",
        "name": "ACME report export",
        "status_url": STATUS_URL,
        "job_id_pattern": "^[A-Za-z0-9_.:-]{1,128}$",
        "state_field": "state",
        "pending": ["queued", "running", "processing"],
        "success": ["succeeded"],
        "failure": ["failed"],
        "cancelled": ["cancelled"],
        "expired": ["expired"],
        "required_result_fields": ["result.output_url"],
        "expiry_field": "expires_at",
        "progress_field": "progress_percent",
        "counts_fields": {"total": "summary.processed", "succeeded": "summary.succeeded", "failed": "summary.failed"},
        "poll_hint_seconds_field": "poll_after_seconds",
        "poll_hint_time_field": "next_check_at",
        "request_id_header": "X-Request-Id",
        "credential_env": "PROVIDER_ACME_TOKEN",
        "auth_scheme": "Bearer",
        "base_delay_s": 5,
        "max_delay_s": 120,
        "jitter_floor": 0.5,
        "default_deadline_s": 2400,
        "default_max_status_requests": 12,
        "default_max_transport_failures": 3,
        "not_found_grace_s": 60,
        "rate_limit_per_s": 10,
        "cancel_method": "POST",
        "cancel_url": "https://api.acme.test/v1/jobs/{job_id}/cancel",
        "console_url": "https://console.acme.test/jobs/{job_id}",
        "approval_mode": "session",
        "extension_options": [{"minutes": 15, "checks": 4}, {"minutes": 60, "checks": 8}],
        "max_extensions": 3,
    }
    raw.update(overrides)
    return raw


def minimal_raw(**overrides: object) -> dict[str, object]:
    raw: dict[str, object] = {
        "slug": "mini",
        "name": "Minimal",
        "status_url": STATUS_URL,
        "job_id_pattern": "^[a-z0-9]{1,40}$",
        "state_field": "status",
        "pending": ["running"],
        "success": ["done"],
    }
    raw.update(overrides)
    return raw


def problems_of(raw: dict[str, object]) -> list[Problem]:
    result = validate_profile(raw=raw)
    assert isinstance(result, list), f"expected problems, got a valid spec for {raw}"
    return result


def assert_problem(raw: dict[str, object], *, key: str, fragment: str) -> None:
    problems = problems_of(raw)
    assert any(p.key == key and fragment in p.message for p in problems), [str(p) for p in problems]


# --- valid profiles -------------------------------------------------------------------------------


def test_the_design_example_is_valid_and_maps_state_keys_to_model_fields():
    spec = validate_profile(raw=valid_raw())
    assert isinstance(spec, ProfileSpec)
    assert spec.pending_states == ["queued", "running", "processing"]
    assert spec.success_states == ["succeeded"]
    assert spec.expired_states == ["expired"]
    assert spec.account == "acme-export"
    assert spec.base_delay_s == 5.0 and isinstance(spec.base_delay_s, float)
    assert spec.extension_options == [{"minutes": 15, "checks": 4}, {"minutes": 60, "checks": 8}]


def test_absent_keys_take_the_model_defaults_and_account_defaults_to_the_slug():
    spec = validate_profile(raw=minimal_raw())
    assert isinstance(spec, ProfileSpec)
    defaults = ProviderProfile()
    for name in (
        "base_delay_s",
        "max_delay_s",
        "backoff_multiplier",
        "jitter_floor",
        "default_deadline_s",
        "default_max_status_requests",
    ):
        assert getattr(spec, name) == getattr(defaults, name)
    assert spec.failure_states == [] and spec.counts_fields == {} and spec.extension_options == []
    assert spec.auth_scheme == "Bearer" and spec.approval_mode == "session" and type(spec.approval_mode) is str
    assert spec.account == "mini"
    assert set(spec.model_values()) == set(KEY_TO_FIELD.values())


def test_an_explicit_account_is_kept():
    spec = validate_profile(raw=minimal_raw(account="acme-prod"))
    assert isinstance(spec, ProfileSpec) and spec.account == "acme-prod"


@pytest.mark.parametrize(
    "pattern",
    ["^[a-z]+$", r"\A[a-z]+\Z", "^(?:job|run)_[0-9]+$", "^[|]+$", r"^a\|b$", "^[^]|]+$"],
)
def test_anchored_patterns_are_accepted(pattern):
    assert isinstance(validate_profile(raw=minimal_raw(job_id_pattern=pattern)), ProfileSpec)


def test_an_empty_auth_scheme_is_allowed_because_it_means_a_bare_credential():
    spec = validate_profile(raw=minimal_raw(auth_scheme=""))
    assert isinstance(spec, ProfileSpec) and spec.auth_scheme == ""


def test_max_extensions_may_be_zero_and_not_found_grace_may_be_zero():
    spec = validate_profile(raw=minimal_raw(max_extensions=0, not_found_grace_s=0))
    assert isinstance(spec, ProfileSpec) and spec.max_extensions == 0


# --- every rule, rejected with a message naming the key ----------------------------------------------


def test_unknown_keys_are_listed_each_with_a_suggestion():
    problems = problems_of(valid_raw(stat_field="x", colour="red"))
    by_key = {p.key: p.message for p in problems}
    assert "unknown key (did you mean state_field?)" == by_key["stat_field"]
    assert by_key["colour"].startswith("unknown key")


@pytest.mark.parametrize("key", ["slug", "name", "status_url", "job_id_pattern", "state_field", "pending", "success"])
def test_required_keys(key):
    raw = valid_raw()
    del raw[key]
    assert_problem(raw, key=key, fragment="is required")


@pytest.mark.parametrize("key", ["pending", "success"])
def test_pending_and_success_need_at_least_one_state(key):
    assert_problem(valid_raw(**{key: []}), key=key, fragment="at least one state")


@pytest.mark.parametrize(
    ("overrides", "key", "fragment"),
    [
        ({"slug": "acme export"}, "slug", "is not a slug"),
        ({"slug": "a" * 65}, "slug", "at most 64"),
        ({"slug": 7}, "slug", "must be a string"),
        ({"name": "  "}, "name", "must not be empty"),
        ({"account": "acme prod"}, "account", "is not an account name"),
        ({"state_field": ""}, "state_field", "must not be empty"),
        ({"state_field": "job state"}, "state_field", "dotted field path"),
        ({"expiry_field": "a..b"}, "expiry_field", "dotted field path"),
        ({"progress_field": ".x"}, "progress_field", "dotted field path"),
        ({"poll_hint_seconds_field": "x."}, "poll_hint_seconds_field", "dotted field path"),
        ({"poll_hint_time_field": 3}, "poll_hint_time_field", "must be a string"),
        ({"required_result_fields": "result.url"}, "required_result_fields", "must be a list"),
        ({"required_result_fields": ["result url"]}, "required_result_fields", "item 1"),
        ({"required_result_fields": ["a", "a"]}, "required_result_fields", "listed twice"),
        ({"pending": "queued"}, "pending", "must be a list"),
        ({"pending": ["queued", ""]}, "pending", "item 2 must be a non-empty string"),
        ({"failure": ["failed", 3]}, "failure", "item 2 must be a non-empty string"),
        ({"cancelled": ["x", "x"]}, "cancelled", "'x' is listed twice"),
        ({"counts_fields": ["total"]}, "counts_fields", "must be a table"),
        ({"counts_fields": {"skipped": "a.b"}}, "counts_fields", "unknown count 'skipped'"),
        ({"counts_fields": {"total": "a b"}}, "counts_fields", "total:"),
        ({"counts_fields": {"total": 3}}, "counts_fields", "total: must be a string"),
        ({"request_id_header": "X Request"}, "request_id_header", "HTTP header name"),
        ({"auth_scheme": "Bear er"}, "auth_scheme", "auth scheme token"),
        ({"base_delay_s": 0}, "base_delay_s", "must be > 0"),
        ({"base_delay_s": -1.5}, "base_delay_s", "must be > 0"),
        ({"base_delay_s": True}, "base_delay_s", "must be a number"),
        ({"base_delay_s": "5"}, "base_delay_s", "must be a number"),
        ({"max_delay_s": float("inf")}, "max_delay_s", "finite"),
        ({"max_delay_s": float("nan")}, "max_delay_s", "finite"),
        ({"max_delay_s": 0}, "max_delay_s", "must be > 0"),
        ({"backoff_multiplier": 0.5}, "backoff_multiplier", "must be >= 1 and <= 4, not 0.5"),
        ({"backoff_multiplier": 10}, "backoff_multiplier", "must be >= 1 and <= 4, not 10"),
        ({"backoff_multiplier": "1.5"}, "backoff_multiplier", "must be a number"),
        ({"base_delay_s": 200, "max_delay_s": 120}, "max_delay_s", "must be >= base_delay_s (200)"),
        ({"base_delay_s": 500}, "max_delay_s", "must be >= base_delay_s (500), not 120"),
        ({"not_found_grace_s": -1}, "not_found_grace_s", "must be >= 0"),
        ({"rate_limit_per_s": 0}, "rate_limit_per_s", "must be >= 0.001 and <= 10000"),
        # Values whose arithmetic would overflow in pacing or backoff are typos, not policies.
        ({"rate_limit_per_s": 1e300}, "rate_limit_per_s", "must be >= 0.001 and <= 10000"),
        ({"rate_limit_per_s": 1e-300}, "rate_limit_per_s", "must be >= 0.001 and <= 10000"),
        ({"max_delay_s": 1e300}, "max_delay_s", "must be > 0 and <= 604800"),
        ({"not_found_grace_s": 1e20}, "not_found_grace_s", "must be >= 0 and <= 604800"),
        ({"name": "evil\u0000name"}, "name", "must not contain control characters"),
        ({"pending": ["que\u0000ued"]}, "pending", "item 1 must not contain control characters"),
        ({"jitter_floor": 0}, "jitter_floor", "must be > 0 and <= 1"),
        ({"jitter_floor": 1.01}, "jitter_floor", "must be > 0 and <= 1"),
        ({"default_deadline_s": 0}, "default_deadline_s", "must be an integer from"),
        ({"default_deadline_s": 60.0}, "default_deadline_s", "must be a whole number"),
        ({"default_max_status_requests": 0}, "default_max_status_requests", "must be an integer from 1"),
        ({"default_max_status_requests": True}, "default_max_status_requests", "whole number"),
        ({"default_max_transport_failures": -1}, "default_max_transport_failures", "must be an integer from 1"),
        ({"max_extensions": -1}, "max_extensions", "must be an integer from 0"),
        ({"max_extensions": 1.5}, "max_extensions", "whole number"),
        ({"approval_mode": "always"}, "approval_mode", "must be one of session, per_call"),
        ({"cancel_method": "post"}, "cancel_method", "must be one of DELETE, POST, PUT"),
        ({"cancel_method": "GET"}, "cancel_method", "must be one of DELETE, POST, PUT"),
    ],
)
def test_type_and_range_rules(overrides, key, fragment):
    assert_problem(valid_raw(**overrides), key=key, fragment=fragment)


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("acme token", "credential variable name format"),
        ("acme_token", "credential variable name format"),
        ("1TOKEN", "credential variable name format"),
        ("A" * 101, "at most 100"),
    ],
)
def test_credential_env_must_look_like_an_environment_variable(name, fragment):
    assert_problem(valid_raw(credential_env=name), key="credential_env", fragment=fragment)


@pytest.mark.parametrize("key", ["status_url", "cancel_url", "console_url"])
@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("https://api.acme.test/v1/jobs/", "{job_id} exactly once"),
        ("https://api.acme.test/{job_id}/{job_id}", "{job_id} exactly once"),
        ("https://api.acme.test/{jobid}/{job_id}", "no placeholder other than {job_id}"),
        ("ftp://api.acme.test/{job_id}", "http:// or https:// URL with a host"),
        ("javascript:alert(1)//{job_id}", "http:// or https:// URL with a host"),
        ("https:///v1/{job_id}", "http:// or https:// URL with a host"),
        ("https://{job_id}.acme.test/v1", "not in the host"),
        ("https://user:pw@api.acme.test/{job_id}", "must not carry credentials"),
        ("https://api.acme.test:99999/{job_id}", "not a valid URL"),
        ("https://api.acme.test/v1 /{job_id}", "spaces or control characters"),
    ],
)
def test_url_templates(key, url, fragment):
    assert_problem(valid_raw(**{key: url}), key=key, fragment=fragment)


@pytest.mark.parametrize(
    ("pattern", "fragment"),
    [
        ("[a-z", "does not compile"),
        ("[a-z]+", "must be anchored"),
        ("^[a-z]+", "must be anchored"),
        ("[a-z]+$", "must be anchored"),
        (r"^[a-z]+\$", "must be anchored"),
        ("^a|b$", "must be anchored"),
        ("^(a)|(b)$", "must be anchored"),
    ],
)
def test_job_id_pattern_must_compile_and_be_anchored(pattern, fragment):
    assert_problem(valid_raw(job_id_pattern=pattern), key="job_id_pattern", fragment=fragment)


def test_patterns_re2_cannot_match_in_linear_time_are_refused_and_slow_shapes_stay_fast():
    assert_problem(valid_raw(job_id_pattern=r"^(a)\1$"), key="job_id_pattern", fragment="RE2 syntax")
    assert_problem(valid_raw(job_id_pattern="^(?=a)a+$"), key="job_id_pattern", fragment="RE2 syntax")
    import time

    from operations.agents import job_ids

    # A backtracking matcher would need about 2**200 steps for this id (the test would never end);
    # RE2 answers in microseconds, so the bound below is about complexity, not speed.
    started = time.monotonic()
    assert not job_ids.matches(pattern="^(a+)+$", job_id="a" * 200 + "!")
    assert time.monotonic() - started < 5
    assert job_ids.matches(pattern=r"\A[a-z]+\Z", job_id="abc") and not job_ids.matches(pattern="^a$", job_id="a\n")


def test_unanchored_message_explains_the_partial_match_risk():
    problems = problems_of(valid_raw(job_id_pattern="[a-z]+"))
    assert "a/../b" in next(p.message for p in problems if p.key == "job_id_pattern")


def test_state_sets_must_not_overlap_and_each_overlap_names_the_state_and_both_sets():
    problems = problems_of(
        valid_raw(pending=["queued", "done"], success=["done"], failure=["queued", "x"], expired=["x"])
    )
    messages = {str(p) for p in problems}
    assert "success: state 'done' is in both pending and success" in messages
    assert "failure: state 'queued' is in both pending and failure" in messages
    assert "expired: state 'x' is in both failure and expired" in messages


def test_overlap_is_reported_even_when_the_set_also_has_a_duplicate():
    messages = {str(p) for p in problems_of(valid_raw(pending=["a", "a", "b"], success=["b"]))}
    assert "pending: 'a' is listed twice" in messages
    assert "success: state 'b' is in both pending and success" in messages


@pytest.mark.parametrize(("present", "missing"), [("cancel_url", "cancel_method"), ("cancel_method", "cancel_url")])
def test_cancel_url_and_cancel_method_go_together(present, missing):
    raw = valid_raw()
    del raw[missing]
    assert_problem(raw, key=missing, fragment=f"is required with {present}")


def test_a_profile_without_any_cancel_action_is_valid():
    raw = valid_raw()
    del raw["cancel_url"], raw["cancel_method"]
    spec = validate_profile(raw=raw)
    assert isinstance(spec, ProfileSpec) and spec.cancel_url == "" and spec.cancel_method == ""


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"minutes": 15, "checks": 4}, "must be a list"),
        ([15], "entry 1 must be a table"),
        ([{"minutes": 15}], "entry 1: checks is required"),
        ([{"checks": 4}], "entry 1: minutes is required"),
        ([{"minutes": 15, "checks": 4, "cost": 1}], "entry 1: unknown key 'cost'"),
        ([{"minutes": 0, "checks": 4}], "entry 1: minutes must be an integer from 1 to 1440"),
        ([{"minutes": 1441, "checks": 4}], "entry 1: minutes must be an integer from 1 to 1440"),
        ([{"minutes": 15, "checks": 0}], "entry 1: checks must be an integer from 1 to 1000"),
        ([{"minutes": 15, "checks": 1001}], "entry 1: checks must be an integer from 1 to 1000"),
        ([{"minutes": 15.0, "checks": 4}], "entry 1: minutes must be a whole number"),
        ([{"minutes": 15, "checks": True}], "entry 1: checks must be a whole number"),
        ([{"minutes": 15, "checks": 4}, {"minutes": 15, "checks": 4}], "entry 2 repeats minutes = 15, checks = 4"),
    ],
)
def test_extension_options(options, fragment):
    assert_problem(valid_raw(extension_options=options), key="extension_options", fragment=fragment)


@pytest.mark.parametrize(
    ("warning", "fragment"),
    [
        (0, "must be from 1 s to 7 days (604800 s) before the business deadline, not 0"),
        (-60, "must be from 1 s to 7 days (604800 s) before the business deadline, not -60"),
        (7 * 24 * 3600 + 1, "must be from 1 s to 7 days (604800 s) before the business deadline, not 604801"),
        (60.5, "must be a whole number of seconds, not a number"),
        ("600", "must be a whole number of seconds, not a string"),
        (True, "must be a whole number of seconds, not true/false"),
    ],
)
def test_a_business_deadline_warning_outside_1_s_to_7_days_is_a_listed_problem(warning, fragment):
    assert_problem(valid_raw(business_deadline_warning_s=warning), key="business_deadline_warning_s", fragment=fragment)


def test_a_business_deadline_warning_is_optional_and_kept_when_valid():
    assert validate_profile(raw=minimal_raw()).business_deadline_warning_s is None
    for seconds in (1, 900, 7 * 24 * 3600):
        spec = validate_profile(raw=valid_raw(business_deadline_warning_s=seconds))
        assert isinstance(spec, ProfileSpec) and spec.business_deadline_warning_s == seconds


def test_every_problem_is_collected_not_just_the_first():
    raw = valid_raw(slug="bad slug", status_url="https://x.test/", jitter_floor=2, approval_mode="never", extra=1)
    del raw["name"]
    keys = {p.key for p in problems_of(raw)}
    assert {"slug", "status_url", "jitter_floor", "approval_mode", "extra", "name"} <= keys


def test_raw_from_model_values_treats_blank_as_absent_except_where_the_default_is_not_blank():
    values = {"slug": "s", "expiry_field": "", "auth_scheme": "", "counts_fields": None, "pending_states": []}
    assert raw_from_model_values(values=values) == {"slug": "s", "auth_scheme": "", "pending": []}


# --- files ------------------------------------------------------------------------------------------


def test_parse_profiles_labels_each_problem_with_the_provider_index_and_slug():
    document = {"provider": [valid_raw(), valid_raw(slug="b", jitter_floor=0), {"name": "no slug"}]}
    with pytest.raises(ProfilesInvalid) as caught:
        parse_profiles(document=document)
    problems = caught.value.problems
    assert "provider #2 (b): jitter_floor: must be > 0 and <= 1, not 0" in problems
    assert "provider #3: slug: is required" in problems
    assert not any(p.startswith("provider #1") for p in problems)


def test_parse_profiles_rejects_duplicate_slugs_and_stray_top_level_keys():
    with pytest.raises(ProfilesInvalid) as caught:
        parse_profiles(document={"title": "x", "provider": [valid_raw(), valid_raw()]})
    assert "provider #2 (acme-export): slug: duplicate of provider #1" in caught.value.problems
    assert any("unknown top-level key 'title'" in p for p in caught.value.problems)


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        ({}, "no [[provider]] tables"),
        ({"provider": []}, "no [[provider]] tables"),
        ({"provider": {"slug": "x"}}, "must be an array of tables"),
        ({"provider": ["x"]}, "provider #1: must be a table"),
    ],
)
def test_parse_profiles_rejects_malformed_documents(document, fragment):
    with pytest.raises(ProfilesInvalid) as caught:
        parse_profiles(document=document)
    assert any(fragment in p for p in caught.value.problems), caught.value.problems


# --- applying ---------------------------------------------------------------------------------------


def spec_of(raw: dict[str, object]) -> ProfileSpec:
    spec = validate_profile(raw=raw)
    assert isinstance(spec, ProfileSpec)
    return spec


@pytest.mark.django_db
def test_apply_creates_profiles_and_their_accounts():
    results = profiles_apply(specs=[spec_of(valid_raw()), spec_of(minimal_raw(account="shared"))], actor=OPERATOR)
    assert results == [
        ApplyResult(slug="acme-export", outcome=Outcome.CREATED),
        ApplyResult(slug="mini", outcome=Outcome.CREATED),
    ]
    profile = ProviderProfile.objects.get(slug="acme-export")
    assert profile.pending_states == ["queued", "running", "processing"]
    assert profile.cancel_method == "POST" and profile.has_cancel
    assert set(ProviderAccount.objects.values_list("name", flat=True)) == {"acme-export", "shared"}


@pytest.mark.django_db
def test_apply_again_is_unchanged_and_leaves_updated_at_alone():
    profiles_apply(specs=[spec_of(valid_raw())], actor=OPERATOR)
    before = ProviderProfile.objects.get(slug="acme-export").updated_at
    assert profiles_apply(specs=[spec_of(valid_raw())], actor=OPERATOR) == [
        ApplyResult(slug="acme-export", outcome=Outcome.UNCHANGED)
    ]
    assert ProviderProfile.objects.get(slug="acme-export").updated_at == before


@pytest.mark.django_db
def test_apply_updates_only_changed_fields_and_reports_them():
    profiles_apply(specs=[spec_of(valid_raw())], actor=OPERATOR)
    results = profiles_apply(specs=[spec_of(valid_raw(max_delay_s=300, failure=["failed", "errored"]))], actor=OPERATOR)
    assert results == [
        ApplyResult(slug="acme-export", outcome=Outcome.UPDATED, changed_fields=("failure_states", "max_delay_s"))
    ]
    profile = ProviderProfile.objects.get(slug="acme-export")
    assert profile.max_delay_s == 300 and profile.failure_states == ["failed", "errored"]
    assert ProviderProfile.objects.count() == 1


@pytest.mark.django_db
def test_apply_creates_a_newly_named_account_on_update():
    profiles_apply(specs=[spec_of(valid_raw())], actor=OPERATOR)
    profiles_apply(specs=[spec_of(valid_raw(account="acme-eu"))], actor=OPERATOR)
    assert ProviderAccount.objects.filter(name="acme-eu").exists()


@pytest.mark.django_db
def test_apply_refuses_the_same_slug_twice():
    with pytest.raises(ValueError, match="once"):
        profiles_apply(specs=[spec_of(valid_raw()), spec_of(valid_raw())], actor=OPERATOR)
    assert not ProviderProfile.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("multiplier", [0.5, 0.999, 4.001, 1e6])
def test_the_database_refuses_a_backoff_multiplier_out_of_range(make_profile, multiplier):
    # A row written around the profile checks (a migration, SQL by hand) must not make backoff
    # shrink each wait or reach its cap at once.
    from django.db import IntegrityError, transaction

    profile = make_profile()
    with pytest.raises(IntegrityError), transaction.atomic():
        ProviderProfile.objects.filter(pk=profile.pk).update(backoff_multiplier=multiplier)


@pytest.mark.django_db
@pytest.mark.parametrize("multiplier", [1, 4])
def test_the_database_accepts_the_backoff_multipliers_bounds(make_profile, multiplier):
    profile = make_profile()
    ProviderProfile.objects.filter(pk=profile.pk).update(backoff_multiplier=multiplier)
    assert ProviderProfile.objects.get(pk=profile.pk).backoff_multiplier == multiplier
