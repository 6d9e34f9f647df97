"""Codex CLI (`codex`, npm @openai/codex; checked with 0.171.0).

auto mode is forward: HTTPS_PROXY plus CODEX_CA_CERTIFICATE (Codex adds it to its roots for
HTTPS and WebSocket alike) and SSL_CERT_FILE. Codex then runs exactly as configured: the
built-in provider keeps its WebSocket transport with the warm-up, zstd request bodies under a
ChatGPT login, remote compaction, and its own choice of host (api.openai.com with an API key,
chatgpt.com/backend-api/codex with a ChatGPT login), so nothing has to be guessed. Codex
0.171 ignores OPENAI_BASE_URL. The active provider's host (below) is intercepted too, so a
custom provider on a remote host is recorded in forward mode as well.

reverse mode (opt-in) routes the active provider, whatever it is, with one `-c` override
right after `codex` (a per-run setting: the user's ~/.codex, or CODEX_HOME, is never written):

- the provider is read as Codex reads it: `$CODEX_HOME/config.toml`, then the
  `$CODEX_HOME/<name>.config.toml` layer of `-p/--profile <name>`, then every `-c key=value`
  on the command line (TOML values, later ones winning); `model_provider` names it, `openai`
  (the built-in one) when nothing does;
- the built-in `openai` provider: `-c openai_base_url="<proxy><path>"`, its base URL being
  `openai_base_url` when the config sets one, else api.openai.com/v1 when OPENAI_API_KEY or
  CODEX_API_KEY is set, else chatgpt.com/backend-api/codex (ChatGPT login);
- a custom provider: `-c model_providers.<name>.base_url="<proxy><path>"`, its `base_url` the
  upstream, its path kept (`https://gw.example/openai/v1` → `<proxy>/openai/v1`);
- refused, with the reason on one line, when the provider cannot be routed or known: `--oss`
  and the other built-in local providers (ollama, lmstudio), a provider with no `base_url`, a
  config file that is not TOML, a name `-c` cannot address, or a project `.codex/config.toml`
  (from the working directory up) that sets the provider, which forge-record does not read.

`--upstream HOST=URL` still sends the upstream host elsewhere. The version comes from the
User-Agent: `codex_exec/0.171.0 (...)` for `codex exec`, `codex_cli_rs/...` for the terminal
UI (the `originator` header names the same client).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from forge_record.harness_shims.base import Shim

API = "https://api.openai.com/v1"
CHATGPT = "https://chatgpt.com/backend-api/codex"
BUILT_IN = "openai"
LOCAL_BUILT_INS = ("oss", "ollama", "lmstudio")  # Codex's own local providers
_PROVIDER_KEYS = ("model_provider", "model_providers", "openai_base_url")
_NAME = re.compile(r"[A-Za-z0-9_-]+")  # what a dotted `-c` key can address


class Unroutable(Exception):
    """Reverse mode cannot route this Codex run; the message says why, on one line."""


class Codex(Shim):
    name = "codex"
    verified = "Codex 0.171.0, real binary, HTTP SSE and WebSocket, forward and reverse"
    executables = ("codex",)
    model_hosts = ("api.openai.com", "chatgpt.com")
    user_agent_pattern = re.compile(r"\bcodex_[a-z_]+/(\d[\w.+-]*)")

    def auto_mode(self, environ: Mapping[str, str]) -> str:
        return "forward"

    def upstream_base(self, environ: Mapping[str, str], argv: Sequence[str] = ()) -> str | None:
        try:
            return active_provider(argv, environ)[1]
        except Unroutable:
            return None

    def reverse_refusal(self, environ: Mapping[str, str], argv: Sequence[str] = ()
                        ) -> str | None:
        try:
            active_provider(argv, environ)
        except Unroutable as e:
            return f"codex: {e}; use --mode forward"
        return None

    def reverse_env(self, proxy_url: str, environ: Mapping[str, str]) -> dict[str, str]:
        return {}  # Codex takes its base URL from config, set by reverse_argv

    def reverse_argv(
        self, argv: list[str], proxy_url: str, environ: Mapping[str, str]
    ) -> list[str]:
        # Before the subcommand: root-level -c overrides apply to every subcommand, and a
        # user's trailing `--` or prompt cannot swallow them.
        # The user's own overrides of that key are dropped: a later -c would win over ours,
        # and what they said is the upstream already.
        key = active_provider(argv, environ)[0]
        base = self.reverse_base(proxy_url, environ, argv)
        return [argv[0], "-c", f'{key}="{base}"', *_without_override(argv[1:], key)]


def active_provider(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[str, str]:
    """(the config key that sets the active provider's base URL, that base URL), or
    Unroutable."""
    args = _options(argv)
    if "--oss" in args:
        raise Unroutable("--oss uses a built-in local provider that has no base URL to set")
    home = Path(environ.get("CODEX_HOME") or Path(environ.get("HOME") or "~") / ".codex")
    config = _read(home.expanduser() / "config.toml")
    profile = _option(args, "-p", "--profile")
    if profile is not None:
        _merge(config, _read(home.expanduser() / f"{profile}.config.toml"))
    overrides = _options_values(args, "-c", "--config")
    for override in overrides:
        _override(config, override)
    _no_project_provider(Path.cwd(), home)
    name = config.get("model_provider", BUILT_IN)
    if name == BUILT_IN:
        base = config.get("openai_base_url") or (
            API if environ.get("OPENAI_API_KEY") or environ.get("CODEX_API_KEY") else CHATGPT)
        return "openai_base_url", _url(base, "openai_base_url")
    if not isinstance(name, str) or name in LOCAL_BUILT_INS:
        raise Unroutable(f"model_provider {name!r} is a built-in local provider")
    if not _NAME.fullmatch(name):
        raise Unroutable(f"model_provider {name!r} cannot be addressed by a -c override")
    providers = config.get("model_providers")
    entry = providers.get(name) if isinstance(providers, dict) else None
    if not isinstance(entry, dict) or not entry.get("base_url"):
        raise Unroutable(f"model_provider {name!r} has no base_url in {home / 'config.toml'}")
    key = f"model_providers.{name}.base_url"
    if any(key.startswith(_key(o) + ".") for o in overrides):
        raise Unroutable(f"a -c override sets the whole {name!r} provider table, which a "
                         "base_url override cannot follow")
    return key, _url(entry["base_url"], f"{name}'s base_url")


def _url(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise Unroutable(f"{what} {value!r} is not an http(s) URL")
    return value.rstrip("/")


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise Unroutable(f"cannot read {path}: {e}") from e


def _merge(base: dict[str, Any], layer: dict[str, Any]) -> None:
    for key, value in layer.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


def _key(override: str) -> str:
    return ".".join(k.strip() for k in override.partition("=")[0].split("."))


def _without_override(args: list[str], key: str) -> list[str]:
    """`args` without the `-c key=...` overrides of `key` (before any `--`)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return out + args[i:]
        if arg in ("-c", "--config") and i + 1 < len(args) and _key(args[i + 1]) == key:
            i += 2
            continue
        value = arg[len("--config="):] if arg.startswith("--config=") else (
            arg[2:].removeprefix("=") if arg.startswith("-c") and len(arg) > 2 else None)
        if value is None or _key(value) != key:
            out.append(arg)
        i += 1
    return out


def _override(config: dict[str, Any], override: str) -> None:
    """One `-c key=value`, as Codex applies it: a dotted key, a TOML value (else the raw
    string)."""
    key, eq, raw = override.partition("=")
    if not eq:
        return  # Codex rejects it itself
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    *parents, last = [k.strip() for k in key.split(".")]
    at = config
    for part in parents:
        if not isinstance(at.get(part), dict):
            at[part] = {}
        at = at[part]
    at[last] = value


def _no_project_provider(cwd: Path, home: Path) -> None:
    """A project's `.codex/config.toml` can set the provider too; its layering is Codex's own
    business (trusted projects only), so a run that has one is not guessed at."""
    for folder in (cwd, *cwd.parents):
        found = folder / ".codex" / "config.toml"
        if found.parent.resolve() == home.expanduser().resolve() or not found.is_file():
            continue
        if any(key in _read(found) for key in _PROVIDER_KEYS):
            raise Unroutable(f"{found} sets the model provider, which forge-record does not read")


def _options(argv: Sequence[str]) -> list[str]:
    """The arguments before a `--` (after it come the prompt's words)."""
    args = list(argv[1:])
    return args[: args.index("--")] if "--" in args else args


def _option(args: list[str], short: str, long: str) -> str | None:
    values = _options_values(args, short, long)
    return values[-1] if values else None


def _options_values(args: list[str], short: str, long: str) -> list[str]:
    """Every value of an option given as `-c V`, `-cV`, `-c=V`, `--config V`, `--config=V`."""
    values = []
    for i, arg in enumerate(args):
        if arg in (short, long):
            if i + 1 < len(args):
                values.append(args[i + 1])
        elif arg.startswith(long + "="):
            values.append(arg[len(long) + 1:])
        elif arg.startswith(short) and not arg.startswith("--") and len(arg) > len(short):
            values.append(arg[len(short):].removeprefix("="))
    return values
