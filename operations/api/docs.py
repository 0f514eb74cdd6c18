"""The OpenAPI document of the agent API (/api/v1/openapi.json): exact responses per call.

django-ninja documents parameters and security from the handlers; this adds the request and
response schemas (operations.api.schemas), every problem an operation can answer with its
application/problem+json content type, and links from a registration to the calls on it.
"""

from __future__ import annotations

from typing import Any

from ninja import NinjaAPI
from pydantic.json_schema import models_json_schema

from operations.api.problems import PROBLEM_CONTENT_TYPE, PROBLEMS
from operations.api.schemas import INPUT_MODELS, OUTPUT_MODELS

JSON_TYPE = "application/json"
COMMON_ERRORS = ("unauthenticated", "internal", "unavailable", "not_found", "unknown_field", "invalid_field")
BODY_ERRORS = ("invalid_json", "missing_field", "body_too_large", "unsupported_media_type")

# From a registration to the calls on the operation it created.
OPERATION_LINKS = {
    name: {"operationId": operation_id, "parameters": {"operation_id": "$response.body#/id"}}
    for name, operation_id in (
        ("GetOperation", "getOperation"),
        ("WaitOperation", "waitOperation"),
        ("AcknowledgeOperation", "acknowledgeOperation"),
        ("CancelOperation", "cancelOperation"),
    )
}

_responses: dict[str, dict] = {}


class DocumentedAPI(NinjaAPI):
    """NinjaAPI whose OpenAPI document shows the exact responses each call can give."""

    def get_openapi_schema(self, *, path_prefix: str | None = None, path_params: dict | None = None) -> Any:
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        _, defs = models_json_schema(
            [(model, "validation") for model in INPUT_MODELS] + [(model, "serialization") for model in OUTPUT_MODELS],
            ref_template="#/components/schemas/{model}",
        )
        schema.setdefault("components", {}).setdefault("schemas", {}).update(defs.get("$defs", {}))
        for item in schema.get("paths", {}).values():
            for operation in item.values():
                responses = _responses.get(operation.get("operationId", ""))
                if responses is not None:
                    operation["responses"] = responses
        return schema


def problems(*codes: str) -> dict[str, dict]:
    by_status: dict[str, list[str]] = {}
    for code in dict.fromkeys((*COMMON_ERRORS, *codes)):
        by_status.setdefault(str(PROBLEMS[code][0]), []).append(code)
    return {
        status: {
            "description": "Problem: " + ", ".join(f"`{code}`" for code in grouped),
            "content": {PROBLEM_CONTENT_TYPE: {"schema": {"$ref": "#/components/schemas/ProblemOut"}}},
        }
        for status, grouped in by_status.items()
    }


def ok(description: str, model: str, headers: tuple[str, ...] = (), **extra: Any) -> dict:
    doc: dict[str, Any] = {
        "description": description,
        "content": {JSON_TYPE: {"schema": {"$ref": f"#/components/schemas/{model}"}}},
        **extra,
    }
    if headers:
        doc["headers"] = {name: {"schema": {"type": "string"}} for name in headers}
    return doc


def document(operation_id: str, answers: dict[str, dict], *codes: str) -> None:
    _responses[operation_id] = {**answers, **problems(*codes)}


def request_body(model: str, *, required: bool) -> dict:
    return {
        "requestBody": {
            "required": required,
            "content": {JSON_TYPE: {"schema": {"$ref": f"#/components/schemas/{model}"}}},
        }
    }
