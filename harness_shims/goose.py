"""goose (`goose`, Block's Rust CLI; configured per its docs, not run here).

auto mode is forward: reqwest honours HTTPS_PROXY and NO_PROXY (PROTOCOLS.md §2.8 (b)), and
goose adds GOOSE_CA_CERT_PATH to its roots (§2.8 (c)), so it is set to the forge-record CA;
SSL_CERT_FILE gets the full bundle as for every shim. Every model request carries a
`goose-session-id` header (§2.8 (e)); request headers are kept, so it is in the record.

reverse mode points the active provider's host variable at the proxy, chosen by GOOSE_PROVIDER:
ANTHROPIC_HOST, OPENAI_HOST or OLLAMA_HOST (§2.8 (a)); the user's value, if set, stays the
upstream (auto chooses reverse then, so a local Ollama on 127.0.0.1 is recorded too). Other
providers have no such variable here: use forward mode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from forge_record.harness_shims.base import CaFiles, Shim

PROVIDER_HOSTS = {  # GOOSE_PROVIDER -> (its host variable, that provider's default)
    "anthropic": ("ANTHROPIC_HOST", "https://api.anthropic.com"),
    "openai": ("OPENAI_HOST", "https://api.openai.com"),
    "ollama": ("OLLAMA_HOST", "http://localhost:11434"),
}


def _host_var(environ: Mapping[str, str]) -> tuple[str, str] | None:
    return PROVIDER_HOSTS.get((environ.get("GOOSE_PROVIDER") or "").strip().lower())


class Goose(Shim):
    name = "goose"
    executables = ("goose",)
    model_hosts = ("api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com",
                   "openrouter.ai")
    reverse_when = "GOOSE_PROVIDER is anthropic, openai or ollama and its *_HOST is set"
    verified = "configuration only, per goose's docs (not run)"

    def auto_mode(self, environ: Mapping[str, str]) -> str:
        chosen = _host_var(environ)
        return "reverse" if chosen and environ.get(chosen[0]) else "forward"

    def upstream_base(self, environ: Mapping[str, str], argv: Sequence[str] = ()) -> str | None:
        chosen = _host_var(environ)
        if chosen is None:
            return None
        value = (environ.get(chosen[0]) or chosen[1]).rstrip("/")
        return value if "://" in value else f"http://{value}"  # OLLAMA_HOST may be host:port

    def reverse_env(self, proxy_url: str, environ: Mapping[str, str]) -> dict[str, str]:
        chosen = _host_var(environ)
        assert chosen is not None  # plan_route refused reverse mode without a provider
        return {chosen[0]: self.reverse_base(proxy_url, environ)}

    def forward_env(self, proxy_url: str, ca: CaFiles, environ: Mapping[str, str]
                    ) -> dict[str, str]:
        return {**super().forward_env(proxy_url, ca, environ), "GOOSE_CA_CERT_PATH": ca.cert}
