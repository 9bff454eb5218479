"""The meeting library: every meeting minutia has read, in one SQLite file under MINUTIA_HOME, sealed.

Why SQLite: it ships with Python, one file holds the whole library, and its FTS5 ranks words by BM25. (This Python's
sqlite3 cannot load extensions, so no sqlite-vec: sentence vectors are kept sealed beside the rows and compared in
numpy.)

What is sealed, and how. Each meeting has a data key of its own (AES-256-GCM), kept wrapped under the library's key
(derived from the master key). The meeting's record (title, transcript, summary, action items), each sentence's
text and speaker, and each sentence vector are sealed under it, bound to the meeting and row they belong to.
Forgetting a meeting deletes its rows and its wrapped data key, and SQLite's secure_delete zeroes the pages they
were on. (A copy of the file made before the forget, or a rollback journal left by a crash in the middle of it,
still holds the wrapped key: a backup must be forgotten too.) Words are found through a blind index: FTS5 holds keyed hashes (HMAC-SHA256) of each sentence's distinct word
stems, sorted (no word order, no positions: ``detail=none``), never a word, and BM25 ranks the hashed terms as it
would the words; a speaker filter matches a hash of the label the same way. After a delete the index is merged
('optimize'), so the deleted rows' hashed terms leave its segments too. What the file shows in clear: meeting ids
(a digest, or a saved meeting's session id), dates and durations (to list and filter by date), each sentence's
start time, and which hashed terms each sentence holds (the known leak of a blind index: with the index key,
whether a meeting says a word can be tested).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from app.answering.retrieval import indexed_text
from encoders.errors import InputError

log = logging.getLogger(__name__)

NONCE = 12
SCHEMA_VERSION = 2
SCHEMA = """
CREATE TABLE IF NOT EXISTS meetings(
    id TEXT PRIMARY KEY, started REAL, duration REAL, recorded REAL NOT NULL,
    wrapped_key BLOB NOT NULL, head BLOB NOT NULL, record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS sentences(
    id INTEGER PRIMARY KEY, meeting TEXT NOT NULL, position INTEGER NOT NULL, start REAL,
    speaker_tag TEXT NOT NULL, body BLOB NOT NULL, vector BLOB);
CREATE INDEX IF NOT EXISTS sentences_meeting ON sentences(meeting);
CREATE VIRTUAL TABLE IF NOT EXISTS terms USING fts5(tokens, detail=none);
"""


@dataclass(frozen=True)
class LibrarySentence:
    """One sentence as the library keeps it, and where it was said."""

    text: str
    speaker: str
    turn_index: int
    start: float | None
    context: str = ""  # the sentence before it, embedded with it as the single-meeting retriever does


@dataclass
class MeetingRecord:
    """What the library keeps of a meeting (sealed as a whole)."""

    id: str
    title: str
    source: str
    started: float | None  # when the meeting took place (epoch seconds), when known
    duration: float | None
    speakers: list[str]
    summary: str = ""
    decisions: list[str] = field(default_factory=list)
    action_items: list[str] = field(default_factory=list)
    transcript: dict | None = None  # the transcript's JSON (app.text.transcript.to_json), to show and rebuild

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()


@dataclass(frozen=True)
class MeetingHead:
    """What a listing or a search result needs of a meeting (sealed apart from the record, which holds the whole
    transcript, so a search opens a few hundred bytes per meeting it cites)."""

    id: str
    title: str
    started: float | None
    duration: float | None
    speakers: list[str]


@dataclass(frozen=True)
class Found:
    """A sentence a search found: its meeting, where, and how well it matched (higher is better)."""

    meeting: str
    title: str
    started: float | None
    sentence: LibrarySentence
    score: float


class Library:
    """The library file at ``path``; ``key`` (32 bytes) seals it, ``index_key`` keys its blind index. Reads and
    changes go to ``audit`` (an AuditLog) when one is given."""

    def __init__(self, path: Path, key: bytes, index_key: bytes, audit=None, embedder=None) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._wrap = AESGCM(key)
        self._index_key = index_key
        self.audit = audit
        self.embedder = embedder
        new = not self.path.exists()
        try:
            # autocommit: each change takes the write lock up front (BEGIN IMMEDIATE in _writing)
            self.db = sqlite3.connect(self.path, timeout=30, check_same_thread=False, isolation_level=None)
            self.db.execute("PRAGMA secure_delete = ON")  # a deleted row's pages are zeroed, not left in free pages
            version = self.db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                raise InputError(f"the meeting library at {self.path} is of another version ({version}) of minutia")
            if version == 0:  # a new file: made once, so reading a library never writes to it
                self.db.executescript(SCHEMA)
                self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.DatabaseError as exc:
            raise InputError(f"the meeting library at {self.path} cannot be opened: {exc}") from None
        except InputError:
            self.db.close()
            raise
        if new:
            os.chmod(self.path, 0o600)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Library":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ sealing
    def _meeting_key(self, meeting: str, wrapped: bytes) -> bytes:
        from cryptography.exceptions import InvalidTag

        try:
            return self._wrap.decrypt(wrapped[:NONCE], wrapped[NONCE:], b"key:" + meeting.encode())
        except InvalidTag:
            raise InputError(f"meeting {meeting!r} in the library does not open with this master key") from None

    @staticmethod
    def _seal(key: bytes, data: bytes, bound: str) -> bytes:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        nonce = os.urandom(NONCE)
        return nonce + AESGCM(key).encrypt(nonce, data, bound.encode())

    @staticmethod
    def _open(key: bytes, blob: bytes, bound: str) -> bytes:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        return AESGCM(key).decrypt(blob[:NONCE], blob[NONCE:], bound.encode())

    def _tokens(self, text: str) -> str:
        """The blind index's terms for ``text``: a keyed hash of each word stem (the answering pipeline's stems)."""
        from app.answering.retrieval import stems

        return " ".join(sorted({self._tag(s) for s in stems(text)}))

    def _tag(self, value: str) -> str:
        return "t" + hmac.new(self._index_key, value.encode(), hashlib.sha256).hexdigest()[:20]

    def _log(self, meeting: str, operation: str, **details) -> None:
        if self.audit is not None:
            self.audit.record(meeting, operation, [], source="library", **details)

    # ------------------------------------------------------------------ writing
    def put(self, record: MeetingRecord, sentences: Sequence[LibrarySentence]) -> None:
        """Record a meeting (a meeting already there under this id is replaced: re-recorded, or rebuilt after a
        forget), with its sentences indexed by word and, with an embedder, by meaning."""
        key = os.urandom(32)
        nonce = os.urandom(NONCE)
        wrapped = nonce + self._wrap.encrypt(nonce, key, b"key:" + record.id.encode())
        vectors = self.embedder.embed([indexed_text(s.text, s.context) for s in sentences]) \
            if self.embedder is not None and sentences else None
        with self._writing():
            self._delete(record.id)
            head = MeetingHead(record.id, record.title, record.started, record.duration, record.speakers)
            self.db.execute("INSERT INTO meetings VALUES (?, ?, ?, ?, ?, ?, ?)",
                            (record.id, record.started, record.duration, time.time(), wrapped,
                             self._seal(key, json.dumps(asdict(head)).encode(), f"head:{record.id}"),
                             self._seal(key, record.to_json(), f"meeting:{record.id}")))
            for position, sentence in enumerate(sentences):
                body = json.dumps(asdict(sentence)).encode()
                vector = None if vectors is None else self._seal(
                    key, np.asarray(vectors[position], dtype=np.float16).tobytes(), f"vector:{record.id}:{position}")
                row = self.db.execute(
                    "INSERT INTO sentences(meeting, position, start, speaker_tag, body, vector) VALUES (?, ?, ?, ?, ?, ?)",
                    (record.id, position, sentence.start, self._tag("speaker:" + sentence.speaker.lower()),
                     self._seal(key, body, f"sentence:{record.id}:{position}"), vector)).lastrowid
                self.db.execute("INSERT INTO terms(rowid, tokens) VALUES (?, ?)", (row, self._tokens(sentence.text)))
        self._log(record.id, "write", sentences=len(sentences))

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """One change, all or nothing, holding the write lock from its first read (two processes recording the
        same meeting take turns); a library another process keeps locked is a one-line error."""
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise InputError(f"the meeting library at {self.path} is busy ({exc}); try again") from None
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def _delete(self, meeting: str) -> int:
        rows = [r for (r,) in self.db.execute("SELECT id FROM sentences WHERE meeting = ?", (meeting,))]
        self.db.executemany("DELETE FROM terms WHERE rowid = ?", [(r,) for r in rows])
        self.db.execute("DELETE FROM sentences WHERE meeting = ?", (meeting,))
        gone = self.db.execute("DELETE FROM meetings WHERE id = ?", (meeting,)).rowcount
        if rows:  # merge the index: a deleted row's terms leave its segments, not only get a delete marker
            self.db.execute("INSERT INTO terms(terms) VALUES ('optimize')")
        return gone

    def forget(self, meeting: str) -> bool:
        """Remove a meeting: its rows, its index terms and its data key (the file is vacuumed, so freed pages do
        not keep the sealed rows either). False when the library does not hold it."""
        with self._writing():
            gone = self._delete(meeting) > 0
        if gone:
            try:
                self.db.execute("VACUUM")
            except sqlite3.OperationalError as exc:  # deleted (and zeroed) already; only the file's size waits
                log.warning("the meeting library was not vacuumed after a forget: %s", exc)
            self._log(meeting, "delete", what="meeting")
        return gone

    # ------------------------------------------------------------------ reading
    def meetings(self, since: float | None = None, until: float | None = None) -> list[MeetingHead]:
        """Every meeting (newest first), or those that took place (or, undated, were recorded) from ``since`` and
        before ``until``."""
        rows = self.db.execute("SELECT id, wrapped_key, head, COALESCE(started, recorded) AS at FROM meetings "
                               "WHERE (? IS NULL OR COALESCE(started, recorded) >= ?) "
                               "AND (? IS NULL OR COALESCE(started, recorded) < ?) ORDER BY at DESC",
                               (since, since, until, until)).fetchall()
        found = [self._head(meeting, wrapped, sealed) for meeting, wrapped, sealed, _ in rows]
        self._log("", "read", what="list", meetings=len(found))
        return found

    def _head(self, meeting: str, wrapped: bytes, sealed: bytes) -> MeetingHead:
        return MeetingHead(**json.loads(self._open(self._meeting_key(meeting, wrapped), sealed, f"head:{meeting}")))

    def _record(self, meeting: str, wrapped: bytes, sealed: bytes) -> MeetingRecord:
        data = json.loads(self._open(self._meeting_key(meeting, wrapped), sealed, f"meeting:{meeting}"))
        return MeetingRecord(**data)

    def get(self, meeting: str) -> MeetingRecord:
        row = self.db.execute("SELECT wrapped_key, record FROM meetings WHERE id = ?", (meeting,)).fetchone()
        if row is None:
            raise InputError(f"the library has no meeting {meeting!r} (minutia library list shows them)")
        self._log(meeting, "read", what="meeting")
        return self._record(meeting, *row)

    def started(self, meeting: str) -> float | None:
        """When a recorded meeting took place (None when it is not recorded, or undated)."""
        row = self.db.execute("SELECT started FROM meetings WHERE id = ?", (meeting,)).fetchone()
        return row[0] if row else None

    def sentences(self, meeting: str) -> list[LibrarySentence]:
        return [sentence for _, sentence, _ in self._sentences(meeting, [])]

    def warm(self, meeting: str) -> int:
        """Hand a meeting's kept sentence vectors to the embedder (one that can ``remember``), so reading the
        meeting again embeds none of them; how many were handed over."""
        remember = getattr(self.embedder, "remember", None)
        if remember is None:
            return 0
        kept = [(indexed_text(s.text, s.context), v) for _, s, v in self._sentences(meeting, []) if v is not None]
        if kept:
            remember([t for t, _ in kept], np.stack([v for _, v in kept]))
        return len(kept)

    def _sentences(self, meeting: str, rows: Sequence[int]) -> Iterator[tuple[int, LibrarySentence, np.ndarray | None]]:
        """(row id, sentence, its vector or None) of a meeting, all of them or those ``rows``, in the order said."""
        wrapped = self.db.execute("SELECT wrapped_key FROM meetings WHERE id = ?", (meeting,)).fetchone()
        if wrapped is None:
            return
        key = self._meeting_key(meeting, wrapped[0])
        where, args = ("AND id IN (%s)" % ",".join("?" * len(rows)), list(rows)) if rows else ("", [])
        for row, position, body, vector in self.db.execute(
                f"SELECT id, position, body, vector FROM sentences WHERE meeting = ? {where} ORDER BY position",
                [meeting, *args]).fetchall():
            sentence = LibrarySentence(**json.loads(self._open(key, body, f"sentence:{meeting}:{position}")))
            vec = None if vector is None else np.frombuffer(
                self._open(key, vector, f"vector:{meeting}:{position}"), dtype=np.float16).astype(np.float32)
            yield row, sentence, vec

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """Several reads seen as of one moment (a read transaction); a library locked too long is a one-line error."""
        try:
            self.db.execute("BEGIN")
            try:
                yield
            finally:
                self.db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            raise InputError(f"the meeting library at {self.path} is busy ({exc}); try again") from None

    def search(self, query: str, limit: int = 10, since: float | None = None, speaker: str | None = None,
               meetings: Sequence[str] | None = None, until: float | None = None) -> list[Found]:
        """The sentences that best match ``query``, across meetings: BM25 over the blind index, blended with the
        sentence vectors' cosine when the library has them (half each, as the single-meeting retriever does)."""
        tokens = self._tokens(query).split()
        if not tokens:
            raise InputError("the search has no words to look for")
        filters, args = ["terms MATCH ?"], [" OR ".join(dict.fromkeys(tokens))]
        if since is not None:
            filters.append("COALESCE(m.started, m.recorded) >= ?")
            args.append(since)
        if until is not None:
            filters.append("COALESCE(m.started, m.recorded) < ?")
            args.append(until)
        if speaker:
            filters.append("s.speaker_tag = ?")
            args.append(self._tag("speaker:" + speaker.lower()))
        if meetings is not None:
            filters.append("s.meeting IN (%s)" % ",".join("?" * len(meetings)) if meetings else "0")
            args += list(meetings)
        asked = None if self.embedder is None else self.embedder.embed([query])[0]
        found = []
        with self._reading():  # one snapshot: a meeting forgotten or recorded meanwhile is not half seen
            pool = self.db.execute(
                "SELECT s.id, s.meeting, bm25(terms) FROM terms JOIN sentences s ON s.id = terms.rowid "
                f"JOIN meetings m ON m.id = s.meeting WHERE {' AND '.join(filters)} ORDER BY bm25(terms) LIMIT ?",
                [*args, max(limit * 5, 50)]).fetchall()
            by_meeting: dict[str, dict[int, float]] = {}
            for row, meeting, rank in pool:
                by_meeting.setdefault(meeting, {})[row] = -rank  # FTS5's bm25 is lower for better matches
            heads = {m: self._head(m, wrapped, sealed) for m, wrapped, sealed in self.db.execute(
                "SELECT id, wrapped_key, head FROM meetings WHERE id IN (%s)" % ",".join("?" * len(by_meeting)),
                list(by_meeting))}
            for meeting, rows in by_meeting.items():
                head = heads[meeting]
                for row, sentence, vector in self._sentences(meeting, list(rows)):
                    words = rows[row] / (1.0 + rows[row])  # BM25 squashed into 0-1, as the cosine is
                    score = words if asked is None or vector is None else 0.5 * words + 0.5 * float(vector @ asked)
                    found.append(Found(meeting, head.title, head.started, sentence, score))
        found.sort(key=lambda f: -f.score)
        self._log("", "read", what="search", found=len(found[:limit]))
        return found[:limit]
