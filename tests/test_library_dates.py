"""The period a question across meetings names ("last month", "two weeks ago", "in March", "on Monday"), as the days
it covers, and the question without it (app/library/dates.py)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from app.library.dates import period_in, without_period
from encoders.errors import InputError

NOW = datetime(2026, 12, 6, 19, 0, tzinfo=timezone.utc).timestamp()  # a Sunday


@pytest.mark.parametrize("question, days, asked", [
    ("What did we decide about the venue last month?", "from 2026-11-01 to 2026-11-30", "What did we decide about the venue?"),
    ("What did Wei say two weeks ago?", "from 2026-11-16 to 2026-11-22", "What did Wei say?"),
    ("What was said in the past 10 days about the budget?", "from 2026-11-26 to 2026-12-06", "What was said about the budget?"),
    ("What is still open from last week's stand-up?", "from 2026-11-23 to 2026-11-29", "What is still open from the stand-up?"),
    ("What did we agree on Monday?", "on 2026-11-30", "What did we agree?"),
    ("What did Wei say last Sunday?", "on 2026-11-29", "What did Wei say?"),  # not today, a Sunday
    ("What happened in March?", "from 2026-03-01 to 2026-03-31", "What happened?"),  # this year's March
    ("What did we decide last year about hiring?", "from 2025-01-01 to 2025-12-31", "What did we decide about hiring?"),
    ("Since 2026-11-01, who raised the outage?", "from 2026-11-01 on", "Who raised the outage?"),
    ("What did Amara say yesterday?", "on 2026-12-05", "What did Amara say?"),
    ("What was decided before 2026-11-01?", "until 2026-10-31", "What was decided?"),  # a bound, not the day
    ("What did we say since last week?", "from 2026-11-23 on", "What did we say?"),
    ("Decisions after March?", "from 2026-04-01 on", "Decisions?"),
    ("What did we decide in May, 2025?", "from 2025-05-01 to 2025-05-31", "What did we decide?"),
    ("İstanbul office: what did we decide last month?", "from 2026-11-01 to 2026-11-30",
     "İstanbul office: what did we decide?"),  # a letter that lower-casing lengthens moves nothing
])
def test_a_period_is_the_days_it_covers_and_leaves_the_question(question, days, asked):
    period = period_in(question, NOW)
    assert period is not None and period.describe() == days
    assert without_period(question, period) == asked


@pytest.mark.parametrize("question", [
    "When did Amara first raise the outage?",
    "What did we say about the Monday seminar?",  # a name for a seminar, not a day
    "Who will book the coach?",
    "Who must deliver the report by 2026-12-20?",  # a deadline said in the meeting
    "What happened on the last day of the conference?",  # part of something else
])
def test_a_question_without_a_period_has_none(question):
    assert period_in(question, NOW) is None


def test_a_date_that_does_not_exist_is_said_so():
    with pytest.raises(InputError, match="not a date"):
        period_in("What was decided on 2026-02-30?", NOW)


@pytest.mark.parametrize("question", ["What did we decide 9999 years ago?", "What happened in the last 99999999 days?"])
def test_a_period_past_the_calendar_is_said_so(question):
    with pytest.raises(InputError, match="no such period"):
        period_in(question, NOW)
