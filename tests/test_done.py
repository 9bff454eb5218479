"""A later sentence that reports a task done, and a question that asks for the work still open, read by the parser
(app/answering/done.py)."""

from __future__ import annotations

import pytest

from app.answering.done import asked_about, asks_what_is_open, reports_done
from app.answering.question_parse import parser

pytestmark = pytest.mark.skipif(parser() is None, reason="spaCy's English pipeline is not installed")


@pytest.mark.parametrize("task, said, done", [
    ("send the contract", "I sent the contract on Monday.", True),
    ("renew the certificate and add an expiry alert", "The certificate has been renewed.", True),
    ("prepare the slides", "The slides are ready.", True),
    ("book the coach for forty people", "I booked the coach yesterday.", True),
    ("update the budget sheet", "The budget sheet is done.", True),
    ("send the contract", "I will send the contract.", False),  # ahead, not done
    ("send the contract", "The contract has not been sent.", False),
    ("send the contract", "Did you send the contract?", False),
    ("update the budget sheet", "We talked about the budget sheet.", False),
    ("write the report", "The report isn't finished yet.", False),
    ("fix the login bug", "We finished the slides.", False),  # done, but another thing
    ("send the contract to Olek", "I sent the invoice to Olek.", False),
    ("send the contract", "The contract will be ready next week.", False),  # ahead
    ("send the contract", "We need the contract ready by Friday.", False),  # wanted
    ("send the contract", "We did discuss the contract at length.", False),  # "did" only helps
    ("send the contract", "We are close to sending the contract.", False),
    ("prepare the slides", "The slides should be done by Friday.", False),
    ("prepare the slides", "If the slides are finished, tell me.", False),  # a condition
    ("send the contract", "We are going to send the contract.", False),
])
def test_a_sentence_reports_a_task_done(task, said, done):
    assert reports_done(task, said) is done


@pytest.mark.parametrize("question, asks", [
    ("What is still open from the stand-up?", True),
    ("What's still pending?", True),
    ("Which to-dos haven't been closed?", True),
    ("Anything outstanding from last week?", True),
    ("What is left to do?", True),
    ("Which action items are not done yet?", True),
    ("Is the office open on Fridays?", False),  # whether a thing is open
    ("What was left out of the report?", False),
    ("Which tasks did Olek finish?", False),
    ("What did we decide about the open-source license?", False),
    ("Who left early?", False),
    ("What time does the office open on Fridays?", False),  # the office opens
    ("Which doors were left open?", False),
])
def test_a_question_asking_for_the_work_still_open(question, asks):
    assert asks_what_is_open(question) is asks


def test_open_work_on_a_topic():
    assert asked_about("What is open about the budget?") == {"budget"}
    assert asked_about("What is still open?") == set()
