"""Shared set-up for the MCP and function-calling tests.

scripts/test-mcp starts writ (with writ-fake-upstream as its model provider) and exports:
WRIT_TEST_URL (the running server), WRIT_TEST_REPO_DIR (its workspace), WRIT_BIN (the binary,
for `writ mcp` on stdio) and WRIT_FAKE_URL (the fake provider, for the stdio server's models).
"""

import json
import os
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOL_NAMES = [
    "write_codebase",
    "list_files",
    "read_file",
    "search_files",
    "write_file",
    "edit_files",
    "list_operations",
    "get_operation",
    "undo",
    "restore",
    "list_changes",
    "show_change",
    "apply_change",
    "reject_change",
    "begin_write_session",
    "append_to_write_session",
    "finish_write_session",
    "claim_paths",
    "list_claims",
    "release_claims",
    "list_overlaps",
    "rebase_workspace",
]
# The HTTP server of scripts/test-mcp has WRIT_COMMANDS, so it offers `run` too; the stdio server
# has none, so it does not.
HTTP_TOOL_NAMES = TOOL_NAMES + ["run"]


def _required(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.exit(f"{name} is not set: run these tests with scripts/test-mcp", returncode=2)
    return value


@pytest.fixture(scope="session")
def writ_url() -> str:
    return _required("WRIT_TEST_URL")


@pytest.fixture(scope="session")
def repo_dir() -> pathlib.Path:
    return pathlib.Path(_required("WRIT_TEST_REPO_DIR"))


@pytest.fixture(scope="session")
def stdio_env(tmp_path_factory) -> dict:
    """The environment of a `writ mcp` child: its own database, the fake provider."""
    data = tmp_path_factory.mktemp("stdio-data")
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env.update(
        {
            "DATABASE_URL": f"sqlite://{data}/writ.db",
            "OPENROUTER_BASE_URL": _required("WRIT_FAKE_URL"),
            "CODE_LIST": "alpha/one,beta/two",
            "CODE_MODEL": "judge/arbiter",
            "WRIT_LOCAL_MODEL": "off",
            "WRIT_MODEL_MAX_ATTEMPTS": "1",
            "RUST_LOG": "info",
        }
    )
    return env


@pytest.fixture(scope="session")
def writ_bin() -> str:
    return _required("WRIT_BIN")


@pytest.fixture(scope="session")
def readme_request() -> dict:
    """The write_codebase request the README shows for the HTTP API."""
    text = (ROOT / "README.md").read_text()
    match = re.search(r"-d '(\{\n  \"command\": \"write_codebase\".*?\n\})'", text, re.S)
    assert match, "the README shows a write_codebase request"
    return json.loads(match.group(1))
