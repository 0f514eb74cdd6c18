"""/api/v1/docs/: the agent API reference as one HTML page, rendered from the OpenAPI document.

The page is the same document as /api/v1/openapi.json (operations.api.docs), laid out for a reader:
each call with its parameters, request body and answers, then every schema with its fields. It is
a Django template served from the package (no Swagger or Redoc bundle, nothing from a CDN), so the
site's Content-Security-Policy holds here as on every other page. Like the OpenAPI document it
needs no sign-in: it describes the API, it holds no data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_GET

METHODS = ("get", "post", "put", "patch", "delete")
_CODE = re.compile(r"`([^`]+)`")


def prose(text: Any) -> SafeString:
    """The document's sentences, escaped, with `code` spans as <code>."""
    return mark_safe(_CODE.sub(r"<code>\1</code>", escape(str(text or ""))))  # escaped first


@dataclass(frozen=True)
class Type:
    """A schema as a reader sees it: words, and the schemas it links to."""

    words: str
    refs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Field:
    name: str
    type: Type
    required: bool
    description: SafeString
    where: str = ""  # a parameter's place: path, query, header


@dataclass(frozen=True)
class Answer:
    status: str
    description: SafeString
    type: Type | None
    headers: tuple[str, ...]


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    operation_id: str
    summary: SafeString
    description: SafeString
    parameters: list[Field]
    body: Type | None
    body_required: bool
    answers: list[Answer]

    @property
    def anchor(self) -> str:
        return f"call-{self.operation_id}"


@dataclass(frozen=True)
class Schema:
    name: str
    description: SafeString
    fields: list[Field] = field(default_factory=list)
    type: Type | None = None  # a schema that is not an object of fields


def type_of(schema: Any) -> Type:
    """A JSON Schema in words: "string (date-time) or null", "array of PollOut", "one of: a, b"."""
    if not isinstance(schema, dict):
        return Type("any")
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return Type(name, (name,))
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            parts = [type_of(part) for part in schema[key]]
            joiner = " and " if key == "allOf" else " or "
            words = joiner.join(part.words for part in parts)
            fmt = f" ({schema['format']})" if "format" in schema else ""
            return Type(words + fmt, tuple(ref for part in parts for ref in part.refs))
    if "const" in schema:
        return Type(f'always "{schema["const"]}"')
    if "enum" in schema:
        return Type("one of: " + ", ".join(str(value) for value in schema["enum"]))
    kind = schema.get("type", "any")
    if kind == "array":
        item = type_of(schema.get("items", {}))
        return Type(f"array of {item.words}", item.refs)
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        value = type_of(schema["additionalProperties"])
        return Type(f"object of {value.words}", value.refs)
    words = str(kind)
    if "format" in schema:
        words += f" ({schema['format']})"
    limits = [
        f"{label} {schema[key]}"
        for key, label in (("minimum", "≥"), ("maximum", "≤"), ("minLength", "length ≥"), ("maxLength", "length ≤"))
        if key in schema
    ]
    return Type(words + (f", {', '.join(limits)}" if limits else ""))


def _json_body(content: Any) -> Any:
    if not isinstance(content, dict):
        return None
    for media_type, entry in content.items():
        if "json" in media_type and isinstance(entry, dict):
            return entry.get("schema")
    return None


def calls_of(document: dict[str, Any]) -> list[Call]:
    calls = []
    for path, item in document.get("paths", {}).items():
        for method in METHODS:
            operation = item.get(method)
            if not isinstance(operation, dict):
                continue
            parameters = [
                Field(
                    name=str(p.get("name", "")),
                    type=type_of(p.get("schema")),
                    required=bool(p.get("required")),
                    description=prose(p.get("description") or p.get("schema", {}).get("description", "")),
                    where=str(p.get("in", "")),
                )
                for p in operation.get("parameters", [])
            ]
            body = operation.get("requestBody") or {}
            body_schema = _json_body(body.get("content"))
            answers = [
                Answer(
                    status=str(status),
                    description=prose(answer.get("description", "")),
                    type=type_of(schema) if (schema := _json_body(answer.get("content"))) else None,
                    headers=tuple(answer.get("headers", {})),
                )
                for status, answer in sorted(operation.get("responses", {}).items())
            ]
            calls.append(
                Call(
                    method=method.upper(),
                    path=path,
                    operation_id=str(operation.get("operationId", f"{method}-{path}")),
                    summary=prose(operation.get("summary", "")),
                    description=prose(operation.get("description", "")),
                    parameters=parameters,
                    body=type_of(body_schema) if body_schema else None,
                    body_required=bool(body.get("required")),
                    answers=answers,
                )
            )
    return calls


def schemas_of(document: dict[str, Any]) -> list[Schema]:
    found = []
    for name, schema in sorted(document.get("components", {}).get("schemas", {}).items()):
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            found.append(Schema(name, prose(schema.get("description", "")), type=type_of(schema)))
            continue
        required = set(schema.get("required", []))
        fields = [
            Field(
                name=prop_name,
                type=type_of(prop),
                required=prop_name in required,
                description=prose(prop.get("description", "") if isinstance(prop, dict) else ""),
            )
            for prop_name, prop in properties.items()
        ]
        found.append(Schema(name, prose(schema.get("description", "")), fields))
    return found


@require_GET
def api_reference(request: HttpRequest) -> HttpResponse:
    from operations.api.routes import api

    document = api.get_openapi_schema()
    context = {
        "info": document.get("info", {}),
        "intro": prose(document.get("info", {}).get("description", "")),
        "calls": calls_of(document),
        "schemas": schemas_of(document),
        "auth": document.get("components", {}).get("securitySchemes", {}),
    }
    return render(request, "api/reference.html", context)
