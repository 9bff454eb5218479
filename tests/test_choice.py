"""app/answering/choice.py (issue 49 F5): a question that offers options is answered with the option the meeting settles on,
read from how the line puts them, never with "Yes." and never with the option it ranks lower."""

from __future__ import annotations

import pytest

from app.answering.answers import AnswerFinder
from app.answering.choice import alternatives, choose
from app.text.transcript import Transcript, Turn


@pytest.mark.parametrize("question, options", [
    ("Which colour is better, blue or green?", ["blue", "green"]),
    ("Are we going with vendor A or vendor B?", ["vendor A", "vendor B"]),
    ("Should the launch be in May or June?", ["May", "June"]),
    ("Is the contract signed, or not?", None),
    ("What did they decide about the launch?", None),
    ("What should be ready 1 or 2 weeks before the trip?", None),
    ("Did they choose Postgres or MySQL?", ["Postgres", "MySQL"]),
])
def test_the_options_come_from_the_questions_or(question, options):
    assert alternatives(question) == options


@pytest.mark.parametrize("said, picked", [
    ("I think blue is better than green for the landing page.", "blue"),
    ("Green is worse than blue, honestly.", "blue"),
    ("We prefer green over blue.", "green"),
    ("Let's go with green then.", "green"),
    ("Blue and green both work for me.", None),
    ("Nobody mentioned colours.", None),
])
def test_a_line_settles_the_choice_by_how_it_puts_the_options(said, picked):
    assert choose(["blue", "green"], said) == picked


def test_a_choice_is_answered_with_the_option_and_its_line():
    meeting = Transcript([Turn("Ana", "Good morning, let's look at the designs.", 0.0, 3.0),
                          Turn("Ben", "I think blue is better than green for the landing page.", 3.0, 7.0),
                          Turn("Ana", "The contract is not approved yet, legal still has questions.", 7.0, 11.0)])
    answer = AnswerFinder(meeting).answer("Which colour is better, blue or green?")
    assert answer.text == "Blue." and answer.citations[0].speaker == "Ben"
    assert AnswerFinder(meeting).answer("Did they pick blue or green?").text == "Blue."


def test_an_option_named_in_passing_settles_nothing():
    meeting = Transcript([Turn("Ana", "May I add something about the budget?", 0.0, 3.0),
                          Turn("Ben", "Sure, the budget is fine.", 3.0, 5.0)])
    answer = AnswerFinder(meeting).answer("Should the launch be in May or June?")
    assert answer.text != "May."
