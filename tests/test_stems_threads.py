"""Stemming from many threads at once (bot rooms answer questions in parallel): a snowball stemmer keeps
the word it works on in the instance, and one shared instance raised IndexError in a bot load test."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from app.answering.retrieval import stems

TEXT = ("The pilot will cost twelve thousand dollars and the payment company did not sign the contract, "
        "so we cannot test real payments; the customers complained about the onboarding flows ") * 10


def test_stems_are_the_same_from_many_threads():
    expected = stems(TEXT)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: stems(TEXT), range(200)))
    assert all(r == expected for r in results)
