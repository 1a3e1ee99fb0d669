"""The review cache's contract as properties: a key is reviewed again exactly when its
last answer is ``ttl`` old (a model of the rule, checked on random request sequences),
the cache never holds more than its bound, a failed review is never cached, and
concurrent misses for one key make one review."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.base.errors import ServerError
from nodeagent.serving.auth import ReviewCache

TTL = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@given(
    st.lists(
        st.tuples(st.sampled_from("abcde"), st.floats(min_value=0.0, max_value=6.0)),
        max_size=60,
    )
)
def test_a_key_is_reviewed_again_exactly_when_its_answer_expired(
    requests: list[tuple[str, float]],
) -> None:
    clock = Clock()
    cache: ReviewCache[str, str] = ReviewCache(TTL, clock=clock)
    reviewed: list[str] = []
    last: dict[str, float] = {}
    expected = 0
    for key, advance in requests:
        clock.now += advance
        if key not in last or clock.now >= last[key] + TTL:
            expected += 1
            last[key] = clock.now

        def review(k: str = key) -> str:
            reviewed.append(k)
            return f"answer for {k}"

        assert cache.get(key, review) == f"answer for {key}"
    assert len(reviewed) == expected == cache.reviews


def doubled(key: int) -> Callable[[], int]:
    return lambda: key * 2


@given(st.lists(st.integers(min_value=0, max_value=50), max_size=200))
def test_the_cache_stays_within_its_bound_and_keeps_the_recent(keys: list[int]) -> None:
    cache: ReviewCache[int, int] = ReviewCache(TTL, clock=Clock(), max_entries=8)
    for key in keys:
        cache.get(key, doubled(key))
        assert len(cache._entries) <= 8
    if keys:  # the last key asked for is answered without a review
        before = cache.reviews
        assert cache.get(keys[-1], lambda: -1) == keys[-1] * 2
        assert cache.reviews == before


def test_a_failed_review_is_not_cached() -> None:
    cache: ReviewCache[str, str] = ReviewCache(TTL, clock=Clock())

    def unreachable() -> str:
        raise ServerError("API down")

    for _ in range(3):
        with pytest.raises(ServerError):
            cache.get("token", unreachable)
    assert cache.get("token", lambda: "user") == "user"
    assert cache.reviews == 4


def test_concurrent_callers_make_one_review() -> None:
    cache: ReviewCache[str, str] = ReviewCache(TTL, clock=Clock())
    entered = threading.Event()
    release = threading.Event()
    answers: list[str] = []

    def slow_review() -> str:
        entered.set()
        assert release.wait(10)
        return "user"

    first = threading.Thread(target=lambda: answers.append(cache.get("t", slow_review)))
    first.start()
    assert entered.wait(10)
    waiters = [
        threading.Thread(target=lambda: answers.append(cache.get("t", slow_review)))
        for _ in range(8)
    ]
    for waiter in waiters:
        waiter.start()
    release.set()
    for thread in [first, *waiters]:
        thread.join(10)
    assert answers == ["user"] * 9
    assert cache.reviews == 1
