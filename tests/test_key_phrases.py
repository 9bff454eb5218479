"""What a meeting keeps talking about: the parser's noun phrases, counted and weighed by how rare their words are in
English (wordfreq), with spoken hesitations and everyday nouns outweighed (app/answering/key_phrases.py)."""

from __future__ import annotations

import pytest

from app.answering.key_phrases import key_phrases, rarity
from app.answering.question_parse import parser
from app.text.textnorm import is_hesitation

pytestmark = pytest.mark.skipif(parser() is None, reason="spaCy's English pipeline is not installed")

LINES = [
    "Ehm, so the thing is, the glacier survey needs the drone batteries charged.",
    "Uhm, yes, the drone batteries are in the van, that is one thing.",
    "The other thing: the glacier survey starts at the moraine, people meet at the hut.",
    "Hm, the people from the lab bring the drone batteries, and the thing with the permit is done.",
    "Ehm, the glacier survey, ehm, ends at the moraine, at the hut, with the people of the lab.",
    "One more thing, the way back is by the pass, the same way as last year.",
]


def test_what_a_meeting_keeps_talking_about_outweighs_everyday_words():
    found = key_phrases(LINES, k=4)
    said = [p.text for p in found]
    assert said[:2] == ["glacier survey", "drone batteries"] or said[:2] == ["drone batteries", "glacier survey"]
    assert "thing" not in said and "people" not in said and "way" not in said  # said more often, but everyday
    assert not any(is_hesitation(w) for p in said for w in p.split())  # "Ehm" is parsed as a noun
    assert all(p.count >= 2 for p in found) and [p.weight for p in found] == sorted((p.weight for p in found), reverse=True)


def test_a_phrase_inside_a_heavier_one_is_not_listed_again():
    lines = ["The training data is late.", "The training data comes next week.", "We need the training data.",
             "The data of the training is fine.", "Data, data, data."]
    said = [p.text for p in key_phrases(lines)]
    assert said.count("training data") == 1 and "data" not in said


def test_rarer_words_weigh_more():
    assert rarity(["moraine"]) > rarity(["glacier"]) > rarity(["thing"]) > 0
    assert is_hesitation("Uhm,") and is_hesitation("mm-hmm") and is_hesitation("Ehm")
    assert not is_hesitation("hut") and not is_hesitation("her") and not is_hesitation("mum")
    assert not is_hesitation("HMM")  # the hidden Markov model
