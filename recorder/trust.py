"""The recorder's CA, as files the agent CLIs can trust.

mitmproxy makes the CA in its confdir on first use; we keep that dir private (0700, the key
file 0600) inside forge-record's home. Some runtimes *add* a CA file to their roots (Node's
NODE_EXTRA_CA_CERTS, Codex's CODEX_CA_CERTIFICATE); Python's SSL_CERT_FILE and requests'
REQUESTS_CA_BUNDLE *replace* the trust store, so they get a bundle of the system roots plus
our CA.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path

from forge_record.harness_shims.base import CaFiles

CA_CERT = "mitmproxy-ca-cert.pem"
BUNDLE = "bundle.pem"


def confdir(home: Path) -> Path:
    path = home / "ca"
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def ca_files(conf: Path) -> CaFiles:
    """The CA cert and the full bundle; call once mitmproxy has started (it makes the CA)."""
    for key in conf.glob("mitmproxy-ca*.p*"):
        if key.name != CA_CERT:
            os.chmod(key, 0o600)
    cert = conf / CA_CERT
    bundle = conf / BUNDLE
    bundle.write_bytes(_system_roots() + b"\n" + cert.read_bytes())
    return CaFiles(cert=str(cert), bundle=str(bundle))


def _system_roots() -> bytes:
    paths = ssl.get_default_verify_paths()
    for candidate in (paths.cafile, paths.openssl_cafile, "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and os.path.isfile(candidate):
            return Path(candidate).read_bytes()
    import certifi  # mitmproxy depends on it

    return Path(certifi.where()).read_bytes()
