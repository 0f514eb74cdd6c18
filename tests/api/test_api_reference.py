"""/api/v1/docs/: the agent API reference in HTML, rendered from the OpenAPI document by a template.

It must show every call and schema of /api/v1/openapi.json, load nothing from elsewhere, and be
served under the same Content-Security-Policy as every other page."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_the_reference_renders_every_call_parameter_answer_and_schema_of_the_openapi_document() -> None:
    client = Client()
    document = json.loads(client.get("/api/v1/openapi.json").content)
    response = client.get("/api/v1/docs/")
    assert response.status_code == 200
    page = response.content.decode()
    for path, item in document["paths"].items():
        for method, operation in item.items():
            anchor = f'id="call-{operation["operationId"]}"'
            assert anchor in page, (method, path)
            section = page[page.index(anchor) :].split('<section class="panel api-call"', 1)[0]
            assert f"{method.upper()} {path}" in section
            for parameter in operation.get("parameters", []):
                assert f"<code>{parameter['name']}</code>" in section, (path, parameter["name"])
            for status in operation["responses"]:
                assert f"<td>{status}</td>" in section, (path, status)
    for name, schema in document["components"]["schemas"].items():
        assert f'id="schema-{name}"' in page
        for field in schema.get("properties", {}):
            assert f"<code>{field}</code>" in page, (name, field)
    # Every link to a schema lands on one.
    assert set(re.findall(r'href="#schema-(\w+)"', page)) <= set(document["components"]["schemas"])


def test_the_reference_loads_nothing_from_elsewhere_and_keeps_the_sites_csp() -> None:
    client = Client()
    reference = client.get("/api/v1/docs/")
    login = client.get("/accounts/login/")
    assert reference["Content-Security-Policy"] == login["Content-Security-Policy"]
    assert "script-src 'self'" in reference["Content-Security-Policy"]
    page = reference.content.decode()
    assert not re.search(r'(src|href)="(https?:)?//', page), "an external resource"
    assert "<style" not in page and " style=" not in page and "<script>" not in page


def test_the_dashboard_links_to_the_reference(client: Client) -> None:
    assert 'href="/api/v1/docs/"' in client.get("/accounts/login/").content.decode()


def test_every_page_has_an_icon_and_favicon_ico_finds_it(client: Client) -> None:
    page = client.get("/accounts/login/").content.decode()
    icon = re.search(r'<link rel="icon" href="([^"]+)"', page).group(1)
    assert icon.endswith("favicon.svg")
    # Pages that name no icon (the admin, JSON answers) make browsers ask for /favicon.ico.
    answer = client.get("/favicon.ico")
    assert answer.status_code == 301 and answer["Location"] == icon
