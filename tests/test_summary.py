"""The extractive meeting summary (app/answering/summary.py) and the QMSum bench's split and scoring; no LLM."""

from __future__ import annotations

import json
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from app.text.sentences import split_sentences as sentences
from app.answering.summary import SummarySettings, build_summary, render_markdown, segment_topics
from app.text.transcript import Transcript, Turn, load_transcript

ROOT = Path(__file__).resolve().parent.parent
STANDUP = ROOT / "samples" / "standup"

BUDGET = [
    ("Ann", "Let us start with the budget for the marketing campaign this quarter."),
    ("Ben", "The marketing budget is forty thousand dollars and the campaign spend so far is twelve thousand."),
    ("Ann", "The campaign spend on online advertising is higher than the budget planned for advertising."),
    ("Ben", "Online advertising costs rose, so the campaign budget needs more money for advertising."),
    ("Ann", "Which advertising channels give the campaign the best return on the marketing budget?"),
    ("Ben", "Search advertising gives the best return, social advertising the worst return for the campaign."),
    ("Ann", "Then the campaign budget moves money from social advertising to search advertising."),
    ("Ben", "We decided to move five thousand dollars of the campaign budget to search advertising."),
]
HIRING = [
    ("Ann", "Next, the hiring plan for the engineering team and the open developer positions."),
    ("Ben", "Engineering has three open developer positions and two interviews with candidates next week."),
    ("Ann", "The developer candidates need a coding interview and a system design interview with engineering."),
    ("Ben", "Carol will run the coding interviews for the developer candidates in engineering."),
    ("Ann", "Who approves the salary offers for the new engineering hires?"),
    ("Ben", "Senior developer candidates expect more pay than we planned last year."),
    ("Ann", "The hiring plan keeps three developer positions and engineering interviews continue."),
    ("Ben", "I will send the interview schedule for the developer candidates by Friday."),
]


def _meeting(turns: list[tuple[str, str]]) -> Transcript:
    return Transcript(turns=[Turn(who, text, 6.0 * i, 6.0 * i + 5) for i, (who, text) in enumerate(turns)], source="t")


@pytest.fixture
def two_topics() -> Transcript:
    return _meeting(BUDGET + HIRING)


@pytest.fixture(scope="module")
def bench():
    for needed in ("rouge_score", "bm25s", "sumy"):  # the bench's own dependencies
        pytest.importorskip(needed)
    spec = importlib.util.spec_from_file_location("qmsum_summary", ROOT / "bench" / "qmsum_summary.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_segmentation_splits_two_topics(two_topics):
    topics = segment_topics(two_topics, SummarySettings(min_topic_words=40, window_words=40))
    assert len(topics) == 2
    assert topics[0] == (0, len(BUDGET) - 1) and topics[1] == (len(BUDGET), len(BUDGET) + len(HIRING) - 1)


def test_short_meeting_is_one_topic(two_topics):
    assert segment_topics(Transcript(turns=two_topics.turns[:3])) == [(0, 2)]


def test_summary_sentences_come_from_the_transcript(two_topics):
    summary = build_summary(two_topics, "The meeting was about budget and hiring.",
                            settings=SummarySettings(min_topic_words=40, window_words=40))
    assert len(summary.topics) == 2
    for topic in summary.topics:
        assert 1 <= len(topic.sentences) <= 4 and topic.title
        for s in topic.sentences:
            assert s.text in two_topics.turns[s.turn_index].text and topic.first_turn <= s.turn_index <= topic.last_turn
    assert summary.summary.startswith("The meeting was about budget and hiring.")
    assert summary.topics[0].text in summary.summary and summary.topics[1].text in summary.summary
    # Open questions: the salary question is never answered; the channels question is.
    assert [q.text for q in summary.open_questions] == ["Who approves the salary offers for the new engineering hires?"]
    markdown = render_markdown(summary)
    assert "## Open questions" in markdown and "## Decisions" in markdown and "| Ben | send the interview schedule" in markdown


def test_decisions_and_action_items_are_listed_once():
    standup = load_transcript(STANDUP / "reference.json")
    twice = Transcript(turns=standup.turns * 2, source="long")
    summary = build_summary(twice)
    assert len(summary.decisions) == 2 and len(summary.action_items) == 3
    assert len({f.text for f in summary.key_facts}) == len(summary.key_facts)
    listed = {d.text for d in summary.decisions} | {f.text for f in summary.key_facts}
    assert not any(s.text in listed for t in summary.topics for s in t.sentences)  # no sentence listed twice
    assert render_markdown(summary).count("send the new contract") == 1
    assert summary.to_dict()["topics"][0]["sentences"]


def test_sentences_join_across_cut_turns():
    t = Transcript(turns=[Turn("A", "The pilot will cost", 0.0, 1.0), Turn("A", "twelve thousand dollars.", 3.5, 5.0),
                          Turn("B", "It starts on Monday,", 6.0, 7.0), Turn("A", "and runs four weeks.", 7.0, 8.0),
                          Turn("A", "Good", 9.0, 9.5), Turn("B", "Thanks.", 10.0, 10.5)])
    assert [(s.text, s.speaker, s.turn_index) for s in sentences(t)] == [
        ("The pilot will cost twelve thousand dollars.", "A", 0),
        ("It starts on Monday,", "B", 2),
        ("and runs four weeks.", "A", 3),  # another speaker: not joined
        ("Good", "A", 4),
        ("Thanks.", "B", 5),
    ]


def test_qmsum_split_is_deterministic_and_disjoint(bench):
    names = [f"M{i:03d}.json" for i in range(200)]
    first = {n: bench.split_of(n) for n in names}
    assert first == {n: bench.split_of(n) for n in names}
    tuning = {n for n, s in first.items() if s == "tuning"}
    held = {n for n, s in first.items() if s == "held-out"}
    assert tuning and held and not tuning & held and tuning | held == set(names)
    assert 0.45 < len(tuning) / len(names) < 0.75


def test_rouge_prefers_the_perfect_summary_to_lead_k(bench, two_topics):
    reference = "The campaign budget moves money to search advertising. Carol runs the coding interviews."
    meeting = bench.Meeting("t.json", two_topics, sentences(two_topics), [])
    perfect = bench.rouge(reference, reference)
    lead = bench.rouge(bench.lead(meeting, 14), reference)
    assert perfect["rougeLsum"] == pytest.approx(100.0) and perfect["rouge1"] == pytest.approx(100.0)
    for metric in bench.METRICS:
        assert perfect[metric] > lead[metric]


def test_bootstrap_pairs_the_queries_across_methods(bench):
    """A method one point behind on every query is one point behind in every resample (paired), while the means'
    own intervals overlap: an unpaired resample would give the difference an interval of several points."""
    rng = np.random.default_rng(1)
    ours = rng.uniform(10, 40, 60)
    rows = {"minutia": [("specific", {"rougeLsum": float(v)}) for v in ours],
            "lead-k": [("specific", {"rougeLsum": float(v - 1)}) for v in ours]}
    got = bench.bootstrap(rows, draws=2000)
    assert got["minutia minus"]["lead-k"] == pytest.approx([1.0, 1.0, 1.0])
    low, high = got["mean"]["minutia"]
    assert low < ours.mean() < high and high - low > 2
    assert got["mean"]["lead-k"] == pytest.approx([low - 1, high - 1], abs=0.011)


@pytest.mark.parametrize("said, speaker, minutes", [
    ("I think we should go with the rubber case.", "Marketing", "Marketing thought the group should go with the rubber case."),
    ("I'm not sure we've got the budget.", "Ann", "Ann was not sure the group had got the budget."),
    ("We'll need my notes and our slides.", "Ann", "The group would need Ann's notes and the group's slides."),
    ("I don't know if we can do it, let's ask.", "B", "B didn't know if the group could do it, the group should ask."),
    ("The L_C_D_s are gonna cost us more.", "Industrial Designer", "The LCDs were going to cost the group more."),
    ("If we agree on plan B, I really like it, the w window.", "Grad A", "If the group agreed on plan B, Grad A liked it, the window."),
    ("Don't press the red button.", "Ann", "Don't press the red button."),  # a command, not a report
    ("Do we need it? Can't we do it cheaper?", "Ann", "Do the group need it? Can't the group do it cheaper?"),
    ("World War I ended in 1918.", "Ann", "World War I ended in 1918."),
    ("We have 3 options: a, b or c. It weighs 200 g.", "Ann", "The group had 3 options: a, b or c. It weighs 200 g."),
    ("I'd seen it and we'd already decided, I'd like more.", "Ann", "Ann had seen it and the group had already decided, Ann would like more."),
    ("We just need 5 units.", "Ann", "The group just needed 5 units."),  # "just" may mean "only": it stays
    ("My notes.", "A\\B", "A\\B's notes."),  # a label is not a regex template
    ("US sales are up. We're done.", "Mr. Ian Blackford (Ross, Skye and Lochaber, SNP)", "US sales were up. The group was done."),
    ("It's late and the remote can't be yellow.", "PM", "It was late and the remote couldn't be yellow."),
    ("I agree with Bob.", "Mr. Ian Blackford (Ross, Skye and Lochaber, SNP)", "Mr. Ian Blackford agreed with Bob."),
])
def test_a_said_sentence_becomes_a_line_of_minutes(said, speaker, minutes):
    from app.answering.reported import reported

    assert reported(said, speaker) == minutes


def test_a_summary_about_a_topic_comes_from_that_part_of_the_meeting(two_topics):
    from app.answering.focused import FocusedSummarizer

    summarizer = FocusedSummarizer(two_topics)
    hiring = summarizer.about("the developer interviews", words=40)
    assert hiring is not None and hiring.sentences
    assert all(s.turn_index >= len(BUDGET) for s in hiring.sentences)  # nothing from the budget half
    assert [s.turn_index for s in hiring.sentences] == sorted(s.turn_index for s in hiring.sentences)
    assert len(hiring.text.split()) <= 40 + max(len(s.text.split()) for s in hiring.sentences)  # the budget holds
    assert "Ben would send the interview schedule" in hiring.text or "Carol would run" in hiring.text
    budget = summarizer.about("advertising budget", words=40)
    assert all(s.turn_index < len(BUDGET) for s in budget.sentences)
    assert summarizer.about("the quantum computer") is None


CHARGING = [
    ("Ann", "The battery of the remote should last a year."),
    ("Ben", "A charger would help; it sits by the television."),
    ("Ann", "The charger costs two euros, the cable one more."),
    ("Ben", "Users forget things, so the charger must look nice."),
    ("Ann", "Then a charger is in, with a blue light."),
    ("Ben", "Its light blinks while the charger works."),
    ("Ann", "A charger made of recycled plastic suits the company line."),
    ("Ben", "The charger goes behind the television, out of sight."),
    ("Ann", "So the charger, its cable and the light are settled."),
]


def test_a_query_borrows_the_words_its_passage_uses(two_topics):
    """Pseudo-relevance feedback: "battery" is said once, at the start of a passage that goes on about the charger;
    the summary about it follows the passage past the windows that hold the word."""
    from dataclasses import replace

    from app.answering.focused import FocusedSummarizer, FocusSettings
    from app.answering.summary import content_words

    meeting = _meeting(BUDGET + CHARGING + HIRING + BUDGET)  # enough windows for feedback from three of them
    summarizer = FocusedSummarizer(meeting)
    terms = content_words("battery")
    scores = summarizer._window_index.get_scores(terms)
    assert summarizer.feedback_terms(terms, scores)[:1] == ["charger"]  # said most in the windows with "battery"
    past_the_word = len(BUDGET) + 5  # the last window that holds "battery" ends at the passage's fifth turn
    with_feedback = summarizer.about("battery", words=80).sentences
    assert any(s.turn_index >= past_the_word for s in with_feedback)
    no_feedback = FocusedSummarizer(meeting, settings=replace(FocusSettings(), feedback_terms=0))
    assert all(s.turn_index < past_the_word for s in no_feedback.about("battery", words=80).sentences)

@pytest.mark.parametrize("query, line", [
    ("Summarize the discussion about industrial components.", "On industrial components:"),
    ("Could you please summarize what was discussed about the launch?", "On the launch:"),
    ("What did Industrial Designer think of the scroll wheel?", "Industrial Designer on the scroll wheel:"),
    ("Hey, what did Carol say about the payment company?", "Carol on the payment company:"),
    ("What did the group discuss about the budget?", "On the budget:"),
    ("What was the discussion about the buttons?", "On the buttons:"),
    ("Recap: the marketing plan", "On the marketing plan:"),
    ("Tell me about the launch date", "On the launch date:"),
    ("Why did the group disagree with the Project Manager", "Why did the group disagree with the Project Manager?"),
    ("Summarize the meeting", ""),
    ("Recap", ""),
])
def test_a_summary_opens_with_what_it_covers(query, line):
    from app.answering.focused import topic_line

    assert topic_line(query) == line


def test_asked_for_a_summary_the_answer_is_minutes_and_cites_its_lines(two_topics):
    from app.answering.answers import NOT_IN_MEETING, AnswerFinder

    finder = AnswerFinder(two_topics)
    about = finder.answer("Summarize the discussion about the developer interviews.")
    assert about.kind == "summary" and about.citations
    assert all(c.turn_index >= len(BUDGET) for c in about.citations)
    assert "I will" not in about.text and "will run" not in about.text
    assert "Carol would run the coding interviews" in about.text or "Ben would send the interview schedule" in about.text
    assert about.text.startswith("On the developer interviews: ")  # what it covers, then the minutes
    assert finder.answer("What did Carol think of the interviews?").text.startswith("Carol on the interviews: ")
    whole = finder.answer("Can you give us a brief summary of the meeting?")
    assert whole.kind == "summary"
    assert "The group decided to move five thousand dollars" in whole.text  # the decision is in it
    assert {c.turn_index < len(BUDGET) for c in whole.citations} == {True, False}  # both topics
    assert finder.answer("Summarize the discussion about the office move.").text == NOT_IN_MEETING


def test_topic_segmentation_is_scored_on_the_meetings_given(bench, tmp_path):
    """``--data DIR`` (issue 49): the gold topics come from the meetings in DIR, not from a fixed folder."""
    lines = [{"speaker": "A" if i % 2 else "B", "content": text} for i, text in enumerate(
        [f"the budget moves {i} dollars to search ads ." for i in range(8)]
        + [f"carol runs interview number {i} on monday ." for i in range(8)])]
    meeting = {"meeting_transcripts": lines, "general_query_list": [], "specific_query_list": [],
               "topic_list": [{"topic": "budget", "relevant_text_span": [["0", "7"]]},
                              {"topic": "hiring", "relevant_text_span": [["8", "15"]]}]}
    (tmp_path / "elsewhere.json").write_text(json.dumps(meeting))
    meetings = bench.load_meetings(tmp_path)
    assert meetings[0].topic_starts == [0, 8]
    pk = bench.segmentation_pk(meetings)
    assert 0.0 <= pk <= 1.0


def test_a_question_put_to_a_forgotten_speaker_is_not_called_open():
    """After a forget, the reply of the speaker forgotten is gone: the question it answered is not open, it is
    unknown, so the summary does not list it (the speakers' names come from the stand-up's own lines)."""
    standup = load_transcript(STANDUP / "reference.json")
    without_carol = Transcript(turns=[t for t in standup.turns if t.speaker != "Carol"], source="standup")
    assert not build_summary(standup).open_questions  # with her replies every question is answered
    before = [q.text for q in build_summary(without_carol).open_questions]
    assert any("Carol" in q for q in before)  # what the rule alone makes of the gap
    after = build_summary(without_carol, forgotten=("Carol",)).open_questions
    assert not any("Carol" in q.text for q in after)
    assert len(after) == len(before) - sum("Carol" in q for q in before)  # only questions put to her are skipped
