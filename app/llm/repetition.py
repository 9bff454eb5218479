"""No phrase generated twice: greedy decoding of a small model falls into loops ("the one that was on the Sony's,
the one that was on the Sony's, ..."; issue 49). A token that would complete an n-gram the answer already holds is
never chosen. Only the generated tokens count: an answer copies the meeting's words, so counting the prompt too (as
transformers' NoRepeatNGramLogitsProcessor does) would stop it quoting what was said."""

from __future__ import annotations

from typing import Sequence

NGRAM = 4  # tokens: a repeated 4-token run is a loop, not an answer


def banned_tokens(generated: Sequence[int], n: int = NGRAM) -> set[int]:
    """Tokens that would make the last ``n - 1`` generated tokens plus one an n-gram already generated."""
    if n < 1 or len(generated) < n:
        return set()
    tail = tuple(generated[len(generated) - n + 1:])
    return {generated[i + n - 1] for i in range(len(generated) - n + 1)
            if tuple(generated[i:i + n - 1]) == tail}


class NoRepeatInAnswer:
    """A transformers LogitsProcessor: ``banned_tokens`` over the tokens after the first ``prompt_tokens``."""

    def __init__(self, prompt_tokens: int, n: int = NGRAM) -> None:
        self.prompt_tokens, self.n = prompt_tokens, n

    def __call__(self, input_ids, scores):
        for row in range(input_ids.shape[0]):
            banned = banned_tokens(input_ids[row, self.prompt_tokens:].tolist(), self.n)
            if banned:
                scores[row, list(banned)] = float("-inf")
        return scores
