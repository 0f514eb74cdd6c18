"""Start the test OpenID Provider in a subprocess and talk to it (for pytest fixtures).

Usage: `with start_op(client_id=..., client_secret=..., redirect_uris=[...]) as op:`, then
`op.put_user("alice", groups=["oncall"])` and `op.discovery["authorization_endpoint"]`.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import selectors
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urljoin

import requests

# The repository root: the OP runs as `python -m tests.oidc_provider.serve` from there.
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class RunningOP:
    issuer: str
    port: int
    client_id: str
    client_secret: str = field(repr=False)
    control_token: str
    startup_s: float  # inside the process: bind, keys, tables, client
    wall_s: float  # from spawning the interpreter to the first answered discovery request
    process: subprocess.Popen = field(repr=False)
    discovery: dict = field(default_factory=dict)

    def put_user(
        self,
        username: str,
        *,
        groups: Sequence[str] = (),
        tamper: str = "",
        password: str | None = None,
        email: str | None = None,
        sub: str = "",
        preferred_username: str = "",
        email_verified: object = True,
    ) -> None:
        body = {
            "username": username,
            "groups": list(groups),
            "tamper": tamper,
            "sub": sub,
            "preferred_username": preferred_username,
            "email_verified": email_verified,
        }
        if password is not None:
            body["password"] = password
        if email is not None:
            body["email"] = email
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/testop/users",
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.control_token}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200

    def authorize(
        self,
        authorize_url: str,
        *,
        username: str,
        password: str | None = None,
        browser: requests.Session | None = None,
    ) -> str:
        """What a browser does at the provider, without one: open the authorization request, fill the
        provider's sign-in form, and return the redirect back to the relying party (its callback
        URL with code and state), unfollowed. Pass the same `browser` again to keep its session at
        the provider: a later request then comes straight back without a form (single sign-on)."""
        with nullcontext(browser) if browser is not None else requests.Session() as browser:
            url, answer = authorize_url, None
            for _ in range(10):
                answer = browser.get(url, allow_redirects=False, timeout=10)
                if answer.status_code != 302:
                    break
                url = urljoin(url, answer.headers["Location"])
                if not url.startswith(f"http://127.0.0.1:{self.port}/"):
                    return url  # already signed in at the provider: straight back
            assert answer is not None and answer.status_code == 200, answer
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', answer.text)
            next_url = re.search(r'name="next" value="([^"]*)"', answer.text)
            assert token and next_url, "the provider did not show its sign-in form"
            form = {
                "csrfmiddlewaretoken": token.group(1),
                "username": username,
                "password": password or f"pw-{username}",
                "next": next_url.group(1).replace("&amp;", "&"),
            }
            answer = browser.post(url, data=form, headers={"Referer": url}, allow_redirects=False, timeout=10)
            for _ in range(10):
                assert answer.status_code == 302, f"the provider answered {answer.status_code}"
                url = urljoin(url, answer.headers["Location"])
                if not url.startswith(f"http://127.0.0.1:{self.port}/"):
                    return url
                answer = browser.get(url, allow_redirects=False, timeout=10)
        raise AssertionError("the provider never redirected back")


@contextmanager
def start_op(
    *,
    client_id: str,
    client_secret: str,
    redirect_uris: Sequence[str],
    post_logout_redirect_uris: Sequence[str] = (),
    group_claim: str = "groups",
    ready_timeout_s: float = 30.0,
) -> Iterator[RunningOP]:
    spawned = time.monotonic()
    command = [
        sys.executable,
        "-m",
        "tests.oidc_provider.serve",
        # OPTION=VALUE: a random secret can start with "-", which argparse would take for an option.
        f"--client-id={client_id}",
        f"--client-secret={client_secret}",
        f"--group-claim={group_claim}",
    ]
    command += [f"--redirect-uri={uri}" for uri in redirect_uris]
    command += [f"--post-logout-redirect-uri={uri}" for uri in post_logout_redirect_uris]
    env = {**os.environ, "TESTOP_CONTROL_TOKEN": secrets.token_urlsafe(16), "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_SETTINGS_MODULE", None)  # the OP has its own settings, not the RP's
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        line = _first_line(process, deadline=spawned + ready_timeout_s)
        info = json.loads(line)
        with urllib.request.urlopen(f"{info['issuer']}/.well-known/openid-configuration", timeout=10) as response:
            discovery = json.load(response)
        yield RunningOP(
            issuer=info["issuer"],
            port=info["port"],
            client_id=client_id,
            client_secret=client_secret,
            control_token=info["control_token"],
            startup_s=info["startup_s"],
            wall_s=round(time.monotonic() - spawned, 3),
            process=process,
            discovery=discovery,
        )
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _first_line(process: subprocess.Popen, *, deadline: float) -> str:
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"test OP exited with {process.returncode} before it was ready")
        if selector.select(timeout=min(0.5, max(0.0, deadline - time.monotonic()))):
            line = process.stdout.readline()
            if line:
                return line
    raise TimeoutError("test OP did not report ready in time")
