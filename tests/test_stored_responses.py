"""store.responses.StoredResponses, the lookup `serve`'s writers use for a Responses chain
that crosses replicas: it finds another writer's record by its answer's id, waits for one
not stored yet, and has its own writer write what it holds before it waits."""

from __future__ import annotations

import threading

from support import make_exchange, make_session

from forge_record.store import open_store
from forge_record.store.items import AddExchange, AddSession
from forge_record.store.responses import StoredResponses

SESSION = make_session().id


def responses_call(seq: int):
    ex = make_exchange(seq, dialect="openai.responses", url="ws://127.0.0.1/v1/responses")
    ex.response.id = f"resp_{seq}"
    return ex


def store_calls(url: str, *seqs: int, session: bool = False) -> None:
    with open_store(url) as store:
        store.write(([AddSession(make_session())] if session else [])
                    + [AddExchange(SESSION, responses_call(seq)) for seq in seqs])


def look_up(url: str, response_id: str, wait: float, before_wait) -> object:
    lookup = StoredResponses(url, wait)
    lookup.before_wait = before_wait
    try:
        return lookup(SESSION, response_id)
    finally:
        lookup.close()


def test_a_stored_response_is_found_without_waiting(store_url):
    store_calls(store_url, 1, 2, 3, session=True)
    asked = []
    found = look_up(store_url, "resp_2", 5.0, lambda: asked.append(1))
    assert (found.seq, found.response.id, asked) == (2, "resp_2", [])


def test_a_lookup_that_must_wait_has_its_own_writer_write_first_then_finds_it(store_url):
    """Another writer may be holding the previous response only because it waits for one of
    ours: before_wait is called once, then the record another writer stores is found."""
    store_calls(store_url, 1, session=True)
    asked = []

    def before_wait() -> None:
        asked.append(1)
        threading.Timer(0.3, store_calls, (store_url, 2)).start()  # the other writer

    found = look_up(store_url, "resp_2", 5.0, before_wait)
    assert (found.seq, asked) == (2, [1])


def test_a_response_never_stored_is_none_after_the_wait(store_url):
    store_calls(store_url, 1, session=True)
    asked = []
    assert look_up(store_url, "resp_9", 0.6, lambda: asked.append(1)) is None
    assert asked == [1]
