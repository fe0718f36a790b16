"""JSON request bodies decoded and validated off the event loop (issue 18, L6).

A route that declares a pydantic body has FastAPI decode and validate it on the event loop: one 16 MB
observation batch held the loop for seconds (/healthz took 3 s; four at once made other clients' bodies time
out with 408). Here the route reads the raw body (the guard bounds its size and the time it takes to arrive),
and the decoding, the validation and the route's own conversion run in a thread of the `parse` lane.
`model_validate_json` decodes the bytes itself and calls back into Python for each text and time check, so the
event loop gets the interpreter back every few milliseconds while a big body is being parsed.

The answers are FastAPI's: a missing body, a body not sent as JSON and a body that fails validation are the
same 422s (`RequestValidationError`, `errors.describe_validation`), and the OpenAPI description documents
the body by its model as before (`request_body`, `add_body_schemas`).
"""

from __future__ import annotations

import email.message
from typing import Any, Callable, Iterable, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from attribution.api.blocking import Lane

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

REF_TEMPLATE = "#/components/schemas/{model}"


async def parsed_body(request: Request, model: type[M], lane: Lane,
                      then: Callable[[M], T] = lambda m: m) -> T:  # type: ignore[assignment,return-value]
    """`then(model instance)` of the request's JSON body, decoded, validated and converted in a thread of
    `lane`. Raises RequestValidationError (a 422) as FastAPI would, Busy when no slot frees up in time."""
    return await lane.run(_validate, model, await _json_bytes(request), then)


async def json_body(request: Request, lane: Lane, then: Callable[[Any], T]) -> T:
    """`then(the decoded JSON document)` of the request's body, decoded and converted in a thread of `lane`:
    for a body whose one validation is the route's own codec (an observation document: intake/codec.py). A body
    that is not JSON is a 422 as FastAPI's would be."""
    return await lane.run(_decode, await _json_bytes(request), then)


async def _json_bytes(request: Request) -> bytes:
    """The request's body, refused as FastAPI refuses one (a 422) when it is empty or not declared JSON."""
    body = await request.body()
    if not body:
        raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required",
                                       "input": None}])
    if not _json_content(request.headers.get("content-type")):
        raise RequestValidationError([{"type": "model_attributes_type", "loc": ("body",),
                                       "msg": "Input should be a valid dictionary or object", "input": b""}])
    return body


def _decode(body: bytes, then: Callable[[Any], T]) -> T:
    import json

    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body",),
                                       "msg": f"Invalid JSON: {str(exc)[:200]}", "input": None}]) from None
    return then(doc)


def _validate(model: type[M], body: bytes, then: Callable[[M], T]) -> T:
    try:
        value = model.model_validate_json(body)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("body", *e.get("loc", ()))} for e in exc.errors(include_url=False)]) from None
    return then(value)


def _json_content(content_type: str | None) -> bool:
    """FastAPI's strict rule: application/json or application/*+json (a body without a Content-Type is not
    read as JSON)."""
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


def request_body(model: type[BaseModel]) -> dict[str, Any]:
    """The `openapi_extra` part that documents a body the route reads itself (add_body_schemas adds the model)."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": REF_TEMPLATE.format(model=model.__name__)}}}}}


def add_body_schemas(app: FastAPI, models: Iterable[type[BaseModel]]) -> None:
    """The models of the bodies routes read themselves, added to the app's OpenAPI components (FastAPI lists
    only the models its routes declare). They are written by FastAPI itself, from routes of a scratch app that
    declare them, so the description is the one a declared body would have."""
    models = tuple(models)
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = build()
            schemas = doc.setdefault("components", {}).setdefault("schemas", {})
            for name, schema in _component_schemas(models).items():
                schemas.setdefault(name, schema)
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _component_schemas(models: tuple[type[BaseModel], ...]) -> dict[str, Any]:
    scratch = FastAPI()
    for i, model in enumerate(models):
        async def endpoint(body) -> None:
            return None
        endpoint.__annotations__["body"] = model  # the class itself (annotations are strings in this module)
        scratch.post(f"/{i}")(endpoint)
    schemas = scratch.openapi().get("components", {}).get("schemas", {})
    wanted, todo = set(), [m.__name__ for m in models]
    while todo:  # the models and what they refer to (not the scratch routes' own error models)
        name = todo.pop()
        if name in wanted or name not in schemas:
            continue
        wanted.add(name)
        todo += [ref.rsplit("/", 1)[-1] for ref in _refs(schemas[name])]
    return {name: schemas[name] for name in sorted(wanted)}


def _refs(schema: Any) -> Iterable[str]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _refs(value)
