"""The official MCP Python SDK against writ, over streamable HTTP (`/mcp`) and stdio (`writ mcp`)."""

import uuid

import jsonschema
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from conftest import HTTP_TOOL_NAMES, TOOL_NAMES

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _text(result) -> str:
    return "".join(block.text for block in result.content if getattr(block, "type", "") == "text")


@pytest.fixture(params=["http-auto", "http-legacy", "stdio"])
def client_factory(request, writ_url, writ_bin, stdio_env, tmp_path):
    """A way to open a client on one transport; `auto` negotiates the newest protocol the
    server offers, `legacy` forces the initialize handshake."""
    kind = request.param

    def make():
        if kind == "stdio":
            params = StdioServerParameters(
                command=writ_bin, args=["mcp", "--repo-dir", str(tmp_path / "ws")], env=stdio_env
            )
            return Client(params)
        return Client(f"{writ_url}/mcp", mode=kind.removeprefix("http-"))

    make.kind = kind
    return make


async def test_the_tools_are_listed_with_schemas_that_accept_the_http_request(client_factory, readme_request):
    async with client_factory() as client:
        listed = await client.list_tools()
        names = [t.name for t in listed.tools]
        assert names == (TOOL_NAMES if client_factory.kind == "stdio" else HTTP_TOOL_NAMES)
        by_name = {t.name: t for t in listed.tools}
        schema = by_name["write_codebase"].input_schema
        jsonschema.Draft202012Validator.check_schema(schema)
        jsonschema.validate(readme_request, schema, cls=jsonschema.Draft202012Validator)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**readme_request, "content": "x"}, schema, cls=jsonschema.Draft202012Validator)
        assert "write_codebase" in by_name["write_file"].description
        assert by_name["read_file"].annotations.read_only_hint is True


async def test_three_files_change_in_one_all_or_nothing_patch(client_factory):
    stem = f"patch-{client_factory.kind}-{uuid.uuid4().hex[:8]}"
    paths = [f"{stem}/m{i}.py" for i in range(3)]
    async with client_factory() as client:
        for i, path in enumerate(paths):
            made = await client.call_tool(
                "write_file", {"path": path, "content": f"def f{i}():\n    return {i}\n", "create_dirs": True}
            )
            assert not made.is_error, _text(made)

        def patch(last_old: str) -> str:
            hunks = []
            for i, path in enumerate(paths):
                old = last_old if i == 2 else f"    return {i}"
                hunks.append(f"*** Update File: {path}\n@@ def f{i}():\n-{old}\n+    return {i * 10 + 1}\n")
            return "*** Begin Patch\n" + "".join(hunks) + "*** End Patch\n"

        refused = await client.call_tool("edit_files", {"patch": patch("    return 99")})
        assert refused.is_error
        assert f"'{paths[2]}' hunk 1" in _text(refused)
        for i, path in enumerate(paths):
            read = await client.call_tool("read_file", {"path": path})
            assert _text(read) == f"def f{i}():\n    return {i}\n", "a refused patch changed nothing"

        applied = await client.call_tool("edit_files", {"patch": patch("    return 2")})
        assert not applied.is_error, _text(applied)
        assert [f["operation"] for f in applied.structured_content["files"]] == ["updated"] * 3
        for i, path in enumerate(paths):
            read = await client.call_tool("read_file", {"path": path})
            assert _text(read) == f"def f{i}():\n    return {i * 10 + 1}\n"


async def test_each_tool_can_be_called(client_factory):
    path = f"py-{client_factory.kind}-{uuid.uuid4().hex[:8]}.txt"
    async with client_factory() as client:
        written = await client.call_tool("write_file", {"path": path, "content": "hello\n"})
        assert not written.is_error, _text(written)
        assert written.structured_content["operation"] == "created"

        read = await client.call_tool("read_file", {"path": path})
        assert not read.is_error
        assert _text(read) == "hello\n"
        assert read.structured_content["sha256"] == written.structured_content["sha256"]

        appended = await client.call_tool(
            "write_file",
            {"path": path, "content": "again\n", "mode": "append",
             "expected_sha256": read.structured_content["sha256"]},
        )
        assert not appended.is_error, _text(appended)
        assert appended.structured_content["operation"] == "updated"

        listing = await client.call_tool("list_files", {})
        assert path in [e["name"] for e in listing.structured_content["entries"]]

        ops = await client.call_tool("list_operations", {"filename": path})
        assert not ops.is_error, _text(ops)
        operations = ops.structured_content["operations"]
        assert [o["status"] for o in operations] == ["succeeded", "succeeded"]

        one = await client.call_tool("get_operation", {"id": operations[-1]["id"]})
        assert one.structured_content["content"] == "hello\n"
        assert "Content written:\nhello\n" in _text(one)


async def test_write_codebase_reports_progress_while_it_runs(client_factory):
    updates = []

    async def on_progress(progress, total, message):
        updates.append((progress, message))

    # Five files into a new folder, as an agent asks for a small module.
    folder = f"calc_{uuid.uuid4().hex[:8]}"
    names = [f"{folder}/part_{i}.py" for i in range(5)]
    async with client_factory() as client:
        result = await client.call_tool(
            "write_codebase",
            {"command": "write_codebase",
             "files": [{"filename": n, "code_description": f"a function add_{i}(a, b)"}
                       for i, n in enumerate(names)]},
            progress_callback=on_progress,
        )
    assert not result.is_error, _text(result)
    assert result.structured_content["status"] == "success"
    assert _text(result).startswith("status: success (5 of 5 files succeeded)")
    messages = [m for _, m in updates]
    assert messages[0] == f"queued: {', '.join(names)}"
    for name in names:
        assert any(m.startswith(f"{name}: created (") for m in messages), messages
    assert messages[-1] == "done: success"
    numbers = [p for p, _ in updates]
    assert numbers == sorted(set(numbers)), "progress only grows"


async def test_a_path_outside_the_workspace_is_a_tool_error(client_factory, repo_dir):
    async with client_factory() as client:
        result = await client.call_tool("write_file", {"path": "../escape.txt", "content": "no"})
        assert result.is_error
        assert _text(result).startswith("error (invalid_path, field `path`)")
        assert result.structured_content["error"]["field"] == "path"

        truncated_type = await client.call_tool("read_file", {"path": 7})
        assert truncated_type.is_error
        assert "invalid type" in _text(truncated_type)

        # A tool that does not exist is the protocol's error, not a tool result.
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("no_such_tool", {})
        assert unknown.value.code == -32602
        assert "the tools are: write_codebase" in unknown.value.message
    assert not (repo_dir.parent / "escape.txt").exists()


async def test_a_write_session_streams_pieces_and_ends_with_a_done_line(client_factory):
    path = f"session-{client_factory.kind}-{uuid.uuid4().hex[:8]}.py"
    async with client_factory() as client:
        begun = await client.call_tool(
            "begin_write_session",
            {"target_file": path, "operation": "create", "intent": "a module written in pieces"},
        )
        assert not begun.is_error, _text(begun)
        session = begun.structured_content
        assert session["state"] == "awaiting_content"

        # Pieces as a model streams them: a line split anywhere, then the DONE line split too.
        pieces = ["def greet(name):\n    return f'héllo ", "{name}'\n", "\nprint(greet('w'))\nDO", "NE\n"]
        for piece in pieces:
            answer = await client.call_tool(
                "append_to_write_session", {"session_id": session["id"], "chunk": piece}
            )
            assert not answer.is_error, _text(answer)
        done = answer.structured_content
        assert done["state"] == "done", done
        assert done["receipt"]["operation"] == "created"
        assert f"written: created '{path}'" in _text(answer)

        again = await client.call_tool("finish_write_session", {"session_id": session["id"]})
        assert not again.is_error, _text(again)
        assert again.structured_content["receipt"] == done["receipt"]

        read = await client.call_tool("read_file", {"path": path})
        assert _text(read) == "def greet(name):\n    return f'héllo {name}'\n\nprint(greet('w'))\n"

        late = await client.call_tool(
            "append_to_write_session", {"session_id": session["id"], "chunk": "more"}
        )
        assert late.is_error
        assert late.structured_content["error"]["code"] == "session_state"


async def test_finish_write_session_writes_without_a_done_line_and_refuses_an_unknown_session(client_factory):
    path = f"finish-{client_factory.kind}-{uuid.uuid4().hex[:8]}.txt"
    async with client_factory() as client:
        begun = await client.call_tool("begin_write_session", {"target_file": path, "operation": "overwrite"})
        session_id = begun.structured_content["id"]
        await client.call_tool("append_to_write_session", {"session_id": session_id, "chunk": "no done line\n"})
        finished = await client.call_tool("finish_write_session", {"session_id": session_id})
        assert not finished.is_error, _text(finished)
        assert finished.structured_content["receipt"]["bytes"] == len("no done line\n")

        unknown = await client.call_tool("finish_write_session", {"session_id": str(uuid.uuid4())})
        assert unknown.is_error
        assert unknown.structured_content["error"]["field"] == "session_id"

        refused = await client.call_tool("begin_write_session", {"target_file": ".git/config", "operation": "overwrite"})
        assert refused.is_error
        assert refused.structured_content["error"]["code"] == "protected_path"


async def test_run_is_offered_with_commands_and_runs_one(client_factory):
    async with client_factory() as client:
        names = [t.name for t in (await client.list_tools()).tools]
        if client_factory.kind == "stdio":
            assert "run" not in names
            # Not offered is not there: the protocol's unknown-tool error.
            with pytest.raises(MCPError) as unknown:
                await client.call_tool("run", {"command": "echo"})
            assert unknown.value.code == -32602
            return
        assert "run" in names
        ran = await client.call_tool("run", {"command": "echo", "args": ["hello.txt"]})
        assert not ran.is_error, _text(ran)
        assert ran.structured_content["exit_code"] == 0
        assert "hello.txt" in ran.structured_content["stdout"]
        assert _text(ran).startswith("exit code 0")

        refused = await client.call_tool("run", {"command": "rm", "args": ["-rf"]})
        assert refused.is_error
        assert refused.structured_content["error"]["field"] == "command"
