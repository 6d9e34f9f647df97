"""Secrets inside bodies: found by pattern, replaced by a typed placeholder.

Tool results carry file contents and environment dumps, so a recorded request can hold API
keys, tokens and private keys. Before anything is written, every string of a record and the
raw bodies go through `Redactor`. Each secret becomes `[REDACTED:<kind>:<8 hex>]`, where the
hex is an HMAC of the secret under a key kept in forge-record's data dir. The same secret
always maps to the same placeholder, so deduplication and "is this the same key?" questions
still work, but the secret cannot be recovered from the record. Placeholders hold no quote or
backslash, so JSON text stays valid JSON.

Secrets known by their shape (API keys, tokens, private key blocks) are replaced whole. Those
known by their context lose their value and keep the context: `.env`-style assignments
(`PASSWORD=...`, `API_TOKEN: ...`), an AWS secret access key after a credential word or an
access key id, a service account's `private_key_id`, the password in a URL's userinfo
(`postgres://user:PASSWORD@host`). Session tags go through the same rules (`tags`). User
patterns (regexes) are added with the kind "custom". docs/RELIABILITY.md lists every kind;
tests/secret_corpus.py holds a positive and a near miss for each.
"""

from __future__ import annotations

import bisect
import hashlib
import hmac
import os
import re
import secrets as _random
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge_record.shared_ends import common_ends, common_prefix

# (kind, pattern). Each starts with a literal, which keeps one pass over a 80 KB body near a
# millisecond. Order matters: private key blocks before what could match inside them.
_PRIVATE_KEY_HEADER = r"-----BEGIN [A-Z ]*PRIVATE KEY-----"
_PATTERNS: list[tuple[str, str]] = [
    ("private_key", _PRIVATE_KEY_HEADER + r".*?-----END [A-Z ]*PRIVATE KEY-----"),
    ("anthropic_key", r"sk-ant-[A-Za-z0-9_-]{20,}"),
    ("openai_key", r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
    ("google_key", r"AIza[0-9A-Za-z_-]{35}"),
    ("github_token", r"(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"),
    ("gitlab_token", r"glpat-[A-Za-z0-9_-]{20,}"),
    ("slack_token", r"xox[abposr]-[A-Za-z0-9-]{10,}"),
    ("aws_access_key", r"(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("stripe_key", r"[sr]k_live_[0-9A-Za-z]{24,}"),  # secret and restricted live keys
    ("jwt", r"eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),
]
# Secrets told by their context, each a (kind, regex) searched in the lower-cased text (a
# case-insensitive regex is several times slower): only the `value` group is replaced, the
# context stays. `{ws}` stands for one whitespace character (see _CONTEXT_IN_BYTES), `{q}`
# for an optional quote, plain or escaped as inside JSON text. Values stop at whitespace,
# quotes and backslashes: an escaped newline inside JSON text starts with one.
_Q = r"(?:\\?[\"'])?"
_CONTEXT_TEMPLATES: list[tuple[str, str]] = [
    # NAME=value / NAME: value where NAME says it is secret (.env files, YAML, shell).
    ("assignment",
     r"(?:password|passwd|secret|token|api_key|apikey|access_key|private_key)[a-z0-9_]*"
     r"{ws}*[=:]{ws}*[\"']?(?P<value>[^\s\"'\\,;]{4,})"),
    # An AWS secret access key however it is written: 40 base64 characters right after a
    # credential word (`"SecretAccessKey": "..."`, `secret ...`) or an access key id, which
    # the key pass has made a placeholder by then (`AKIA...,<secret>` in a credentials CSV).
    # Mixed case is required where it is applied (_is_secret): hex digests are not keys.
    ("aws_secret_key",
     r"(?:secret[a-z0-9_]*|\[redacted:aws_access_key:[0-9a-f]{8}\])"
     r"(?:{ws}|\\[nrt]|[\"',;:=|\\]){1,12}(?P<value>[a-z0-9/+]{40})(?![a-z0-9/+=])"),
    # A Google service account's key id, as its JSON file writes it.
    ("gcp_private_key_id",
     r"private_key_id{q}{ws}*[=:]{ws}*{q}(?P<value>[0-9a-f]{40})(?![0-9a-z])"),
    # The password in a URL's userinfo, in any text: postgres://user:PASSWORD@host.
    ("url_password", r"://[^\s/:@\"'\\]*:(?P<value>[^\s/@\"'\\]+)@"),
]


def _context_rule(template: str, ws: str) -> str:
    return template.replace("{ws}", ws).replace("{q}", _Q)


_CONTEXTS = [(kind, re.compile(_context_rule(t, r"\s"))) for kind, t in _CONTEXT_TEMPLATES]
_ASSIGNMENT = _CONTEXTS[0][1]
_WORD_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"
_WORD = frozenset([*_WORD_CHARS, *(c.encode() for c in _WORD_CHARS)])  # as str and as bytes
_ESCAPES = frozenset(["\\n", "\\r", "\\t", b"\\n", b"\\r", b"\\t"])  # JSON text's \n \r \t
# Where a match can start, so that text holding no secret costs a few substring searches
# (bytes.find runs at memory speed; the regexes take ~30 ns a character). Every match of a
# pattern above starts at an occurrence of one of these needles, the given number of
# characters before it ("IA" for AKIA and ASIA); every assignment starts with one of these
# names in the lower-cased text ("passw": password and passwd; "key" ends api_key, apikey,
# access_key and private_key). tests/test_secrets.py checks each pattern's needle.
# A needle with a gate is looked for only if its gate, a character of it that is rare in
# model traffic, occurs: one memchr, a hundred times faster than the search (`int in bytes`
# is a memchr; `bytes in bytes` is not).
_KEY_NEEDLES = ((b"-----BEGIN ", (0,), None), (b"sk-", (0,), None), (b"AIza", (0,), ord("z")),
                (b"gh", (0,), None), (b"glpat-", (0,), None), (b"xox", (0,), None),
                (b"IA", (2,), ord("I")), (b"eyJ", (0,), ord("J")), (b"k_liv", (1,), None))
# Context rules' needles, in the lower-cased text: the names above; "secret" or an access key
# placeholder starts the AWS rule (an access key id in the text is found by the key pass), and
# "key" is 21 characters into that placeholder and 8 into "private_key_id"; "://" starts a
# URL's userinfo, which only text holding an "@" can have.
_NAME_NEEDLES = ((b"passw", (0,), None), (b"secret", (0,), None), (b"token", (0,), None),
                 (b"key", (3, 4, 7, 8, 21), None), (b"://", (0,), ord("@")))
# The prefilter works on UTF-8 bytes: bytes.lower() is ten times faster than str.lower() on
# text that is not all ASCII. Its patterns match wherever the str patterns would: the key
# patterns are ASCII; in the assignment, any byte of a non-ASCII character may be whitespace
# (str's \s also takes U+00A0, U+2003, ...) and \x1c-\x1f are whitespace as in str.
# Only two characters outside ASCII lower-case into ASCII, so text holding one of them takes
# the slow path.
_KEYS_IN_BYTES = re.compile("|".join(p for _, p in _PATTERNS).encode(), re.DOTALL)
_CONTEXT_IN_BYTES = re.compile("|".join(
    _context_rule(t, r"[\s\x1c-\x1f\x80-\xff]").replace("(?P<value>", "(?:")
    for _, t in _CONTEXT_TEMPLATES).encode())
_LOWER_INTO_ASCII = ("\u212a".encode(), "\u0130".encode())  # KELVIN SIGN, I WITH DOT ABOVE
# An agent's request is its previous request plus a few messages. So the prefilter keeps the
# last few big bodies it scanned, with where each needle occurs in them, and searches a new
# body only where it differs from the closest of them (store.delta's shared prefix and
# suffix): a 300 KB request costs a memcmp and a few KB of searching instead of a dozen
# passes. Every occurrence, carried over or new, is still tried against the patterns on the
# new body, so the answer is the one a full search gives (tests/test_secrets.py).
REMEMBER_FROM = 16 << 10  # bytes
_REMEMBERED = 4
# A big body the prefilter cannot pass (once a file with `token = ...` in it is in an
# agent's history, every later request has it) is redacted in pieces, cut right after each
# `}` that ends one JSON object of a list and is followed by the next (`,{"` or `, {"`), and
# a piece redacted for one of the last few bodies is not redacted again: a 300 KB request
# took 13 ms, now its new messages do. No pattern matches across such a cut: every pattern
# stops at `{` or `"`, but the private key block's, so a body with a block's header in it is
# redacted whole, as is any with user patterns (a body that only quotes "-----BEGIN ", as
# code that looks for keys does, is not: no block matches without a header); and a cut is
# not made where a placeholder's look-back (_in_placeholder, 40 characters) would reach an
# unclosed "[REDACTED:" before it. So the pieces join into what redacting the whole gives
# (tests/test_secrets.py).
# The pieces of the bytes a body shares with one of those bodies from its start are that
# body's, and so are their redactions: they are not cut and looked up again (a cut depends on
# the 160 bytes before it and the 4 after it). A body that shares half of itself so is not
# searched by the prefilter first (it holds what made that body fail it), and a piece it adds
# is redacted only if the prefilter cannot pass that piece: on a real 1,000-call Claude Code
# session, 1.8 ms a call became 1.2.
_CUT = re.compile(rb'\}(?=, ?\{")')
_CUT_AHEAD = 4
_BEGIN = _PRIVATE_KEY_HEADER[:11].encode()  # "-----BEGIN "
_HEADER = re.compile(_PRIVATE_KEY_HEADER.encode())
_OPENING = b"[REDACTED:"
# How far around the changed bytes to search anew: a needle that overlaps them, a match that
# starts before its needle (its back offset) and the two bytes a start looks back at for a
# word break. Occurrences wholly outside are carried over from the passed body: all of them,
# so that the body, once passed in turn, has its own complete record.
_REACH = max(len(needle) + max(backs) + 2 for needle, backs, _ in _KEY_NEEDLES + _NAME_NEEDLES)


@dataclass(frozen=True, slots=True)
class _Cut:
    """A body redacted in pieces: where its pieces end, and where their redactions end in
    the redacted bytes; `made` maps the pieces it did not share from its start with an
    earlier body to their redactions."""

    data: bytes
    ends: tuple[int, ...]
    out: bytes
    out_ends: tuple[int, ...]
    made: dict[bytes, bytes]

    def shared(self, data: bytes) -> int:
        """How many of its first pieces `data` has too, cut the same."""
        return bisect.bisect_right(self.ends, common_prefix(self.data, data) - _CUT_AHEAD)


@dataclass(frozen=True, slots=True)
class _Scanned:
    """A body the prefilter scanned: its needles' occurrences, (needle index, start), in it
    and in its lower-cased bytes."""

    data: bytes
    lowered: bytes
    keys: frozenset[tuple[int, int]]
    names: frozenset[tuple[int, int]]


class Redactor:
    def __init__(self, key: bytes, extra_patterns: Iterable[str] = ()) -> None:
        self._key = key
        # One alternation without groups: capture groups make `re` several times slower.
        self._pattern = re.compile("|".join(p for _, p in _PATTERNS), re.DOTALL)
        custom = "|".join(f"(?:{p})" for p in extra_patterns)
        self._custom = re.compile(custom) if extra_patterns else None
        self._scanned: deque[_Scanned] = deque(maxlen=_REMEMBERED)
        self._cut: deque[_Cut] = deque(maxlen=_REMEMBERED)  # the last bodies in pieces

    def placeholder(self, kind: str, secret: str) -> str:
        digest = hmac.new(self._key, secret.encode(), hashlib.sha256).hexdigest()[:8]
        return f"[REDACTED:{kind}:{digest}]"

    def text(self, text: str) -> str:
        """`text` with every secret replaced."""
        return self._text(text) if self.may_hold_secrets(text) else text

    def _text(self, text: str) -> str:
        text = self._pattern.sub(self._replace, text)
        if self._custom is not None:
            text = self._custom.sub(lambda m: self.placeholder("custom", m.group()), text)
        for kind, rule in _CONTEXTS:
            text = self._redact_values(text, kind, rule)
        return text

    def may_hold_secrets(self, text: str | bytes) -> bool:
        """False only if `text()` would leave `text` (or its UTF-8 bytes) as it is. It may say
        True of text that holds no secret, never False of text that holds one; text made of
        pieces joined by NUL (see `strings`) holds one if any piece does."""
        if self._custom is not None:
            return True
        data = text.encode(errors="surrogatepass") if isinstance(text, str) else text
        if len(data) < REMEMBER_FROM:
            return _may_hold_secrets(data)
        scanned = self._scan(data)
        if scanned is None:  # a character that lower-cases into ASCII: the slow path
            return True
        lowered, keys, names = scanned
        # Remembered whatever the answer: the next body is searched only where it differs.
        self._scanned.append(_Scanned(data, lowered, frozenset(keys), frozenset(names)))
        return (_any_match(_KEYS_IN_BYTES, data, _KEY_NEEDLES, keys, word=True)
                or _any_match(_CONTEXT_IN_BYTES, lowered, _NAME_NEEDLES, names, word=False))

    def _scan(self, data: bytes) -> tuple[bytes, set, set] | None:
        """A big body's lower-cased bytes and its needles' occurrences: searched whole, or
        only around what changed since the closest body passed before."""
        closest = self._closest(data)
        if closest is None:
            if not data.isascii() and any(c in data for c in _LOWER_INTO_ASCII):
                return None
            lowered = data.lower()
            return (lowered, _occurrences(data, _KEY_NEEDLES, 0, len(data), gated=True),
                    _occurrences(lowered, _NAME_NEEDLES, 0, len(data), gated=True))
        passed, p, s = closest
        n, old_end = len(data), len(passed.data) - s
        lo, hi = max(0, p - _REACH), min(n, n - s + _REACH)  # the changed bytes, widened
        if any(data.find(c, lo, hi) >= 0 for c in _LOWER_INTO_ASCII):
            return None
        lowered = passed.lowered[:p] + data[p : n - s].lower() + passed.lowered[old_end:]
        moved = n - len(passed.data)
        keys = (_carried(passed.keys, _KEY_NEEDLES, p, old_end, moved)
                | _occurrences(data, _KEY_NEEDLES, lo, hi, gated=False))
        names = (_carried(passed.names, _NAME_NEEDLES, p, old_end, moved)
                 | _occurrences(lowered, _NAME_NEEDLES, lo, hi, gated=False))
        return lowered, keys, names

    def _closest(self, data: bytes) -> tuple[_Scanned, int, int] | None:
        """A remembered body sharing at least half of `data` as leading and trailing bytes
        (the newest such), and how many; None if there is none. Any such body gives the
        same answer; the more it shares, the less is searched."""
        best, shared = None, 0
        for scanned in reversed(list(self._scanned)):  # a copy: another thread may append
            p, s = common_ends(data, scanned.data)
            if p + s > shared:
                best, shared = (scanned, p, s), p + s
            if 2 * shared >= len(data):  # the newest first: usually its thread's last body
                break
        return best if 2 * shared >= len(data) else None

    def bytes(self, data: bytes) -> bytes:
        """Raw body bytes, redacted as UTF-8 text; bytes that are not UTF-8 are left as they
        are (the redaction would corrupt a binary body)."""
        if len(data) < REMEMBER_FROM or self._custom is not None:
            return self._whole(data) if self.may_hold_secrets(data) else data
        cuts = list(self._cut)  # a copy: another thread may append
        head, shared = _head(cuts, data)
        # Half of it was a body that held candidates: so does this one, no need to search
        # it first (the pieces it adds are, one by one).
        if not _covers(head, shared, data) and not self.may_hold_secrets(data):
            return data
        # A header can span no cut, and `head` (redacted in pieces) had none: only what
        # follows the pieces it shares is searched.
        start = head.ends[shared - 1] if head is not None and shared else 0
        if data.find(_BEGIN, start) >= 0 and _HEADER.search(data, start):
            return self._whole(data)
        return self._in_pieces(data, cuts, head, shared)

    def _whole(self, data: bytes) -> bytes:
        try:
            decoded = data.decode()
        except UnicodeDecodeError:
            return data
        redacted = self._text(decoded)
        return data if redacted == decoded else redacted.encode()

    def _in_pieces(self, data: bytes, cuts: list[_Cut], head: _Cut | None, shared: int
                   ) -> bytes:
        """`_whole(data)`, redacting only pieces none of the last few bodies (`cuts`) had,
        and of those only the ones the prefilter cannot pass; `data`'s first `shared`
        pieces are `head`'s. Pieces are cut between ASCII bytes, so the body decodes if and
        only if each piece does."""
        known = [c.made for c in reversed(cuts)]  # newest first
        start = head.ends[shared - 1] if head is not None and shared else 0
        made: dict[bytes, bytes] = {}
        pieces = _pieces(data, start)
        for piece in pieces:
            if piece in made:
                continue
            done = next((body[piece] for body in known if piece in body), None)
            if done is None:
                try:
                    text = piece.decode()
                except UnicodeDecodeError:
                    return data
                if not _may_hold_secrets(piece):
                    done = piece
                else:
                    redacted = self._text(text)
                    done = piece if redacted == text else redacted.encode()
            made[piece] = done
        if shared:  # the pieces it shares with `head`, redacted as they were there
            ends, out_ends = list(head.ends[:shared]), list(head.out_ends[:shared])
            out = [head.out[:out_ends[-1]]]
        else:
            ends, out_ends, out = [], [], []
        at, out_at = start, out_ends[-1] if out_ends else 0
        for piece in pieces:
            at, out_at = at + len(piece), out_at + len(made[piece])
            ends.append(at)
            out_ends.append(out_at)
            out.append(made[piece])
        joined = b"".join(out)
        if joined == data:  # nothing redacted: keep one copy
            joined = data
        self._cut.append(_Cut(data, tuple(ends), joined, tuple(out_ends), made))
        return joined

    def value(self, value: Any) -> Any:
        """A JSON-like value (dicts, lists, strings) with every string redacted; the value
        itself when none of its strings holds a secret."""
        if not self.may_hold_secrets(strings(value)):
            return value
        return self._value(value)

    def tags(self, tags: dict[str, str]) -> dict[str, str]:
        """Session tags (`--tag K=V`) with secret values replaced: each is read as the
        assignment `K=V`, so `token=abc123` loses its value as `TOKEN=abc123` would, and a
        key-shaped value (`note=ghp_...`) is caught whatever its name."""
        out = {}
        for key, value in tags.items():
            redacted = self.text(f"{key}={value}")
            head = f"{key}="
            out[key] = redacted[len(head):] if redacted.startswith(head) else self.text(value)
        return out

    def _value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self._value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._value(v) for v in value]
        return value

    def _replace(self, match: re.Match[str]) -> str:
        if not _starts_a_word(match.string, match.start()):
            return match.group()  # the tail of a longer word, e.g. "task-ant-..."
        return self.placeholder(_kind_of(match.group()), match.group())

    def _redact_values(self, text: str, kind: str, rule: re.Pattern[str]) -> str:
        """`text` with the `value` of each match of a context rule replaced."""
        lowered = _lowered(text)
        pieces, last = [], 0
        for match in rule.finditer(lowered):
            start, end = match.span("value")
            value = text[start:end]
            if (not _is_secret(kind, value) or value.startswith("[REDACTED:")
                    or _in_placeholder(text, match.start())):
                continue
            pieces += [text[last:start], self.placeholder(kind, value)]
            last = end
        return "".join(pieces) + text[last:] if pieces else text


_KINDS = [(kind, re.compile(pattern, re.DOTALL)) for kind, pattern in _PATTERNS]


def strings(value: Any) -> str:
    """Every string inside a JSON-like value or a record (slotted dataclasses), dict keys
    left out, joined by NUL: a string holds a secret only if this does (see
    may_hold_secrets)."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif hasattr(item, "__slots__"):
            stack.extend(getattr(item, name) for name in item.__slots__)
    return "\0".join(found)


def _head(cuts: list[_Cut], data: bytes) -> tuple[_Cut | None, int]:
    """The remembered body `data` shares the most pieces with from its start, and how many;
    the newest first, and the first that has half of `data` (usually its thread's body
    before) ends the search. Any body gives the same redaction, the more it shares the less
    is cut."""
    best, most = None, 0
    for cut in reversed(cuts):
        shared = cut.shared(data)
        if shared > most:
            best, most = cut, shared
        if _covers(best, most, data):
            break
    return best, most


def _covers(head: _Cut | None, shared: int, data: bytes) -> bool:
    """Whether `head`'s first `shared` pieces are half of `data` or more."""
    return head is not None and shared > 0 and 2 * head.ends[shared - 1] >= len(data)


def _pieces(data: bytes, start: int = 0) -> list[bytes]:
    """`data[start:]` cut right after each `}` followed by `,{"` or `, {"` (see _CUT), but
    where an unclosed "[REDACTED:" is within 40 characters (160 bytes) before the cut.
    `start` is 0 or where such a cut was made."""
    out, last = [], start
    for match in _CUT.finditer(data, start):
        at = match.end()
        opening = data.rfind(_OPENING, max(0, at - 160), at)
        if opening < 0 or data.find(b"]", opening, at) >= 0:
            out.append(data[last:at])
            last = at
    out.append(data[last:])
    return out


def _lowered(text: str) -> str:
    """`text` lower-cased character for character: positions stay where they were."""
    lowered = text.lower()
    if len(lowered) != len(text):  # a few characters grow when lower-cased
        lowered = "".join(c if len(c.lower()) != 1 else c.lower() for c in text)
    return lowered


def _may_hold_secrets(data: bytes) -> bool:
    """The prefilter on a body too small to remember: it stops at the first candidate."""
    if any(_starts_a_word(data, m.start()) for m in _matches(_KEYS_IN_BYTES, data, _KEY_NEEDLES)):
        return True
    if not data.isascii() and any(c in data for c in _LOWER_INTO_ASCII):
        return True
    return any(True for _ in _matches(_CONTEXT_IN_BYTES, data.lower(), _NAME_NEEDLES))


def _matches(pattern: re.Pattern, data: bytes, needles):
    """The matches of `pattern` that start where `needles` say a match can (in no order)."""
    for needle, backs, gate in needles:
        if gate is not None and gate not in data:
            continue
        at = data.find(needle)
        while at >= 0:
            for back in backs:
                if at >= back and (match := pattern.match(data, at - back)):
                    yield match
            at = data.find(needle, at + 1)


def _occurrences(data: bytes, needles, lo: int, hi: int, gated: bool) -> set[tuple[int, int]]:
    """(needle index, start) of every needle wholly inside data[lo:hi]. `gated`: skip a
    needle whose gate is nowhere in `data`."""
    found = set()
    for i, (needle, _, gate) in enumerate(needles):
        if gated and gate is not None and gate not in data:
            continue
        at = data.find(needle, lo, hi)
        while at >= 0:
            found.add((i, at))
            at = data.find(needle, at + 1, hi)
    return found


def _carried(occurrences, needles, prefix: int, suffix_at: int, moved: int) -> set:
    """The occurrences of a passed body that lie wholly in bytes a new body shares with it:
    before `prefix`, or from `suffix_at` on (there `moved` bytes further in the new body)."""
    return ({(i, at) for i, at in occurrences if at + len(needles[i][0]) <= prefix}
            | {(i, at + moved) for i, at in occurrences if at >= suffix_at})


def _any_match(pattern: re.Pattern, data: bytes, needles, occurrences, word: bool) -> bool:
    """Whether `pattern` matches where any occurrence says a match can start (`word`: and
    that start begins a word)."""
    for i, at in occurrences:
        for back in needles[i][1]:
            start = at - back
            if start >= 0 and pattern.match(data, start) and (
                    not word or _starts_a_word(data, start)):
                return True
    return False


def _kind_of(secret: str) -> str:
    return next(kind for kind, pattern in _KINDS if pattern.fullmatch(secret))


def _starts_a_word(text: str | bytes, i: int) -> bool:
    """Whether position i begins a token: start of text, after a non-word character, or
    right after an escaped \\n, \\r or \\t of JSON text."""
    if i == 0 or text[i - 1 : i] not in _WORD:
        return True
    return i >= 2 and text[i - 2 : i] in _ESCAPES


def _is_secret(kind: str, value: str) -> bool:
    """Whether a context rule's value is a secret rather than a setting or a digest."""
    if value.isdigit() or value.lower() in _NOT_SECRETS or value == "***":
        return False
    if kind == "aws_secret_key":  # random base64 has both cases; a hex digest has not
        return value.lower() != value and value.upper() != value
    return True


def _in_placeholder(text: str, i: int) -> bool:
    """Whether position i is inside a "[REDACTED:kind:hash]" made by the first pass."""
    opening = text.rfind("[REDACTED:", max(0, i - 40), i)
    return opening >= 0 and "]" not in text[opening:i]


# Values that follow a secret-sounding name in code and docs but are not secrets.
_NOT_SECRETS = frozenset({"none", "null", "true", "false", "undefined", "required", "optional",
                          "string", "example", "xxxx", "****", "changeme", "your_token_here"})


def load_key(home: Path) -> bytes:
    """The HMAC key, made on first use (0600 in the data dir)."""
    path = home / "redaction.key"
    if not path.exists():
        home.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another recorder made it just now
            pass
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(_random.token_bytes(32))
    return path.read_bytes()
