"""Block Kit as Slack checks it, independently of pollerdash's builders (so a builder bug fails a
test): a message's blocks (what an incoming webhook, chat.postMessage, chat.update and a
response_url accept) and a modal (what views.open accepts)."""

from __future__ import annotations

BLOCK_TYPES = {"header", "section", "context", "actions", "divider", "rich_text"}


def message_problems(message: object) -> list[str]:
    """Block Kit limits a message must respect (what Slack answers invalid_blocks for)."""
    if not isinstance(message, dict):
        return ["invalid_payload"]
    blocks = message.get("blocks")
    if not message.get("text") and not blocks:
        return ["no_text"]
    if blocks is None:
        return []
    if not isinstance(blocks, list) or len(blocks) > 50:
        return ["blocks: a list of at most 50"]
    problems: list[str] = []
    block_ids: set[str] = set()
    action_ids: set[str] = set()
    for i, block in enumerate(blocks):
        where = f"blocks[{i}]"
        if not isinstance(block, dict) or block.get("type") not in BLOCK_TYPES:
            problems.append(f"{where}: unknown block type")
            continue
        if "block_id" in block:
            if not isinstance(block["block_id"], str) or len(block["block_id"]) > 255 or block["block_id"] in block_ids:
                problems.append(f"{where}.block_id: unique, at most 255")
            block_ids.add(block.get("block_id", ""))
        kind = block["type"]
        if kind == "header":
            problems += _text(block.get("text"), f"{where}.text", 150, plain_only=True)
        elif kind == "section":
            if "text" not in block and "fields" not in block:
                problems.append(f"{where}: needs text or fields")
            if "text" in block:
                problems += _text(block["text"], f"{where}.text", 3000)
            fields = block.get("fields", [])
            if not isinstance(fields, list) or len(fields) > 10:
                problems.append(f"{where}.fields: at most 10")
            else:
                for j, f in enumerate(fields):
                    problems += _text(f, f"{where}.fields[{j}]", 2000)
        elif kind == "context":
            elements = block.get("elements")
            if not isinstance(elements, list) or not 1 <= len(elements) <= 10:
                problems.append(f"{where}.elements: 1 to 10")
            else:
                for j, e in enumerate(elements):
                    problems += _text(e, f"{where}.elements[{j}]", 2000)
        elif kind == "actions":
            elements = block.get("elements")
            if not isinstance(elements, list) or not 1 <= len(elements) <= 25:
                problems.append(f"{where}.elements: 1 to 25")
                continue
            for j, e in enumerate(elements):
                problems += _button(e, f"{where}.elements[{j}]", action_ids)
        elif kind == "rich_text":
            problems += _rich_text(block.get("elements"), where)
    return problems


def _text(obj: object, where: str, limit: int, *, plain_only: bool = False) -> list[str]:
    if not isinstance(obj, dict) or obj.get("type") not in (
        ("plain_text",) if plain_only else ("plain_text", "mrkdwn")
    ):
        return [f"{where}: a {'plain_text' if plain_only else 'text'} object"]
    text = obj.get("text")
    if not isinstance(text, str) or not 1 <= len(text) <= limit:
        return [f"{where}.text: 1 to {limit} characters"]
    return []


def _static_select(element: dict, where: str) -> list[str]:
    problems = _text(element.get("placeholder"), f"{where}.placeholder", 150, plain_only=True)
    options = element.get("options")
    if not isinstance(options, list) or not 1 <= len(options) <= 100:
        return [*problems, f"{where}.options: 1 to 100"]
    for j, option in enumerate(options):
        problems += _choice(option, f"{where}.options[{j}]")
    return problems


def _choice(option: object, where: str) -> list[str]:
    """An option object of a select or radio buttons: text (75), value (150), description (75)."""
    if not isinstance(option, dict):
        return [f"{where}: an option object"]
    problems = _text(option.get("text"), f"{where}.text", 75)
    if not isinstance(option.get("value"), str) or not 1 <= len(option["value"]) <= 150:
        problems.append(f"{where}.value: 1 to 150 characters")
    if "description" in option:
        problems += _text(option["description"], f"{where}.description", 75, plain_only=True)
    return problems


def _button(element: object, where: str, action_ids: set[str]) -> list[str]:
    if isinstance(element, dict) and element.get("type") == "static_select":
        action_id = element.get("action_id")
        if not isinstance(action_id, str) or len(action_id) > 255 or action_id in action_ids:
            return [f"{where}.action_id: unique, at most 255"]
        action_ids.add(action_id)
        return _static_select(element, where)
    if not isinstance(element, dict) or element.get("type") != "button":
        return [f"{where}: only buttons and static selects are expected"]
    problems = _text(element.get("text"), f"{where}.text", 75, plain_only=True)
    action_id = element.get("action_id")
    if not isinstance(action_id, str) or len(action_id) > 255 or action_id in action_ids:
        problems.append(f"{where}.action_id: unique, at most 255")
    action_ids.add(str(action_id))
    if "url" in element and (not isinstance(element["url"], str) or len(element["url"]) > 3000):
        problems.append(f"{where}.url: at most 3000")
    if "value" in element and (not isinstance(element["value"], str) or len(element["value"]) > 2000):
        problems.append(f"{where}.value: at most 2000")
    if "style" in element and element["style"] not in ("primary", "danger"):
        problems.append(f"{where}.style: primary or danger")
    return problems


def _rich_text(elements: object, where: str) -> list[str]:
    if not isinstance(elements, list) or not elements:
        return [f"{where}.elements: a non-empty list"]
    problems = []
    for j, e in enumerate(elements):
        if not isinstance(e, dict) or e.get("type") not in (
            "rich_text_section",
            "rich_text_quote",
            "rich_text_preformatted",
        ):
            problems.append(f"{where}.elements[{j}]: unknown rich text element")
            continue
        for k, leaf in enumerate(e.get("elements") or []):
            if not isinstance(leaf, dict) or leaf.get("type") != "text" or not isinstance(leaf.get("text"), str):
                problems.append(f"{where}.elements[{j}].elements[{k}]: only text is expected")
    return problems


def view_problems(view: object) -> list[str]:
    """A modal as views.open accepts it (Slack answers invalid_arguments otherwise)."""
    if not isinstance(view, dict) or view.get("type") != "modal":
        return ["view: a modal"]
    problems = _text(view.get("title"), "view.title", 24, plain_only=True)
    for key in ("submit", "close"):
        if key in view:
            problems += _text(view[key], f"view.{key}", 24, plain_only=True)
    metadata = view.get("private_metadata", "")
    if not isinstance(metadata, str) or len(metadata) > 3000:
        problems.append("view.private_metadata: at most 3000 characters")
    if not isinstance(view.get("callback_id", ""), str) or len(view.get("callback_id", "")) > 255:
        problems.append("view.callback_id: at most 255")
    blocks = view.get("blocks")
    if not isinstance(blocks, list) or not 1 <= len(blocks) <= 100:
        return [*problems, "view.blocks: 1 to 100"]
    inputs = [b for b in blocks if isinstance(b, dict) and b.get("type") == "input"]
    if inputs and "submit" not in view:
        problems.append("view.submit: required with input blocks")
    others = [b for b in blocks if not (isinstance(b, dict) and b.get("type") in ("input", "divider"))]
    for i, block in enumerate(others):
        accessory = block.get("accessory") if isinstance(block, dict) else None
        if accessory is not None:
            problems += _button(accessory, f"view.blocks[{i}].accessory", set())
    problems += [
        p.replace("blocks[", "view.blocks[") for p in message_problems({"blocks": others or None, "text": "-"})
    ]
    for i, block in enumerate(inputs):
        problems += _input_block(block, f"view.inputs[{i}]")
    return problems


def _input_block(block: dict, where: str) -> list[str]:
    problems = _text(block.get("label"), f"{where}.label", 2000, plain_only=True)
    element = block.get("element")
    if not isinstance(block.get("block_id"), str) or not isinstance(element, dict):
        return [*problems, f"{where}: a block_id and an element"]
    if not isinstance(element.get("action_id"), str):
        problems.append(f"{where}.element.action_id: required")
    if element.get("type") == "radio_buttons":
        options = element.get("options")
        if not isinstance(options, list) or not 1 <= len(options) <= 10:
            return [*problems, f"{where}.element.options: 1 to 10"]
        for j, option in enumerate(options):
            problems += _choice(option, f"{where}.element.options[{j}]")
        if len({o.get("value") for o in options if isinstance(o, dict)}) != len(options):
            problems.append(f"{where}.element.options: values unique")
    elif element.get("type") == "plain_text_input":
        if not isinstance(element.get("max_length", 3000), int) or not 1 <= element.get("max_length", 3000) <= 3000:
            problems.append(f"{where}.element.max_length: 1 to 3000")
    else:
        problems.append(f"{where}.element: radio_buttons or plain_text_input expected")
    return problems
