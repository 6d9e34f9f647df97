"""Keep secrets out of everything forge-record writes.

Credentials travel in headers (`headers`: Authorization, x-api-key, cookies), in URL query
values and userinfo (`urls`: `?key=` for Gemini), on the command line (`argv`: `--api-key
sk-...`) and inside bodies (`bodies`: tool results that carry files and environment dumps).
Every header, URL, argv and body that reaches a record passes through one of these first.
"""

MASK = "***"  # what a masked header, query or argv value becomes
