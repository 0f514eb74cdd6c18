"""pollerdash-mcp, the stdio bridge: started with POLLERDASH_URL, POLLERDASH_TOKEN and PATH only, and
unable to import Django, it relays an MCP host's stdio to /mcp (the official client drives it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from operations.models import Operation
from tests.api.conftest import run_async
from tests.support import job_id

pytestmark = pytest.mark.django_db(transaction=True)

# Blocks every import of Django (and of the apps that need it), then runs the bridge; at exit it
# writes what the process saw: its environment and any Django module that got imported anyway.
LAUNCHER = """
import atexit, json, os, sys

class NoDjango:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("django", "operations", "escalations", "accounts", "ninja"):
            raise ImportError(f"the bridge must not import {name}")
        return None

sys.meta_path.insert(0, NoDjango())

def report():
    with open(sys.argv[1], "w") as out:
        json.dump({"env": sorted(os.environ), "django": [m for m in sys.modules if m.startswith("django")]}, out)

atexit.register(report)
from pollerdash.mcp_bridge import main
main()
"""


def bridge(tmp_path: Path, *, url: str, token: str) -> StdioServerParameters:
    """The bridge under `env -i`: the SDK's stdio client adds HOME, USER and others; `env -i` drops them."""
    launcher = tmp_path / "launch_bridge.py"
    launcher.write_text(LAUNCHER)
    return StdioServerParameters(
        command=shutil.which("env") or "/usr/bin/env",
        args=[
            "-i",
            f"POLLERDASH_URL={url}",
            f"POLLERDASH_TOKEN={token}",
            f"PATH={os.environ['PATH']}",
            sys.executable,
            str(launcher),
            str(tmp_path / "report.json"),
        ],
        cwd=str(tmp_path),
    )


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_the_bridge_needs_only_the_url_and_the_token(live_api, agent, profile, tmp_path, mode):
    params = bridge(tmp_path, url=live_api.url, token=agent.token)
    job = job_id("slow_success", polls=0)

    async def session() -> None:
        async with Client(params, mode=mode) as client:
            tools = await client.list_tools()
            assert {tool.name for tool in tools.tools} >= {"watch_job", "get_job", "wait_job"}
            watched = await client.call_tool("watch_job", {"provider": profile.slug, "provider_job_id": job})
            assert watched.content[0].text.startswith("NOT DONE op_")
            got = await client.call_tool("get_job", {"operation_id": watched.structured_content["id"]})
            assert got.structured_content["id"] == watched.structured_content["id"]

    run_async(session())
    report = json.loads((tmp_path / "report.json").read_text())
    # Python itself adds LC_CTYPE under the C locale (PEP 538 coercion), after `env -i`.
    assert set(report["env"]) - {"LC_CTYPE"} == {"PATH", "POLLERDASH_TOKEN", "POLLERDASH_URL"}
    assert report["django"] == []
    assert Operation.objects.get(provider_job_id=job).registered_by == "agent:report-bot"


def mcp_error(exc: BaseException) -> MCPError:
    """The MCPError the client raised, out of the task group's exception group if need be."""
    if isinstance(exc, MCPError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            try:
                return mcp_error(inner)
            except LookupError:
                continue
    raise LookupError(repr(exc))


def test_a_refused_token_reaches_the_host_as_a_json_rpc_error(live_api, agent, tmp_path):
    params = bridge(tmp_path, url=live_api.url, token="pdt_revoked-or-never-issued")

    async def session() -> None:
        with pytest.raises(BaseException) as raised:
            async with Client(params, mode="legacy"):
                pass
        refused = mcp_error(raised.value)
        assert refused.error.code == -32001
        assert "401" in refused.error.message and "pdt_" not in refused.error.message

    run_async(session())


def test_the_console_script_refuses_to_start_without_its_two_variables(tmp_path):
    script = Path(sys.executable).parent / "pollerdash-mcp"
    for env in ({}, {"POLLERDASH_URL": "http://127.0.0.1:9"}, {"POLLERDASH_TOKEN": "pdt_x"}):
        done = subprocess.run(
            [str(script)], env={"PATH": os.environ["PATH"], **env}, input="", capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2
        assert "POLLERDASH_URL" in done.stderr and "POLLERDASH_TOKEN" in done.stderr


def test_the_console_script_answers_tools_list(live_api, agent, tmp_path):
    script = Path(sys.executable).parent / "pollerdash-mcp"
    env = {"PATH": os.environ["PATH"], "POLLERDASH_URL": live_api.url, "POLLERDASH_TOKEN": agent.token}
    lines = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
    ]
    done = subprocess.run(
        [str(script)],
        env=env,
        cwd=tmp_path,
        input="".join(json.dumps(line) + "\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=60,
    )
    answers = {answer["id"]: answer for answer in map(json.loads, done.stdout.splitlines())}
    assert answers[1]["result"]["protocolVersion"] == "2025-11-25"
    assert "watch_job" in {tool["name"] for tool in answers[2]["result"]["tools"]}
    assert agent.token not in done.stdout + done.stderr


def test_the_bridge_ignores_proxy_variables_and_writes_only_json_rpc_to_stdout(live_api, agent, tmp_path):
    """Review info: the bridge reads its two variables and nothing else (httpx's trust_env off): a proxy
    named in the environment, dead here, is never used; stdout carries JSON-RPC lines only."""
    script = Path(sys.executable).parent / "pollerdash-mcp"
    dead = "http://127.0.0.1:9"
    env = {
        "PATH": os.environ["PATH"],
        "POLLERDASH_URL": live_api.url,
        "POLLERDASH_TOKEN": agent.token,
        **dict.fromkeys(["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"], dead),
        "SSL_CERT_FILE": str(tmp_path / "no-such-bundle.pem"),
    }
    lines = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
        "not json at all",
    ]
    done = subprocess.run(
        [str(script)],
        env=env,
        cwd=tmp_path,
        input="".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=60,
    )
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert all(answer.get("jsonrpc") == "2.0" for answer in answers), done.stdout
    by_id = {answer.get("id"): answer for answer in answers}
    assert "watch_job" in {tool["name"] for tool in by_id[2]["result"]["tools"]}, done.stdout + done.stderr
