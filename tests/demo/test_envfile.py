"""var/demo.env is rewritten at every `make demo`: the command line wins, secrets and additions stay."""

from __future__ import annotations

from pathlib import Path

import pytest

from demo import envfile


def test_a_port_given_on_the_command_line_wins_everywhere_it_is_used(tmp_path: Path) -> None:
    path = tmp_path / "demo.env"
    first = envfile.write(path, given={"WEB_PORT": "8311", "PROVIDER_PORT": "8312"})
    second = envfile.write(path, given={"WEB_PORT": "8101", "PROVIDER_PORT": "8867"})
    assert (second["WEB_PORT"], second["PROVIDER_PORT"]) == ("8101", "8867")
    assert second["SITE_URL"] == "http://127.0.0.1:8101"
    assert envfile.parse(path.read_text())["SITE_URL"] == "http://127.0.0.1:8101"
    # The generated secrets are kept: a rerun does not invalidate what the first run configured.
    assert all(second[name] == first[name] for name in envfile.SECRETS)


def test_a_port_not_given_keeps_the_previous_run_and_the_receivers_follow_their_ports(tmp_path: Path) -> None:
    path = tmp_path / "demo.env"
    envfile.write(path, given={"WEB_PORT": "8101", "PAGERDUTY_PORT": "9001", "SLACK_PORT": "9002"})
    values = envfile.write(path, given={"SLACK_PORT": "9102"})
    assert values["WEB_PORT"] == "8101"
    assert values["PAGERDUTY_EVENTS_URL"] == "http://127.0.0.1:9001/v2/enqueue"
    assert values["SLACK_API_URL"] == "http://127.0.0.1:9102/api"
    assert values["NOTIFY_ALLOWED_HOSTS"] == "127.0.0.1:9001,127.0.0.1:9102,127.0.0.1:8769"


def test_an_older_file_is_brought_up_to_date_and_lines_a_person_added_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "demo.env"
    path.write_text(
        "DEBUG=1\nSITE_URL=http://127.0.0.1:8000\nWEB_PORT=8000\nFAKE_PROVIDER_TOKEN=demo-old\n"
        "NOTIFY_EMAILS=oncall@example.invalid\nMY_SETTING=mine\n"
    )
    values = envfile.write(path, given={"WEB_PORT": "8200"})
    assert values["PROVIDER_FAKE_TOKEN"] == "demo-old" and "FAKE_PROVIDER_TOKEN" not in values
    assert values["MY_SETTING"] == "mine" and "NOTIFY_EMAILS" not in values
    assert path.stat().st_mode & 0o077 == 0  # it holds secrets


@pytest.mark.parametrize("given", [{"WEB_PORT": "80a"}, {"WEB_PORT": "70000"}, {"SLACK_PORT": "8000"}])
def test_a_bad_or_clashing_port_is_refused_by_name_and_the_file_is_left_as_it_was(tmp_path: Path, given) -> None:
    path = tmp_path / "demo.env"
    envfile.write(path, given={})
    before = path.read_text()
    with pytest.raises(envfile.BadPort, match="PORT"):
        envfile.write(path, given=given)
    assert path.read_text() == before


def test_the_command_line_refuses_an_unknown_name(tmp_path: Path, capsys) -> None:
    assert envfile.main([str(tmp_path / "demo.env"), "WEB_PROT=8100"]) == 2
    assert "WEB_PROT" in capsys.readouterr().err


def test_every_value_reads_back_the_same_when_a_shell_sources_the_file(tmp_path: Path) -> None:
    """make demo sources var/demo.env in a shell: a value the shell would split (the Teams
    workflow's URL once carried an "&") would reach the processes cut, and its channel would fail."""
    import subprocess

    path = tmp_path / "demo.env"
    values = envfile.write(path, given={"TEAMS_PORT": "9203"})
    assert values["ONCALL_TEAMS_DEMO"].startswith("http://127.0.0.1:9203/workflows/")
    script = f'set -a; . "{path}"; set +a; env -0'
    sourced = subprocess.run(["bash", "-c", script], capture_output=True, check=True, env={}).stdout
    seen = dict(item.split("=", 1) for item in sourced.decode().split("\0") if "=" in item)
    assert {name: seen.get(name) for name in values} == values
