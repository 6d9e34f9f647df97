"""Any other agent CLI: forward mode with every common proxy and CA variable.

On top of the base forward variables (HTTPS_PROXY/HTTP_PROXY in both cases, NO_PROXY keeping
loopback, NODE_EXTRA_CA_CERTS, SSL_CERT_FILE and REQUESTS_CA_BUNDLE as full bundles,
CODEX_CA_CERTIFICATE) it sets what other runtimes and clients read (PROTOCOLS.md §2.0):

- ALL_PROXY: curl and reqwest fall back to it;
- NODE_USE_ENV_PROXY=1: Node's own fetch ignores HTTPS_PROXY without it (Node >= 22.21/24.5);
- CURL_CA_BUNDLE, AWS_CA_BUNDLE, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH: these replace the trust
  store, so they get the full bundle (curl; botocore, for Bedrock; gRPC);
- GOOSE_CA_CERT_PATH and DENO_CERT: these add to the roots, so they get the CA alone.

Model hosts are TLS-intercepted; any other host is tunnelled untouched. A model server that
is not a known host (a vLLM or Ollama on the LAN) is recorded when it is reached in the clear
through HTTP_PROXY and its request speaks a known dialect, by path and body (the recorder
addon decides). One on 127.0.0.1 bypasses the proxy (NO_PROXY): name it with
`--upstream HOST=URL`, or use a harness whose base-URL variable reverse mode can point at it.
"""

from __future__ import annotations

from collections.abc import Mapping

from forge_record.harness_shims.base import CaFiles, Shim


class Generic(Shim):
    name = "generic"
    model_hosts = (
        "api.anthropic.com",
        "generativelanguage.googleapis.com",
        "cloudcode-pa.googleapis.com",
        "api.openai.com",
        "chatgpt.com",  # Codex with ChatGPT login: chatgpt.com/backend-api/codex/responses
    )
    verified = "curl and Python clients through the live proxy (tests)"

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
