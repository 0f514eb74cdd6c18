"""`make demo` as a newcomer runs it: twice, the second time on other ports, stopped with Ctrl-C.

The checkout is copied to a temporary directory (its own var/, so its own SQLite database and
settings) and shares this worktree's installed .venv. Each run is the real Makefile, the real
Procfile under demo/launch.py, real processes; Ctrl-C is a SIGINT to make's process group, as a
terminal sends it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from urllib.parse import urlencode

import pytest
from django.contrib.auth.hashers import check_password

from demo.receivers import SLACK_PEOPLE
from tests.support import readme_shell_blocks

pytestmark = [pytest.mark.integration, pytest.mark.sqlite]

ROOT = Path(__file__).resolve().parents[2]
PORT_NAMES = ("WEB_PORT", "PROVIDER_PORT", "CALLBACK_PORT", "PAGERDUTY_PORT", "SLACK_PORT", "TEAMS_PORT")


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as answer:  # local test URLs
        return answer.read().decode()


def wait_for(predicate, *, timeout: float, what: str, log: Path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}\n--- make demo said:\n{log.read_text()}")


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    copy = tmp_path / "pollerdash"
    for name in filter(None, files):
        source = ROOT / name.decode()
        if source.is_file():
            (copy / name.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name.decode())
    (copy / ".venv").symlink_to(ROOT / ".venv")
    return copy


class Demo:
    def __init__(self, checkout: Path, ports: dict[str, int], log: Path) -> None:
        self.ports, self.log = ports, log
        env = {k: v for k, v in os.environ.items() if k not in (*PORT_NAMES, "DATABASE_URL", "SECRET_KEY")}
        env.pop("POLLERDASH_VAR_DIR", None)
        env.pop("LOG_LEVEL", None)
        self.env = env
        with log.open("wb") as out:
            # -o: the shared venv counts as installed (the copy's pyproject.toml is newer).
            self.make = subprocess.Popen(
                ["make", "-o", ".venv/.installed", "demo", *(f"{k}={v}" for k, v in ports.items())],
                cwd=checkout,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def text(self) -> str:
        return self.log.read_text()

    def url(self, name: str, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.ports[name]}{path}"

    def wait_until_up(self) -> str:
        return wait_for(
            lambda: self.make.poll() is None and "pollerdash is up" in self.text and self.text,
            timeout=180,
            what="the demo to print its URL",
            log=self.log,
        )

    def ctrl_c(self) -> float:
        started = time.monotonic()
        os.killpg(self.make.pid, signal.SIGINT)
        try:
            self.make.wait(timeout=20)
        finally:
            if self.make.poll() is None:
                os.killpg(self.make.pid, signal.SIGKILL)
        # Every process the demo started is gone too (honcho starts each in a session of its own).
        pids = [int(p) for p in re.findall(r"started \(pid=(\d+)\)", self.text)]
        wait_for(lambda: not any(_alive(pid) for pid in pids), timeout=10, what="every process to end", log=self.log)
        return time.monotonic() - started


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and ") Z " not in Path(f"/proc/{pid}/stat").read_text()


def logins(text: str) -> dict[str, str]:
    return dict(re.findall(r"^\S+ demo +\| +(responder2?|viewer|admin) +(\S+) ", text, flags=re.M))


def test_make_demo_reruns_on_new_ports_keeps_its_data_shows_the_hand_offs_and_stops_cleanly(
    checkout: Path, tmp_path: Path
) -> None:
    first = Demo(checkout, dict(zip(PORT_NAMES, free_ports(len(PORT_NAMES)), strict=True)), tmp_path / "first.log")
    try:
        text = first.wait_until_up()
        assert f"open {first.url('WEB_PORT')}" in text
        assert "Traceback" not in text
        assert "login" in get(first.url("WEB_PORT", "/accounts/login/")).lower()
        # The README's API example, typed in a second terminal while the demo runs.
        (example,) = readme_shell_blocks((checkout / "README.md").read_text())["Try the API"]
        ran = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", example],
            cwd=checkout,
            env=first.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 0 and '"done":true' in ran.stdout.replace(" ", ""), ran.stdout + ran.stderr
        # A card opens and pages: the demo's PagerDuty shows the trigger, Teams the card, and Slack an Acknowledge.
        wait_for(lambda: "triggered" in get(first.url("PAGERDUTY_PORT")), timeout=120, what="a page", log=first.log)
        wait_for(
            lambda: "Open in pollerdash" in get(first.url("TEAMS_PORT")),
            timeout=60,
            what="a Teams card",
            log=first.log,
        )
        slack = wait_for(
            lambda: (page := get(first.url("SLACK_PORT"))) and "Acknowledge</button>" in page and page,
            timeout=60,
            what="a Slack message with Acknowledge",
            log=first.log,
        )
        form = dict(re.findall(r'name=(token|message|card) value="([^"]*)"', slack)[:3])
        responder = next(user for user, name in SLACK_PEOPLE.items() if name == "responder")
        click = urllib.request.Request(
            first.url("SLACK_PORT", "/demo/click"), data=urlencode({**form, "user": responder}).encode()
        )
        get_answer = urllib.request.urlopen(click, timeout=15)  # follows the 303 to the page
        assert get_answer.status == 200
        # Slack's click reached pollerdash, which acknowledged as the responder and told PagerDuty.
        wait_for(
            lambda: "acknowledged" in get(first.url("PAGERDUTY_PORT")),
            timeout=60,
            what="PagerDuty acknowledged",
            log=first.log,
        )
        wait_for(
            lambda: "Acknowledged by responder" in get(first.url("SLACK_PORT")),
            timeout=60,
            what="the Slack message updated",
            log=first.log,
        )
    finally:
        took = first.ctrl_c()
    assert took < 10, f"Ctrl-C took {took:.1f} s"
    assert "SIGKILL" not in first.text and "make: ***" not in first.text, first.text
    assert "pollerdash demo stopped" in first.text

    database = checkout / "var" / "pollerdash.sqlite3"
    with sqlite3.connect(database) as db:
        seeded = db.execute("SELECT count(*) FROM operations_operation").fetchone()[0]
        first_due = sorted(
            row[0] for row in db.execute("SELECT min(due_at) FROM operations_statuscheck GROUP BY operation_id")
        )
    # Registered one at a time, as agents would: no burst of first polls due at the same instant
    # (fourteen at once queued behind the demo's two workers and /system/ warned of dispatch lag).
    assert len(first_due) >= 10 and max(Counter(first_due).values()) == 1

    second = Demo(checkout, dict(zip(PORT_NAMES, free_ports(len(PORT_NAMES)), strict=True)), tmp_path / "second.log")
    try:
        text = second.wait_until_up()
        assert f"open {second.url('WEB_PORT')}" in text and "kept" in text
        assert get(second.url("WEB_PORT", "/accounts/login/"))
        with pytest.raises(urllib.error.URLError):
            get(first.url("WEB_PORT", "/accounts/login/"))
        env = (checkout / "var" / "demo.env").read_text()
        assert f"SITE_URL=http://127.0.0.1:{second.ports['WEB_PORT']}\n" in env
        with sqlite3.connect(database) as db:
            assert db.execute("SELECT count(*) FROM operations_operation").fetchone()[0] == seeded
            urls = {row[0] for row in db.execute("SELECT status_url FROM operations_providerprofile")}
            hashes = dict(db.execute("SELECT username, password FROM auth_user"))
        assert all(f":{second.ports['PROVIDER_PORT']}/" in url for url in urls), urls
        printed = logins(text)
        assert set(printed) == {"responder", "responder2", "viewer", "admin"}
        assert all(check_password(password, hashes[name]) for name, password in printed.items())
    finally:
        second.ctrl_c()
    assert "SIGKILL" not in second.text and "make: ***" not in second.text, second.text
