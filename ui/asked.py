"""The questions a tab asked and their answers: nothing asked is lost.

A question shows at once, with "answering…" under it. One worker per tab answers the questions in the order they
were asked, each against the meeting it was asked about, and fills its answer in; the page's timer shows the list
whenever it changed (``version``). Asking again before an answer came only queues the next question: the old
page sent the chat it had and got back a chat with one answer, so a second question asked meanwhile vanished.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
from typing import Any, Callable

log = logging.getLogger(__name__)

ANSWERING = "_answering…_"


class AskedQuestions:
    def __init__(self, render_answer: Callable[[Any], str], explain: Callable[[Exception], str]) -> None:
        self._render_answer = render_answer  # an Answer -> the chat's Markdown
        self._explain = explain  # an exception -> a line a person can read
        self._lock = threading.Lock()
        self._messages: list[dict] = []
        self._cited: dict[int, set[str]] = {}  # answer slot -> the speakers its citations quote
        self._queue: queue.Queue = queue.Queue()
        self._worker: threading.Thread | None = None
        self._meeting = 0  # bumped by clear(): an answer for the last meeting's question is not shown in this one
        self.version = 0

    def ask(self, session: Any, question: str) -> list[dict]:
        """Queue ``question`` about ``session``'s meeting; the messages now, with it shown as being answered."""
        with self._lock:
            self._messages += [{"role": "user", "content": question},
                               {"role": "assistant", "content": ANSWERING}]
            self._enqueue(len(self._messages) - 1, session, question)
            self.version += 1
            return list(self._messages)

    def _enqueue(self, slot: int, session: Any, question: str) -> None:
        """Queue a question for the answer in ``slot`` (the lock held); the worker starts when none runs."""
        self._queue.put((self._meeting, slot, session, question))
        if self._worker is None:
            self._worker = threading.Thread(target=self._answer_all, name="ui-answers", daemon=True)
            self._worker.start()

    def messages(self) -> list[dict]:
        with self._lock:
            return list(self._messages)

    def clear(self) -> None:
        """A new meeting (or a forget): no questions shown; answers still coming for earlier ones are dropped."""
        with self._lock:
            self._messages, self._cited = [], {}
            self._meeting += 1
            self.version += 1

    def wait(self, timeout: float = 60.0) -> bool:
        """Block until every queued question is answered (tests)."""
        with self._lock:
            worker = self._worker
        if worker is not None:
            worker.join(timeout)
            return not worker.is_alive()
        return True

    def _answer_all(self) -> None:
        while True:
            with self._lock:
                if self._queue.empty():
                    self._worker = None  # the next ask starts a worker again
                    return
                meeting, slot, session, question = self._queue.get()
                if meeting != self._meeting:
                    continue
            cited: set[str] = set()
            try:
                answer = session.ask(question)
                text, cited = self._render_answer(answer), {c.speaker for c in answer.citations}
            except Exception as exc:  # this question alone fails; the ones after it are still answered
                text = f"⚠️ {self._explain(exc)}"
            with self._lock:
                if meeting == self._meeting and slot < len(self._messages):
                    self._messages[slot] = {"role": "assistant", "content": text}
                    self._cited[slot] = cited
                    self.version += 1

    def renew_about(self, speakers: set[str], session: Any) -> tuple[int, int]:
        """After ``speakers`` were forgotten: a question that names one of them goes, with its answer (the user's
        words about them); a question whose answer quotes or names them, or that was still being answered, stays
        and is asked again of ``session``, the meeting rebuilt without them, so nothing asked is lost and none of
        their words stays on the page. Returns (questions removed, questions asked again)."""
        names = [re.compile(rf"\b{re.escape(s)}\b", re.IGNORECASE) for s in speakers if s]
        with self._lock:
            self._meeting += 1  # answers still coming are about the meeting before the forget
            kept, cited, again, removed = [], {}, [], 0
            for q in range(0, len(self._messages) - 1, 2):
                question, answer = self._messages[q], self._messages[q + 1]
                if any(n.search(question["content"]) for n in names):
                    removed += 1
                    continue
                if (self._cited.get(q + 1, set()) & speakers or answer["content"] == ANSWERING
                        or any(n.search(answer["content"]) for n in names)):
                    again.append(len(kept) + 1)
                    answer = {"role": "assistant", "content": ANSWERING}
                elif q + 1 in self._cited:
                    cited[len(kept) + 1] = self._cited[q + 1]
                kept += [question, answer]
            self._messages, self._cited = kept, cited
            for slot in again:
                self._enqueue(slot, session, kept[slot - 1]["content"])
            self.version += 1
            return removed, len(again)
