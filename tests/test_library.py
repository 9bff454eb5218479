"""The meeting library (app/library, issue 51): meetings recorded sealed, listed, searched across by word, speaker
and date, and forgotten whole or by speaker; reads and changes audited."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.library.record import forget_speaker, meeting_id, open_library, parse_date, record_meeting, transcript_of
from app.platform.config import load_settings
from app.text.transcript import Transcript, Turn
from encoders.errors import InputError

ROOT = Path(__file__).resolve().parent.parent


def _meeting(source: str, *lines: tuple[str, str], step: float = 5.0) -> Transcript:
    turns = [Turn(speaker, text, i * step, (i + 1) * step) for i, (speaker, text) in enumerate(lines)]
    return Transcript(turns=turns, source=source, duration=len(lines) * step)


PLANNING = _meeting(
    "planning.json",
    ("Ines", "The catering contract for the offsite is signed with Green Fork."),
    ("Tomas", "I will book the coach for forty people by Thursday."),
    ("Ines", "The venue deposit was paid yesterday."),
    ("Tomas", "My phone is 555 0199 if the driver needs it."),
)
REVIEW_LINES = (
    ("Priya", "The outage last week came from the expired certificate."),
    ("Olek", "I will renew the certificate and add an expiry alert."),
    ("Priya", "The coach company sent the invoice for the offsite."),
)
REVIEW = _meeting("review.json", *REVIEW_LINES)


@pytest.fixture
def library(tmp_path):
    settings = load_settings(overrides={"home": str(tmp_path)})
    lib = open_library(settings, embedder=False)
    yield lib
    lib.close()


def test_meetings_are_recorded_listed_and_searched_across_by_words_speaker_and_date(library):
    first = record_meeting(library, PLANNING, started=parse_date("2026-11-02"))
    second = record_meeting(library, REVIEW, started=parse_date("2026-11-30"))
    assert [m.id for m in library.meetings()] == [second, first]  # newest first
    assert [m.id for m in library.meetings(since=parse_date("2026-11-15"))] == [second]
    assert library.get(first).speakers == ["Ines", "Tomas"]

    found = library.search("coach for the offsite")
    assert {f.meeting for f in found} == {first, second}
    assert "coach company" in found[0].sentence.text  # the one sentence with both words of the query
    assert [f.sentence.speaker for f in library.search("coach", speaker="priya")] == ["Priya"]
    assert [f.meeting for f in library.search("coach", since=parse_date("2026-11-15"))] == [second]
    assert library.search("certificate", meetings=[first]) == []
    with pytest.raises(InputError):
        library.search("the of and")  # nothing to look for


def test_the_same_meeting_read_again_replaces_its_entry(library):
    record_meeting(library, PLANNING)
    record_meeting(library, PLANNING)
    assert len(library.meetings()) == 1 and meeting_id(PLANNING) == library.meetings()[0].id
    assert len(library.search("catering")) == 1


def test_nothing_said_is_in_the_file_in_clear(library):
    record_meeting(library, PLANNING)
    raw = library.path.read_bytes()
    for said in (b"catering", b"Green Fork", b"555 0199", b"Tomas", b"Ines", b"planning"):
        assert said not in raw
    assert oct(library.path.stat().st_mode & 0o777) == "0o600"


def test_another_master_key_opens_nothing(tmp_path, library):
    record_meeting(library, PLANNING)
    other = load_settings(overrides={"home": str(tmp_path / "elsewhere")})
    other.home.mkdir()
    open_library(other, embedder=False).close()  # a library, and a master key, of its own
    (other.home / "library" / "library.db").write_bytes(library.path.read_bytes())
    stranger = open_library(other, embedder=False)
    try:
        with pytest.raises(InputError, match="does not open with this master key"):
            stranger.meetings()
        assert stranger.search("catering") == []  # the blind index is keyed too: the words hash differently
    finally:
        stranger.close()


def test_a_forgotten_meeting_is_gone_with_its_key(library):
    kept, gone = record_meeting(library, REVIEW), record_meeting(library, PLANNING)
    assert library.forget(gone) and not library.forget(gone)
    assert [m.id for m in library.meetings()] == [kept]
    assert library.search("catering") == [] and library.search("coach")[0].meeting == kept
    rows = library.db.execute("SELECT COUNT(*) FROM sentences WHERE meeting = ?", (gone,)).fetchone()[0]
    assert rows == 0 and library.db.execute("SELECT COUNT(*) FROM terms").fetchone()[0] == len(REVIEW.turns)


def test_a_forgotten_speaker_leaves_no_word_in_the_library(library):
    meeting = record_meeting(library, PLANNING)
    assert any("Tomas" in item for item in library.get(meeting).action_items)
    assert forget_speaker(library, meeting, "tomas") == 2
    record = library.get(meeting)
    assert record.speakers == ["Ines"] and not any("Tomas" in i or "coach" in i for i in record.action_items)
    assert "coach" not in record.summary and "555" not in record.summary
    assert all(t.speaker == "Ines" for t in transcript_of(record).turns)
    assert library.search("coach") == [] and library.search("phone", speaker="Tomas") == []
    assert b"555 0199" not in library.path.read_bytes()
    with pytest.raises(InputError, match="has no speaker"):
        forget_speaker(library, meeting, "Tomas")


def test_reads_and_changes_are_audited(library):
    meeting = record_meeting(library, PLANNING)
    library.search("catering")
    library.get(meeting)
    library.forget(meeting)
    records = [json.loads(line) for line in Path(library.audit.path).read_text().splitlines()]
    seen = [(r["op"], r.get("details", {}).get("what")) for r in records if r.get("source") == "library"]
    assert ("write", None) in seen and ("read", "search") in seen and ("read", "meeting") in seen
    assert ("delete", "meeting") in seen


def test_meaning_finds_a_sentence_that_shares_one_word(tmp_path):
    """With the sentence encoder, a paraphrase ranks the sentence it means above one that shares its word."""
    lib = open_library(load_settings(overrides={"home": str(tmp_path)}))
    if lib.embedder is None:
        pytest.skip("the packaged sentence encoder is not installed")
    try:
        record_meeting(lib, _meeting("m.json", ("Ana", "The server crashed because its disk was full."),
                                     ("Ben", "Full marks to the design team for the new logo.")))
        assert "server crashed" in lib.search("why did the machine fail? it was full")[0].sentence.text
    finally:
        lib.close()


def _minutia(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, MINUTIA_HOME=str(home), COLUMNS="100")
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120)


def test_the_library_commands_list_show_search_and_forget(tmp_path):
    settings = load_settings(overrides={"home": str(tmp_path)})
    missing = _minutia(tmp_path, "library", "list")
    assert missing.returncode == 2 and "nothing has been recorded here yet" in missing.stderr
    lib = open_library(settings, embedder=False)
    meeting = record_meeting(lib, PLANNING, title="Offsite planning", started=parse_date("2026-11-02"))
    lib.close()
    listed = _minutia(tmp_path, "library", "list", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)[0]["title"] == "Offsite planning"
    shown = _minutia(tmp_path, "library", "show", meeting)
    assert shown.returncode == 0 and "Action items" in shown.stdout and "Tomas" in shown.stdout
    bad_date = _minutia(tmp_path, "library", "list", "--since", "last tuesday")
    assert bad_date.returncode == 2 and "YYYY-MM-DD" in bad_date.stderr and "Traceback" not in bad_date.stderr
    unknown = _minutia(tmp_path, "library", "show", "nope")
    assert unknown.returncode == 2 and "no meeting 'nope'" in unknown.stderr
    forgot = _minutia(tmp_path, "library", "forget", meeting, "--speaker", "Tomas")
    assert forgot.returncode == 0 and "2 turns removed" in forgot.stdout
    assert _minutia(tmp_path, "library", "forget", meeting).returncode == 0
    assert "holds no meeting" in _minutia(tmp_path, "library", "list").stderr


def test_a_lost_master_key_is_no_reason_for_a_new_one_while_the_library_holds_meetings(tmp_path, library):
    """A new key would seal the next meeting under it and leave every recorded one unreadable (issue 49's rule
    for saved meetings holds for the library too)."""
    record_meeting(library, PLANNING)
    (tmp_path / "master.key").unlink()
    with pytest.raises(InputError, match="meeting library"):
        open_library(load_settings(overrides={"home": str(tmp_path)}), embedder=False)


def _finder_ask(transcript, question):
    from app.answering.answers import AnswerFinder

    return AnswerFinder(transcript).answer(question)


def test_a_question_across_the_library_is_answered_from_the_meeting_that_says_it(library):
    from app.answering.answers import NOT_IN_MEETING
    from app.library.ask import ask_library

    planning = record_meeting(library, PLANNING, title="Offsite planning", started=parse_date("2026-11-02"))
    record_meeting(library, REVIEW, title="Ops review", started=parse_date("2026-11-30"))
    found = ask_library(library, "Who will renew the certificate?", _finder_ask)
    assert found.meeting.title == "Ops review" and found.text.startswith("Olek")
    assert found.answer.citations and "renew the certificate" in found.answer.citations[0].text
    coach = ask_library(library, "Who will book the coach?", _finder_ask, meeting_like="offsite plannin")
    assert coach.meeting.id == planning and coach.text.startswith("Tomas")
    later = ask_library(library, "Who will book the coach?", _finder_ask, since=parse_date("2026-11-15"))
    assert later.meeting is None or not later.text.startswith("Tomas")  # the planning meeting is before it
    nothing = ask_library(library, "What is the marketing budget?", _finder_ask)
    assert nothing.text == NOT_IN_MEETING and nothing.meeting is None
    with pytest.raises(InputError, match="title like"):
        ask_library(library, "Who will book the coach?", _finder_ask, meeting_like="board meeting")


def test_minutia_ask_library_answers_across_meetings(tmp_path, monkeypatch, capsys, tiny_llm_dir):
    from app.cli import ask

    home = tmp_path / "home"
    lib = open_library(load_settings(overrides={"home": str(home)}), embedder=False)
    record_meeting(lib, REVIEW, title="Ops review", started=parse_date("2026-11-30"))
    lib.close()
    monkeypatch.setenv("MINUTIA_HOME", str(home))
    monkeypatch.setenv("MINUTIA_LLM__DTYPE", "float32")
    monkeypatch.setenv("MINUTIA_LLM__MAX_NEW_TOKENS", "4")
    capsys.readouterr()
    ask("Who will renew the certificate?", library=True, llm=str(tiny_llm_dir), as_json=True)
    answered = json.loads(capsys.readouterr().out)
    assert answered["text"].startswith("Olek") and answered["from"]["title"] == "Ops review"
    with pytest.raises(InputError, match="add --library"):
        ask("meeting.json", "Who?", since="2026-11-01")
    with pytest.raises(InputError, match="give the question alone"):
        ask("meeting.json", "Who?", library=True)


def test_a_damaged_library_file_is_refused_in_one_line(tmp_path):
    settings = load_settings(overrides={"home": str(tmp_path)})
    open_library(settings, embedder=False).close()
    (tmp_path / "library" / "library.db").write_bytes(b"not a database at all" * 100)
    with pytest.raises(InputError, match="cannot be opened"):
        open_library(settings, embedder=False)


def test_asking_a_recorded_meeting_again_embeds_none_of_its_sentences(tmp_path):
    """Ask-across reads whole meetings: their kept vectors go to the encoder first, so only the question is new."""
    from app.answering.retrieval import MiniLMEmbedder

    lib = open_library(load_settings(overrides={"home": str(tmp_path)}))
    if not isinstance(lib.embedder, MiniLMEmbedder):
        pytest.skip("the packaged sentence encoder is not installed")
    try:
        meeting = record_meeting(lib, REVIEW)
        lib.embedder._cache.clear()
        assert lib.warm(meeting) == len(REVIEW.turns)
        encoded = []
        original = lib.embedder._encode
        lib.embedder._encode = lambda texts: encoded.extend(texts) or original(texts)
        try:
            _finder_ask_with(lib.embedder)(transcript_of(lib.get(meeting)), "Who will renew the certificate?")
        finally:
            lib.embedder._encode = original
        assert "Who will renew the certificate?" in encoded  # the question, and the fixed probes of meeting_ask
        assert not [t for t in encoded if any(text in t for _, text in REVIEW_LINES)]  # no line of the meeting
    finally:
        lib.close()


def _finder_ask_with(embedder):
    from app.answering.answers import AnswerFinder

    return lambda transcript, question: AnswerFinder(transcript, embedder).answer(question)


def test_a_speaker_is_forgotten_by_the_name_the_transcript_gives_them(library):
    meeting = record_meeting(library, _meeting(
        "named.json", ("SPEAKER_00", "Thanks, Bob. I will send the offsite budget today."),
        ("SPEAKER_01", "Hi, I'm Bob. I have the venue quote for the offsite."),
        ("SPEAKER_00", "Good, Bob, put the venue quote in the shared folder.")))
    assert forget_speaker(library, meeting, "bob") == 1
    assert library.search("venue quote", speaker="SPEAKER_01") == []
    with pytest.raises(InputError, match="its speakers: SPEAKER_00"):
        forget_speaker(library, meeting, "Bob")


def test_forgotten_words_leave_the_index_itself(library):
    """FTS5 deletes by adding delete markers; the library merges its index after a delete, so a forgotten
    sentence's hashed terms are not left in the index's segments (the index key outlives the forget)."""
    meeting = record_meeting(library, _meeting("m.json", ("Ana", "Zanzibarquux is the code name."),
                                               ("Ben", "The budget is fine.")))
    forget_speaker(library, meeting, "Ana")
    tag = library._tag(__import__("app.answering.retrieval", fromlist=["stems"]).stems("Zanzibarquux")[0]).encode()
    segments = b"".join(bytes(b) for (b,) in library.db.execute("SELECT block FROM terms_data"))
    assert tag not in segments and tag not in library.path.read_bytes()
    assert library.search("budget") and library.search("zanzibarquux") == []


def test_a_library_another_process_holds_is_a_one_line_error(tmp_path, library):
    import sqlite3

    holder = sqlite3.connect(library.path, isolation_level=None, timeout=0.1)
    holder.execute("BEGIN IMMEDIATE")
    library.db.execute("PRAGMA busy_timeout = 100")
    try:
        with pytest.raises(InputError, match="busy"):
            record_meeting(library, PLANNING)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert record_meeting(library, PLANNING)  # free again


def test_a_question_naming_a_period_is_asked_of_that_period_s_meetings(library):
    """"Who will book the coach last month?" asks November's meetings only, and each is asked without the period's
    words; a period with no meeting says so, not "does not say"."""
    from datetime import datetime, timezone

    from app.library.ask import ask_library

    now = datetime(2026, 12, 6, 12, tzinfo=timezone.utc).timestamp()
    record_meeting(library, PLANNING, title="Offsite planning", started=parse_date("2026-10-20"))
    record_meeting(library, REVIEW, title="Ops review", started=parse_date("2026-11-30"))
    asked: list[str] = []
    read: list[str] = []

    def ask(transcript, question):
        asked.append(question)
        read.append(transcript.source)
        return _finder_ask(transcript, question)

    october = ask_library(library, "Who said they would book the coach in October?", ask, now=now)
    assert october.meeting.title == "Offsite planning" and october.text.startswith("Tomas")
    assert october.period.describe() == "from 2026-10-01 to 2026-10-31" and asked == ["Who said they would book the coach?"]
    read.clear()
    november = ask_library(library, "Who will book the coach last month?", ask, now=now)
    assert november.meeting is None or november.meeting.title == "Ops review"
    assert read and set(read) == {"review.json"}  # October's meeting is not asked
    empty = ask_library(library, "Who will book the coach last year?", ask, now=now)
    assert empty.text == "The library holds no meeting from 2025-01-01 to 2025-12-31." and empty.meeting is None


def test_what_is_still_open_is_the_earlier_action_items_no_later_meeting_reports_done(library):
    """"What is still open?" across the library: action items of earlier meetings, less those a later meeting says
    were done ("I booked the coach yesterday" closes "book the coach"; "has not been renewed" does not)."""
    from app.library.ask import ask_library

    record_meeting(library, _meeting(
        "standup-1.json",
        ("Tomas", "I will book the coach for the offsite by Thursday."),
        ("Olek", "I will renew the certificate on the web server."),
        ("Ines", "I will send the catering contract to Green Fork."),
    ), title="Stand-up", started=parse_date("2026-11-23"))
    record_meeting(library, _meeting(
        "standup-2.json",
        ("Tomas", "Quick update: I booked the coach yesterday, forty seats."),
        ("Olek", "The certificate has not been renewed yet, the vendor is slow."),
        ("Priya", "The dashboards look fine this week."),
    ), title="Stand-up", started=parse_date("2026-11-30"))
    found = ask_library(library, "What is still open from the stand-up?", _finder_ask)
    text = found.text
    assert text.startswith("Still open (2 of 3):"), text
    assert "renew the certificate" in text and "send the catering contract" in text
    assert "book the coach" in text.split("Reported done later:")[1]  # closed, and said so
    assert [c.speaker for c in found.answer.citations] == ["Tomas"]  # the line that closed it
    about = ask_library(library, "What is open about the contracts?", _finder_ask)  # "contracts": its stem
    assert "send the catering contract" in about.text and "certificate" not in about.text
    olek = ask_library(library, "What is still open?", _finder_ask, speaker="Olek")
    assert "renew the certificate" in olek.text and "catering" not in olek.text  # his items only
    elsewhere = ask_library(library, "What is still open about the dashboards?", _finder_ask)
    assert "Still open" not in elsewhere.text  # no item on that topic: asked as any question
    assert "Still open" not in ask_library(library, "Who will renew the certificate?", _finder_ask).text


def test_minutia_ask_of_a_meeting_the_library_holds_embeds_none_of_its_sentences(tmp_path):
    """`minutia ask REC q` after `transcribe` or `summarize` recorded it: the kept vectors go to the encoder first
    (embedding every sentence was most of a first answer's time). No library, or a meeting it does not hold: 0."""
    from app.answering.retrieval import MiniLMEmbedder
    from app.cli.recordings import _warm_from_library

    settings = load_settings(overrides={"home": str(tmp_path)})
    assert _warm_from_library(settings, REVIEW) == 0  # no library here yet
    lib = open_library(settings)
    if not isinstance(lib.embedder, MiniLMEmbedder):
        lib.close()
        pytest.skip("the packaged sentence encoder is not installed")
    try:
        record_meeting(lib, REVIEW)
        lib.embedder._cache.clear()
    finally:
        lib.close()
    assert _warm_from_library(settings, PLANNING) == 0  # not in the library
    assert _warm_from_library(settings, REVIEW) == len(REVIEW.turns)
    encoded = []
    original = lib.embedder._encode
    lib.embedder._encode = lambda texts: encoded.extend(texts) or original(texts)
    try:
        _finder_ask_with(lib.embedder)(REVIEW, "Who will renew the certificate?")
    finally:
        lib.embedder._encode = original
    assert not [t for t in encoded if any(text in t for _, text in REVIEW_LINES)]


def test_a_library_opened_with_with_is_closed_after_it(tmp_path):
    """`with open_library(settings) as library:` closes the file after the block, even when the block fails."""
    import sqlite3

    settings = load_settings(overrides={"home": str(tmp_path / "home")})
    with open_library(settings, embedder=False) as library:
        assert library.meetings() == []
    with pytest.raises(sqlite3.ProgrammingError):
        library.db.execute("SELECT 1")
    with pytest.raises(RuntimeError), open_library(settings, embedder=False) as failing:
        raise RuntimeError("the block failed")
    with pytest.raises(sqlite3.ProgrammingError):
        failing.db.execute("SELECT 1")
