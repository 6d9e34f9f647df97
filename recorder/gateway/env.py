"""What a harness needs to reach the gateway as one session: its environment, its arguments.

The base URL is the gateway's public URL with the session's path prefix (`/s/<id>`), put in
the harness's own base-URL variable (its shim's `reverse_env`); the session token goes in
the variable the harness reads its API key from. Codex takes its base URL from `-c` flags
(the shim's `reverse_argv`), which come back as `args`, to go right after the executable.
"""

from __future__ import annotations

from forge_record import harness_shims

# The variables each harness reads its API key from (the token goes in all of them).
KEY_VARS = {
    "claude-code": ("ANTHROPIC_API_KEY",),
    "codex": ("OPENAI_API_KEY", "CODEX_API_KEY"),
    "gemini-cli": ("GEMINI_API_KEY",),
    "opencode": ("ANTHROPIC_API_KEY",),
    "qwen-code": ("OPENAI_API_KEY",),
    "aider": ("OPENAI_API_KEY",),
    "generic": ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"),
}
GENERIC_BASES = {"OPENAI_BASE_URL": "/v1", "ANTHROPIC_BASE_URL": ""}


def harnesses() -> list[str]:
    return [name for name in KEY_VARS if harness_shims.shim_named(name) is not None]


def session_env(harness: str, base_url: str, token: str) -> tuple[dict[str, str], list[str]]:
    """(environment variables, arguments after the executable) for `harness`. KeyError
    for a harness the gateway has no recipe for."""
    keys = KEY_VARS[harness]
    shim = harness_shims.shim_named(harness)
    if shim is None:
        raise KeyError(harness)
    with_key = {var: token for var in keys}
    # The shims hand a CLI the proxy under the path of the API it would call (run's reverse
    # mode); here the gateway's own upstream URLs carry the path, so the harness is shown a
    # base URL without one and the session's base goes in as it is.
    environ = {**with_key, **({shim.base_url_var: "http://gateway"} if shim.base_url_var else {})}
    if harness == "generic":
        env = {var: base_url + path for var, path in GENERIC_BASES.items()}
    else:
        env = shim.reverse_env(base_url, environ)
    args = shim.reverse_argv(["_"], base_url, with_key)[1:]
    return {**env, **with_key}, args
