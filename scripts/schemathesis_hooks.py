"""Loaded by scripts/schemathesis (SCHEMATHESIS_HOOKS).

CPython 3.11's AST constructor can raise SystemError("AST constructor recursion depth mismatch")
while hypothesis parses a module's source to describe a filter's lambda for its repr — a defect
of the interpreter, fixed in later versions, which schemathesis reports as a runtime error of
whichever operation meets it first. The description only names the lambda in reports, so it
falls back to a plain name instead of stopping the run; nothing that is sent or checked changes.
"""

from hypothesis.internal import lambda_sources

_describe = lambda_sources.lambda_description


def _lambda_description(f):
    try:
        return _describe(f)
    except SystemError:
        return "lambda"


lambda_sources.lambda_description = _lambda_description
