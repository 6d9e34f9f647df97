"""Any other agent CLI: forward mode with every common proxy and CA variable, or reverse mode
through the common base-URL variables.

On top of the base forward variables (HTTPS_PROXY/HTTP_PROXY in both cases, NO_PROXY keeping
loopback, NODE_EXTRA_CA_CERTS, SSL_CERT_FILE and REQUESTS_CA_BUNDLE as full bundles,
CODEX_CA_CERTIFICATE) it sets what other runtimes and clients read (PROTOCOLS.md §2.0):

- ALL_PROXY: curl and reqwest fall back to it;
- NODE_USE_ENV_PROXY=1: Node's own fetch ignores HTTPS_PROXY without it (Node >= 22.21 in
  22.x, >= 24.0 after; older Node ignores the variable, see `forge-record doctor`);
- CURL_CA_BUNDLE, AWS_CA_BUNDLE, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH: these replace the trust
  store, so they get the full bundle (curl; botocore, for Bedrock; gRPC);
- GOOSE_CA_CERT_PATH and DENO_CERT: these add to the roots, so they get the CA alone.

Model hosts are TLS-intercepted; any other host is tunnelled untouched. A model server that
is not a known host (a vLLM or Ollama on the LAN) is recorded when it is reached in the clear
through HTTP_PROXY and its request speaks a known dialect, by path and body (the recorder
addon decides); the host of a base-URL variable below is intercepted as a model host.

Reverse mode uses the base-URL variables most clients and SDKs read: OPENAI_BASE_URL (the
openai SDKs), OPENAI_API_BASE (litellm, aider, LangChain) and ANTHROPIC_BASE_URL (the
anthropic SDKs). The first of them that is set is the upstream (its path prefix kept); it and
every other one holding the same base URL point at the proxy, and one holding another base
URL is left alone (its calls are not recorded). auto picks reverse when one of them names a
loopback server: NO_PROXY keeps loopback away from the proxy, so forward mode would record
nothing of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from forge_record.harness_shims.base import LOOPBACK, CaFiles, Shim

BASE_URL_VARS = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_BASE_URL")


class Generic(Shim):
    name = "generic"
    model_hosts = (
        "api.anthropic.com",
        "generativelanguage.googleapis.com",
        "cloudcode-pa.googleapis.com",
        "api.openai.com",
        "chatgpt.com",  # Codex with ChatGPT login: chatgpt.com/backend-api/codex/responses
    )
    verified = ("curl and Python clients through the live proxy; simonw's llm 0.36 "
                "(tests/test_third_party_clients.py)")

    def base_urls(self, environ: Mapping[str, str]) -> dict[str, str]:
        return {var: environ[var] for var in BASE_URL_VARS if environ.get(var)}

    def auto_mode(self, environ: Mapping[str, str]) -> str:
        hosts = {urlsplit(url).hostname for url in self.base_urls(environ).values()}
        return "reverse" if hosts & set(LOOPBACK) else "forward"

    def upstream_base(self, environ: Mapping[str, str], argv: Sequence[str] = ()) -> str | None:
        urls = list(self.base_urls(environ).values())
        return urls[0].rstrip("/") if urls else None

    def reverse_env(self, proxy_url: str, environ: Mapping[str, str]) -> dict[str, str]:
        upstream = self.upstream_base(environ)
        base = self.reverse_base(proxy_url, environ)  # the proxy under the upstream's path
        return {var: base for var, url in self.base_urls(environ).items()
                if url.rstrip("/") == upstream}

    def forward_env(self, proxy_url: str, ca: CaFiles, environ: Mapping[str, str]
                    ) -> dict[str, str]:
        return {
            **super().forward_env(proxy_url, ca, environ),
            "ALL_PROXY": proxy_url,
            "all_proxy": proxy_url,
            "NODE_USE_ENV_PROXY": "1",
            "CURL_CA_BUNDLE": ca.bundle,
            "AWS_CA_BUNDLE": ca.bundle,
            "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": ca.bundle,
            "GOOSE_CA_CERT_PATH": ca.cert,
            "DENO_CERT": ca.cert,
        }
