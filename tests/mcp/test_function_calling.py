"""Function calling without MCP: the exported declarations fed to the OpenAI SDK's own types,
and tool calls as providers return them dispatched through POST /tools/call."""

import json
import uuid

import httpx2 as httpx
import jsonschema
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionFunctionTool, ChatCompletionToolParam
from pydantic import TypeAdapter

from conftest import HTTP_TOOL_NAMES as TOOL_NAMES


@pytest.fixture
def http(writ_url):
    with httpx.Client(base_url=writ_url, timeout=60) as client:
        yield client


def test_the_openai_declarations_are_valid_openai_tools(http):
    tools = http.get("/tools").json()
    TypeAdapter(list[ChatCompletionToolParam]).validate_python(tools)
    parsed = [ChatCompletionFunctionTool.model_validate(t) for t in tools]
    assert [t.function.name for t in parsed] == TOOL_NAMES
    for t in parsed:
        jsonschema.Draft202012Validator.check_schema(t.function.parameters)
        assert t.function.parameters["type"] == "object"


def test_anthropic_and_gemini_declare_the_same_tools(http):
    anthropic = http.get("/tools", params={"format": "anthropic"}).json()
    assert [t["name"] for t in anthropic] == TOOL_NAMES
    gemini = http.get("/tools", params={"format": "gemini"}).json()
    decls = gemini["functionDeclarations"]
    assert [d["name"] for d in decls] == TOOL_NAMES
    assert "$ref" not in json.dumps(gemini) and "additionalProperties" not in json.dumps(gemini)
    bad = http.get("/tools", params={"format": "cohere"})
    assert bad.status_code == 400
    assert bad.json()["error"]["field"] == "format"


def _recorded_completion(calls: list[tuple[str, str]]) -> ChatCompletion:
    """A chat completion as OpenAI returns it when the model calls tools."""
    return ChatCompletion.model_validate(
        {
            "id": "chatcmpl-recorded",
            "object": "chat.completion",
            "created": 1763900000,
            "model": "gpt-4.1-mini",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
                            for i, (n, a) in enumerate(calls)
                        ],
                    },
                }
            ],
        }
    )


def test_recorded_openai_tool_calls_are_dispatched(http, repo_dir):
    path = f"fc-{uuid.uuid4().hex[:8]}.md"
    completion = _recorded_completion(
        [
            ("write_file", json.dumps({"path": path, "content": "# title\n"})),
            ("read_file", json.dumps({"path": path})),
            ("list_files", "{}"),
        ]
    )
    answers = []
    for call in completion.choices[0].message.tool_calls:
        r = http.post("/tools/call", json={"name": call.function.name, "arguments": call.function.arguments})
        assert r.status_code == 200, r.text
        answers.append(r.json())
    assert answers[0]["result"]["operation"] == "created"
    assert answers[1]["content"] == "# title\n"
    assert path in answers[2]["content"]
    assert (repo_dir / path).read_text() == "# title\n"


def test_a_truncated_streamed_call_is_refused_and_changes_nothing(http, repo_dir):
    path = f"cut-{uuid.uuid4().hex[:8]}.py"
    full = json.dumps({"path": path, "content": "def f():\n    return 1\n"})
    completion = _recorded_completion([("write_file", full[: len(full) // 2])])
    call = completion.choices[0].message.tool_calls[0]
    r = http.post("/tools/call", json={"name": call.function.name, "arguments": call.function.arguments})
    assert r.status_code == 422
    body = r.json()
    assert body["error"]["field"] == "arguments"
    assert "EOF while parsing" in body["error"]["message"]
    assert f"byte offset {len(full) // 2} of {len(full) // 2}" in body["error"]["message"]
    assert "truncated" in body["content"]
    assert not (repo_dir / path).exists()


def test_anthropic_tool_use_blocks_and_refused_paths(http):
    block = {"type": "tool_use", "id": "toolu_1", "name": "list_files", "input": {"dir": ""}}
    assert http.post("/tools/call", json=block).status_code == 200
    r = http.post("/tools/call", json={"name": "read_file", "arguments": {"path": "../x"}})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_path"
    assert r.json()["content"].startswith("error (invalid_path, field `path`)")
    r = http.post("/tools/call", json={"name": "rm", "arguments": {}})
    assert r.status_code == 404
    assert "the tools are: " + ", ".join(TOOL_NAMES) in r.json()["error"]["message"]
