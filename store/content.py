"""Content addressing: records cut into canonical JSON blobs named by hash, and back.

No SQL. A request is stored as references: its system prompt, its tool list and its other
parameters are one blob each (a system prompt that changed only in small blocks is named block
by block: system_ref; parameters that changed, as changes to a blob: parameters_ref), and every
message is a blob (`{"role", "content"}`, blocks inline). The response's content is a blob of
the same shape (role "assistant"), so the next request, which repeats that answer as its last
assistant message, references the same blob. A blob's bytes are `identity.canonical_json` of
plain dicts, and its name is `identity.blob_name` of them (`c1:` + the first 128 bits of their
sha256); identity.py says why the prefix versions the canonical form and why a dataclass is
refused there.

A manifest is what an exchange keeps besides blobs: every field of the record that is not
content (as records.exchange_to_dict has them), the blob names, and how its message list
derives from an earlier exchange of the session ({"parent": seq, "keep": k, "append": [...]},
i.e. the parent's first k messages, then these). The normalized records read back equal to
what was written (tests/test_store.py checks it on every exchange of a realistic session).
Rebuilt through one `Decoded`, the exchanges of a session share the content they repeat.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import asdict, fields
from typing import Any

import orjson

from forge_record.identity import canonical_json
from forge_record.records import (
    Block,
    Exchange,
    Message,
    Request,
    Response,
    Tokens,
    Tool,
    block_from_dict,
    block_to_dict,
    response_from_dict,
    response_to_dict,
)

MANIFEST_VERSION = 1
# The fields records.exchange_to_dict keeps besides the request and the response.
_META_FIELDS = [f.name for f in fields(Exchange)
                if f.name not in ("request", "response", "raw_request", "raw_response")]


def message_blob(message: Message) -> bytes:
    content = [block_to_dict(b) for b in message.content]
    return canonical_json({"role": message.role, "content": content})


# A system prompt block smaller than this (its canonical JSON, in bytes) is written into the
# manifest itself rather than named as a blob.
INLINE = 256


def system_blob(request: Request) -> bytes:
    """The whole system prompt as one blob's bytes: how it is stored unless in parts
    (system_ref), and what raw request frames are compressed against (segments.request_hint)."""
    return canonical_json([block_to_dict(b) for b in request.system])


def system_ref(request: Request, parent: Request | None,
               keep: Callable[[bytes], str]) -> str | list:
    """How a manifest names a system prompt that is not its parent's; `keep(data)` stores a
    blob and returns its name. It is one blob, unless it differs from the parent's prompt
    only in small blocks: then it is a list, one part a block, a small block itself
    (inline), any other the name of a blob holding it (as a one-block prompt's blob). Claude
    Code (since 2.1.36), talking to api.anthropic.com, starts its system prompt with a block
    `x-anthropic-billing-header: ...; cch=<5 hex digits>;` whose `cch` changes on every call:
    stored whole, every call's prompt was a new 6 KB blob, a row and a name of its own; in
    parts only that small block differs, inline, next to the parent's. A prompt that does
    not change stays one name: a manifest stream that starts over (a segment a call, `serve`
    past its encoders' budget) would pay for inline blocks on every call."""
    blocks = [block_to_dict(b) for b in request.system]
    if parent is None or not _small_change(parent.system, request.system):
        return keep(canonical_json(blocks))
    return [block if len(data := canonical_json([block])) < INLINE else keep(data)
            for block in blocks]


def _small_change(before: list[Block], after: list[Block]) -> bool:
    """Whether `after` is `before` with only small blocks changed."""
    return len(before) == len(after) and all(
        a == b or max(len(canonical_json([block_to_dict(a)])),
                      len(canonical_json([block_to_dict(b)]))) < INLINE
        for a, b in zip(before, after, strict=True))


def system_names(ref: str | list) -> list[str]:
    """The blob names a system reference holds."""
    return [ref] if isinstance(ref, str) else [p for p in ref if isinstance(p, str)]


def system_bytes(ref: str | list, blob: Callable[[str], bytes]) -> bytes:
    """system_blob's bytes rebuilt from a manifest's reference, `blob(name)` reading blobs."""
    if isinstance(ref, str):
        return blob(ref)
    # A part's blob is canonical_json([block]): its block is what lies between the brackets.
    return b"[" + b",".join(blob(p)[1:-1] if isinstance(p, str) else canonical_json(p)
                            for p in ref) + b"]"


def tools_blob(tools: list[Tool]) -> bytes:
    return canonical_json([asdict(t) for t in tools])


def parameters_blob(parameters: dict[str, Any]) -> bytes:
    return canonical_json(parameters)


def parameters_ref(parameters: dict[str, Any], parent: dict[str, Any] | None,
                   parent_ref: str | list | None, keep: Callable[[bytes], str],
                   fresh: bool = False) -> str | list:
    """How a manifest names parameters; `keep(data)` stores a blob and returns its name. Equal
    to their parent's (`parent`, named by `parent_ref`) as canonical bytes, they are named as
    the parent's are. Else they are one blob, unless the parent's reference can carry what
    changed: then `[base, changes]`, the base blob the parent's reference names and the
    changes from it (_changes), inline while under INLINE bytes. Codex over its WebSocket
    sends a new `previous_response_id` and a millisecond clock in `client_metadata` on every
    call: stored whole, its 1.6 KB of parameters were a new blob, a row and a name a call.
    Changes are taken from the base, never chained through another call: reading one needs
    only its base. In a manifest stream that starts over at this exchange (`fresh`), changes
    the parent already made are a blob's name: repeated there, a harness that changes its
    parameters once a user turn (Codex over HTTP, Qwen Code) paid for them on every call of
    `serve`'s rollouts written a segment a call (+2.4% of a generated one's payload)."""
    if parent is not None and parent_ref is not None:
        if not (new := _changes(parent, parameters)):
            return keep(parameters_blob(parameters)) if fresh and not isinstance(
                parent_ref, str) else parent_ref
        base, before = (parent_ref, []) if isinstance(parent_ref, str) else parent_ref
        changes = _then(before, new)
        if len(canonical_json(changes)) < INLINE:
            return [base, changes]
    return keep(parameters_blob(parameters))


def _changes(before: dict[str, Any], after: dict[str, Any], path: tuple = ()) -> list[list]:
    """What makes `after` of `before`: `[path, value]` sets a key (a path of keys through
    nested objects), `[path]` removes one. Values compare as their canonical bytes (in
    Python 1 == 1.0 == True)."""
    out: list[list] = []
    for key in sorted(before.keys() | after.keys()):
        at = [*path, key]
        if key not in after:
            out.append([at])
        elif key not in before:
            out.append([at, after[key]])
        elif isinstance(before[key], dict) and isinstance(after[key], dict):
            out += _changes(before[key], after[key], tuple(at))
        elif canonical_json(before[key]) != canonical_json(after[key]):
            out.append([at, after[key]])
    return out


def _then(first: list[list], then: list[list]) -> list[list]:
    """Changes doing `first`, then `then`: one of `first` at or under a path `then` sets or
    removes is undone by it, so dropped (Codex's two per-call values stay two changes)."""
    paths = [change[0] for change in then]
    return [c for c in first if not any(c[0][:len(p)] == p for p in paths)] + then


def _changed(base: dict[str, Any], changes: list[list]) -> dict[str, Any]:
    """`base` with `changes` made, in a copy (base is shared: Decoded)."""
    out = dict(base)
    for change in changes:
        *path, key = change[0]
        at = out
        for step in path:
            at[step] = dict(at[step])
            at = at[step]
        if len(change) == 2:
            at[key] = change[1]
        else:  # the base may lack it: a key a call added and a later one removed
            at.pop(key, None)
    return out


def parameters_name(ref: str | list) -> str:
    """The blob name a parameters reference holds."""
    return ref if isinstance(ref, str) else ref[0]


def parameters_bytes(ref: str | list, blob: Callable[[str], bytes]) -> bytes:
    """parameters_blob's bytes rebuilt from a manifest's reference, `blob(name)` reading
    blobs."""
    if isinstance(ref, str):
        return blob(ref)
    return canonical_json(_changed(orjson.loads(blob(ref[0])), ref[1]))


def answer_blob(response: Response) -> bytes:
    """The response's content as the assistant message the next request will repeat."""
    return message_blob(Message(role="assistant", content=response.content))


# --- manifests --------------------------------------------------------------------------


def manifest(
    exchange: Exchange,
    request: dict[str, Any] | None,
    answer: str | None,
    raw_parent: int | None,
    tokens: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest of `exchange`; `request` holds its blob names and message derivation
    (see request_refs), `answer` names its response content blob, `tokens` its token blob
    and that blob's parent (store.tokens)."""
    # exchange_to_dict would turn the whole request into dicts only for us to drop them.
    meta = {f: getattr(exchange, f) for f in _META_FIELDS}
    response = None
    if exchange.response is not None:
        # The token lists are in their blob: not copied into the manifest first.
        plain = dataclasses.replace(exchange.response, tokens=None) if tokens else \
            exchange.response
        response = response_to_dict(plain, content=answer)
        if tokens:
            response["tokens"] = tokens
    return {"v": MANIFEST_VERSION, "exchange": meta, "request": request,
            "response": response, "raw_parent": raw_parent}


def request_refs(
    request: Request, names: Mapping[str, str], parent: int | None, keep: int,
    append: list[str],
) -> dict[str, Any]:
    """The request part of a manifest. `names` has the system reference (system_ref), and
    the tools and parameters blob names, under those keys."""
    return {"model": request.model, "stream": request.stream, "system": names["system"],
            "tools": names["tools"], "parameters": names["parameters"], "parent": parent,
            "keep": keep, "append": append}


def parent(found: dict[str, Any]) -> int | None:
    """The exchange a manifest derives from, if any: its messages, raw bodies and tokens
    derive from that one exchange or from none (store.segments)."""
    refs = found["request"]
    return refs["parent"] if refs else None


def message_names(manifests: Mapping[int, dict[str, Any]], seq: int,
                  memo: dict[int, list[str]]) -> list[str]:
    """The blob names of exchange `seq`'s messages, following parents through `manifests`
    (every manifest its parent chain reaches). `memo` carries lists already built."""
    chain = []
    at: int | None = seq
    while at is not None and at not in memo:
        chain.append(at)
        at = parent(manifests[at])
    for s in reversed(chain):
        refs = manifests[s]["request"]
        if refs is None:
            memo[s] = []
        elif refs["parent"] is None:
            memo[s] = list(refs["append"])
        else:
            memo[s] = memo[refs["parent"]][: refs["keep"]] + refs["append"]
    return memo[seq]


class Decoded:
    """Blob records decoded once per reader, by blob name.

    Reading a session rebuilds every exchange's whole context, and each request repeats the
    messages, system prompt, tools and parameters of the one before. Decoding them once and
    sharing the objects makes reading a session linear in its content instead of quadratic.
    Every exchange gets its own Request, Response and their lists; the messages, blocks,
    tools and parameter values in them are shared with the other exchanges of the session
    that repeat them, so readers must not change them in place (copy, e.g. with
    dataclasses.replace, to change one)."""

    def __init__(self, blob: Callable[[str], bytes]) -> None:
        self._blob = blob
        # kind -> blob name -> record value. By kind too: `[]` is both an empty system
        # prompt and an empty tool list.
        self._done: dict[str, dict[str, Any]] = defaultdict(dict)
        self._messages = self._done["message"]

    def messages(self, blobs: list[str]) -> list[Message]:
        done = self._messages  # a request repeats most of its messages: look them up fast
        return [done.get(b) or self.message(b) for b in blobs]

    def message(self, blob: str) -> Message:
        return self._get("message", blob, _message_of)

    def blocks(self, blob: str) -> list[Block]:
        return self._get("blocks", blob, lambda d: [block_from_dict(b) for b in d])

    def system(self, ref: str | list) -> list[Block]:
        """A system prompt from its reference (system_ref)."""
        if isinstance(ref, str):
            return list(self.blocks(ref))
        return [b for p in ref for b in (self.blocks(p) if isinstance(p, str) else
                                         [block_from_dict(p)])]

    def tools(self, blob: str) -> list[Tool]:
        return self._get("tools", blob, lambda d: [Tool(**t) for t in d])

    def parameters(self, ref: str | list) -> dict[str, Any]:
        """Parameters from their reference (parameters_ref)."""
        if isinstance(ref, str):
            return self._get("parameters", ref, lambda d: d)
        return _changed(self._get("parameters", ref[0], lambda d: d), ref[1])

    def _get(self, kind: str, blob: str, make: Callable[[Any], Any]) -> Any:
        done = self._done[kind]
        if blob not in done:
            done[blob] = make(orjson.loads(self._blob(blob)))
        return done[blob]


def _message_of(data: dict[str, Any]) -> Message:
    return Message(role=data["role"], content=[block_from_dict(b) for b in data["content"]])


def rebuild(
    found: dict[str, Any], messages: list[str], decoded: Decoded,
    raw_request: bytes = b"", raw_response: bytes = b"", tokens: Tokens | None = None,
) -> Exchange:
    """The exchange a manifest describes, its content taken from `decoded` (shared, see
    Decoded); `messages` are its message blob names, `tokens` its engine tokens when the
    manifest names a token blob (see token_ref)."""
    refs, response = found["request"], found["response"]
    request = None if refs is None else Request(
        model=refs["model"], stream=refs["stream"],
        system=decoded.system(refs["system"]),
        tools=list(decoded.tools(refs["tools"])),
        parameters=dict(decoded.parameters(refs["parameters"])),
        messages=decoded.messages(messages),
    )
    return Exchange(**found["exchange"], request=request,
                    response=None if response is None else _response(response, decoded, tokens),
                    raw_request=raw_request, raw_response=raw_response)


def _response(fields: dict[str, Any], decoded: Decoded, tokens: Tokens | None) -> Response:
    """The response a manifest describes: its content is the answer blob's blocks (shared)
    in a list of its own."""
    plain = {**fields, "content": []}
    if token_ref(fields):
        del plain["tokens"]
    response = response_from_dict(plain)
    response.content = list(decoded.message(fields["content"]).content)
    if token_ref(fields):
        response.tokens = tokens
    return response


def token_ref(response: dict[str, Any] | None) -> dict[str, Any] | None:
    """{"blob": name, "parent": seq or None} if the response's tokens are in a blob (rows
    written before kept them as lists in the manifest)."""
    found = response and response.get("tokens")
    return found if found and "blob" in found else None


def referenced(found: dict[str, Any]) -> list[str]:
    """Blob names a manifest itself mentions (messages kept from the parent are the
    parent's); what gc keeps alive."""
    names = []
    if found["request"] is not None:
        refs = found["request"]
        names += [*system_names(refs["system"]), refs["tools"],
                  parameters_name(refs["parameters"]),
                  *refs["append"]]
    if found["response"] is not None:
        names.append(found["response"]["content"])
        if ref := token_ref(found["response"]):
            names.append(ref["blob"])
    return names
