from forge_record.redact.argv import mask_argv
from forge_record.redact.headers import redact_headers
from forge_record.redact.urls import redact_url


def test_secret_headers_are_dropped_case_insensitively():
    headers = [("Authorization", "Bearer x"), ("X-Api-Key", "sk-ant-x"), ("Cookie", "a=b"),
               ("Set-Cookie", "c=d"), ("x-goog-api-key", "AIza"), ("Proxy-Authorization", "p"),
               ("User-Agent", "claude-cli/2.1.197"), ("anthropic-beta", "a"),
               ("anthropic-beta", "b")]
    assert redact_headers(headers) == {"user-agent": "claude-cli/2.1.197",
                                       "anthropic-beta": "a, b"}


def test_url_keys_and_userinfo_are_masked():
    url = "https://user:pw@host.example/v1beta/models/m:generate?alt=sse&key=AIzaSECRET"
    assert redact_url(url) == "https://host.example/v1beta/models/m:generate?alt=sse&key=***"
    assert redact_url("https://api.anthropic.com/v1/messages?beta=true").endswith("?beta=true")


def test_argv_secrets_are_masked():
    argv = ["aider", "--openai-api-key", "sk-proj-abcdefghijkl", "--api-key=xyz", "--max-tokens",
            "100", "use sk-ant-api03-abcdefghijk please", "--token", "t"]
    assert mask_argv(argv) == ["aider", "--openai-api-key", "***", "--api-key=***",
                               "--max-tokens", "100", "use *** please", "--token", "***"]
