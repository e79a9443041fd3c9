"""Loaded by Schemathesis (SCHEMATHESIS_HOOKS) for `cargo xtask api-check`.

CPython 3.11 before 3.11.5 can raise SystemError "AST constructor recursion
depth mismatch" from ast.parse (CPython issue gh-106905, fixed in 3.11.5);
Debian 12 ships 3.11.2. Hypothesis parses a module's source only to write a
lambda's description into a strategy's repr, and lets that SystemError end
the test case, so a run fails for a reason that is neither the API's nor its
document's. A description is not worth that: when the parse fails, the lambda
is described as Hypothesis itself does when it cannot find the source.
"""

from hypothesis.internal import lambda_sources

_describe = lambda_sources._lambda_description


def _lambda_description(f, *args, **kwargs):
    try:
        return _describe(f, *args, **kwargs)
    except SystemError:
        return "lambda: <unknown>"


lambda_sources._lambda_description = _lambda_description
