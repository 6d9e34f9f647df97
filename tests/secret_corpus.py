"""The secret corpus: for each kind the body redactor covers, a positive (text holding a secret,
and the secret itself, which must appear in no output) and a near miss (text that looks like
one but is not a secret, and a token of it that must survive). docs/RELIABILITY.md lists the
same kinds. Every secret is distinct, and no near miss holds any of them.

Imported by tests/test_secret_corpus.py (tests/ is on sys.path).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    kind: str  # the placeholder's kind: [REDACTED:<kind>:<hmac8>]
    text: str
    secret: str
    near: str  # not a secret...
    near_token: str  # ...and this part of it is kept in every output


AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AWS_SECRET_2 = "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY"
HEX40 = "0123456789abcdef0123456789abcdef01234567"

CASES = [
    Case("anthropic_key", "ANTHROPIC key sk-ant-api03-" + "A1b2C3d4" * 5, "sk-ant-api03-" +
         "A1b2C3d4" * 5, "the task-ant-api03-" + "Q1w2E3r4" * 5 + " list",
         "task-ant-api03-" + "Q1w2E3r4" * 5),
    Case("openai_key", "export OPENAI=sk-proj-" + "Zz9Yy8Xx" * 5, "sk-proj-" + "Zz9Yy8Xx" * 5,
         "the flag sk-short is fine", "sk-short"),
    Case("google_key", "gemini AIza" + "S" * 35, "AIza" + "S" * 35,
         "AIzaTooShort is not a key", "AIzaTooShort"),
    Case("github_token", "push with ghp_" + "a1B2" * 9, "ghp_" + "a1B2" * 9,
         "branch ghp_topic merged", "ghp_topic"),
    Case("gitlab_token", "gitlab glpat-" + "x" * 20, "glpat-" + "x" * 20,
         "see glpat-docs", "glpat-docs"),
    Case("slack_token", "slack xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij",
         "the xoxb-1 prefix", "xoxb-1"),
    Case("aws_access_key", "id AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE",
         "AKIAIOSFODNN7EXAMPL is cut short", "AKIAIOSFODNN7EXAMPL"),
    Case("jwt", "bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLXZhbHVl",
         "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLXZhbHVl",
         "header eyJhbGciOiJIUzI1NiJ9 alone", "eyJhbGciOiJIUzI1NiJ9"),
    Case("private_key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n"
         "-----END OPENSSH PRIVATE KEY-----", "b3BlbnNzaC1rZXk",
         "-----BEGIN PUBLIC KEY-----\nMIIBpublicpart\n-----END PUBLIC KEY-----",
         "MIIBpublicpart"),
    Case("assignment", "DB_PASSWORD=hunter22", "hunter22", "max_tokens: 1000", "1000"),
    # The new kinds (issue 19 item 5).
    Case("stripe_key", "stripe.api_key = sk_live_4eC39HqLyjWDarjtT1zdp7dc; ok",
         "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "test mode sk_test_4eC39HqLyjWDarjtT1zdp7dc",
         "sk_test_4eC39HqLyjWDarjtT1zdp7dc"),
    Case("stripe_key", "restricted rk_live_51H8abcdefghijklmnopqrstuv",
         "rk_live_51H8abcdefghijklmnopqrstuv", "the rk_live_ prefix", "rk_live_ prefix"),
    Case("aws_secret_key", '{"AccessKeyId": "ASIA", "SecretAccessKey": "' + AWS_SECRET + '"}',
         AWS_SECRET, '"SecretSha": "3f2a9c0d1e4b5a6978877665544332211aabbccd"',
         "3f2a9c0d1e4b5a6978877665544332211aabbccd"),
    Case("aws_secret_key", "AKIAI44QH8DHBEXAMPLE," + AWS_SECRET_2, AWS_SECRET_2,
         "a checksum kL9mNbVcXzAsDfGhJkLpOiUyTrEwQ1234567890a alone",
         "kL9mNbVcXzAsDfGhJkLpOiUyTrEwQ1234567890a"),
    Case("gcp_private_key_id", '"type": "service_account", "private_key_id": "' + HEX40 + '",',
         HEX40, '"key_id": "fedcba9876543210fedcba9876543210fedcba98"',
         "fedcba9876543210fedcba9876543210fedcba98"),
    Case("url_password", "DATABASE_URL is postgres://app:s3cr3t-pw@db.internal:5432/prod",
         "s3cr3t-pw", "postgres://app@db.internal:5432/prod and http://cdn.example:8080/a@b",
         "http://cdn.example:8080/a@b"),
]

# `--tag` values (tags were stored verbatim).
TAG_SECRET = "ghp_" + "Zz9Y" * 9
TAGS = {"token": TAG_SECRET, "db": "postgres://ci:tagpass99@db.ci/x", "outcome": "pass"}
TAG_SECRETS = [TAG_SECRET, "tagpass99"]


def body_text() -> str:
    """Every positive and near miss, one a line, as a tool result would carry them."""
    return "\n".join(line for case in CASES for line in (case.text, case.near))


def secrets() -> list[str]:
    return [case.secret for case in CASES] + TAG_SECRETS


def survivors() -> list[str]:
    return [case.near_token for case in CASES]
