"""Pure rendering: session state -> HTML, Markdown, plot tables and gallery items.

No Gradio here, so every view of the page is unit-testable without a browser. Inputs are duck-typed
on ``app.live.session.SessionSnapshot`` (transcript, tentative, slides, kv, state, ...).
"""

from __future__ import annotations

import html
import re
from collections import deque
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import pandas as pd

from app.answering.questions import QuestionType
from app.answering.summary import render_markdown as render_summary
from app.text.textnorm import counted
from app.text.transcript import UNSURE, Transcript, format_time, unsure_note

# Okabe-Ito + extras: distinguishable for colour-blind readers, readable on white.
SPEAKER_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#8B4513", "#6A3D9A")
LINE_PREFIX = "mt-t-"  # a line's anchor: its start in centiseconds, stable while later words arrive
MB = 1_000_000  # the page says MB, the unit people read on their own machines (the stats keep bytes)


BEHIND_SECONDS = 3.0  # the recogniser decodes in steps of about a second: less is not 'behind'


def speaker_colours(speakers: Iterable[str]) -> dict[str, str]:
    """Colour by order of first appearance, so a speaker keeps their colour as the meeting grows."""
    colours: dict[str, str] = {}
    for name in speakers:
        if name not in colours:
            colours[name] = SPEAKER_COLOURS[len(colours) % len(SPEAKER_COLOURS)]
    return colours


def transcript_html(transcript: Transcript, tentative: str = "", query: str = "") -> str:
    """Committed turns (time, coloured speaker, text; each line an anchor) and the greyed tentative tail.

    With a search ``query``: its occurrences (any case, in the text or the speaker) are marked, and a line
    above the transcript counts the matching lines and links to them (the page scrolls to a clicked one).
    """
    query = " ".join(query.split())
    colours = speaker_colours(transcript.speakers)
    lines, hits = [], []
    for index, turn in enumerate(transcript.turns):
        start = "" if turn.start is None else f"{turn.start:.2f}"
        anchor = line_anchor(turn.start, index)
        speaker = _marked(turn.speaker, query)
        text = _marked(turn.text, query) if query else _with_unsure_words(turn)
        hit = query and "<mark" in speaker + text
        if hit:
            hits.append(f'<a href="#{anchor}">{format_time(turn.start)} {html.escape(turn.speaker)}</a>')
        lines.append(
            f'<div class="mt-line{" mt-hit" if hit else ""}" id="{anchor}" data-start="{start}">'
            f'<span class="mt-time">{format_time(turn.start)}</span> '
            f'<span class="mt-speaker" style="color:{colours[turn.speaker]}">{speaker}</span> '
            f'<span class="mt-text">{text}</span></div>'
        )
    if tentative.strip():
        lines.append(f'<div class="mt-line mt-tentative"><span class="mt-text">{html.escape(tentative.strip())}</span></div>')
    if not lines:
        lines.append('<div class="mt-empty">No transcript yet: replay the sample, upload a recording or start the microphone.</div>')
    jump = '<button type="button" class="mt-jump" hidden>↓ Jump to live</button>'  # the page script shows it
    return _search_line(query, hits) + '<div class="mt-transcript">' + "".join(lines) + "</div>" + jump


def _with_unsure_words(turn: Any) -> str:
    """The line's text, its low-confidence words underlined with a hint: a dropped or misheard word ("can" for
    "cannot") is where a reader should doubt the transcript (issue 49). Lines without word timings as they are."""
    words = getattr(turn, "words", None) or []
    if not words or " ".join(w.text for w in words) != turn.text:
        return html.escape(turn.text)
    return " ".join(
        f'<span class="mt-unsure" title="heard with low confidence">{html.escape(w.text)}</span>'
        if w.probability < UNSURE else html.escape(w.text) for w in words)


SEARCH_LINKS = 30  # matching lines linked above the transcript; the rest are only marked


def _marked(text: str, query: str) -> str:
    """``text`` HTML-escaped, each case-insensitive occurrence of ``query`` inside <mark>."""
    if not query:
        return html.escape(text)
    out, lower, needle, at = [], text.lower(), query.lower(), 0
    while (found := lower.find(needle, at)) >= 0:
        out.append(html.escape(text[at:found]) + "<mark>" + html.escape(text[found : found + len(query)]) + "</mark>")
        at = found + len(query)
    return "".join(out) + html.escape(text[at:])


def _search_line(query: str, hits: list[str]) -> str:
    if not query:
        return ""
    shown = f"“{html.escape(query)}”"
    if not hits:
        return f'<div class="mt-search-hits">No line matches {shown}.</div>'
    more = f" and {len(hits) - SEARCH_LINKS} more" if len(hits) > SEARCH_LINKS else ""
    count = f"{len(hits)} line{'s' if len(hits) != 1 else ''} match{'es' if len(hits) == 1 else ''} {shown}"
    return f'<div class="mt-search-hits">{count}: ' + " · ".join(hits[:SEARCH_LINKS]) + more + "</div>"


def line_anchor(start: float | None, index: int) -> str:
    """The id of a transcript line; the page's script also resolves a time to the line spoken then."""
    return f"{LINE_PREFIX}{round(start * 100)}" if start is not None else f"mt-turn-{index}"


def answer_markdown(answer: Any) -> str:
    """An answer with its citations as links that scroll the transcript to the cited time."""
    links = []
    for citation in answer.citations:
        label = citation.label.strip("[]")
        links.append(f"[{label} {citation.speaker}](#{line_anchor(citation.start, citation.turn_index)})")
    text = answer.text.strip() or "(no answer)"
    doubt = unsure_note(doubted_words(answer), "these lines")
    checks = [f"_Check the line at {c.label.strip('[]')} in the recording: {c.check}; a \"not\" may have been missed._"
              for c in answer.citations if getattr(c, "check", "")]
    return text + ("\n\nSources: " + " · ".join(links) if links else "") + (f"\n\n{doubt}" if doubt else "") + \
        "".join(f"\n\n{check}" for check in checks)


def doubted_words(answer: Any) -> list[str]:
    """The cited lines' low-confidence words an answer rests on: all of them for a yes or no (it reads the whole line),
    else those the answer itself says ("12" misheard in the line that gives the date is no doubt about the date)."""
    unsure = dict.fromkeys(w for c in answer.citations for w in getattr(c, "unsure", ()))
    if getattr(answer, "kind", "") == QuestionType.YES_NO.value:
        return list(unsure)
    said = set(re.findall(r"\w+", answer.text.lower()))
    return [w for w in unsure if set(re.findall(r"\w+", w.lower())) <= said]


def action_items_markdown(items: Sequence[Any]) -> str:
    if not items:
        return "_No action items yet._"
    rows = []
    for item in items:
        due = f" (due {item.due})" if item.due else ""
        when = f" [{format_time(item.start)}]" if item.start is not None else ""
        rows.append(f"- **{item.owner}**: {item.task}{due}{when}")
    return "\n".join(rows)


def summary_markdown(summary: Any, action_items: bool = True) -> str:
    """A MeetingSummary as the Markdown that is both shown and exported (app/answering/summary.py renders it)."""
    return render_summary(summary, action_items=action_items)


def slide_file(index: int) -> str:
    """The exported image of the ``index``-th slide (0-based)."""
    return f"slide-{index + 1:02d}.png"


def slides_markdown(slides: Sequence[Any]) -> str:
    """The meeting's slides as exported: when each was shown, its image (``slide_file``), and its text."""
    if not slides:
        return "# Slides\n\n_No slides were shown._\n"
    parts = ["# Slides"]
    for index, slide in enumerate(slides):
        image = f"\n\n![slide {index + 1}]({slide_file(index)})" if slide.thumbnail is not None else ""
        text = "\n".join(line.strip() for line in slide.text.splitlines() if line.strip()) or "_(no text read)_"
        parts.append(f"## {format_time(slide.time)} · slide {index + 1}{image}\n\n{text}")
    return "\n\n".join(parts) + "\n"


def slide_items(slides: Sequence[Any]) -> list[tuple[Any, str]]:
    """Gallery items: (thumbnail, "mm:ss  OCR text"); slides without a thumbnail are skipped."""
    items = []
    for slide in slides:
        if slide.thumbnail is None:
            continue
        text = " ".join(slide.text.split())
        items.append((slide.thumbnail, f"{format_time(slide.time)}  {text[:120]}".strip()))
    return items


# Plain names for the KV dashboard's series (the store's own keys stay in /metrics and the JSON stats).
# Short enough that the legend of every series fits on one line under a full-width plot.
# The store's tiers (L1 full precision, L2 quantized, L3 summaries, page tables) in a meeting-goer's words.
TIER_SERIES = {"L1": "exact", "L2": "compressed", "L3": "summarized", "metadata": "bookkeeping",
               "sliding": "recent words only (outside the allowance)", "device": "uncompressed memory"}
MODALITY_SERIES = {"audio": "speech", "video": "slides", "text": "instructions"}
BUDGET_SERIES = "allowance"
BUDGETED_SERIES = "counted against it"


def series_name(key: str, name: str) -> str:
    """The legend's words for a store key: ``L2`` -> "compressed", ``video`` -> "slides", ``cold_disk`` ->
    "slower: disk" (moved out of fast memory)."""
    if key == "bytes_by_tier" and name.startswith("cold_"):
        return f"slower: {name[len('cold_'):]}"
    return (TIER_SERIES if key == "bytes_by_tier" else MODALITY_SERIES).get(name, name)


@dataclass(frozen=True)
class KVPoint:
    seconds: float
    kv: dict


class KVHistory:
    """A bounded per-tab history of snapshot.kv: one point per refresh that changed something."""

    def __init__(self, max_points: int = 600) -> None:
        self.points: deque[KVPoint] = deque(maxlen=max_points)

    def add(self, seconds: float, kv: dict) -> bool:
        if not kv or (self.points and self.points[-1].seconds == seconds and self.points[-1].kv == kv):
            return False
        self.points.append(KVPoint(seconds, dict(kv)))
        return True

    def bytes_frame(self, key: str) -> pd.DataFrame:
        """Long table (t, MB, series) of ``kv[key]`` (bytes_by_tier / bytes_by_modality) under plain series names,
        plus the budget line; the tier table also has the total the budget is compared with (the tiered layers')."""
        rows = []
        if not self.points:
            return pd.DataFrame(rows, columns=["t", "MB", "series"])
        # a cold location that never held a block (redis when none is configured...) is left out of the legend
        unused = {name for name in (self.points[-1].kv.get(key) or {}) if str(name).startswith("cold_")} - {
            name for point in self.points for name, value in (point.kv.get(key) or {}).items() if value}
        for point in self.points:
            for name, value in (point.kv.get(key) or {}).items():
                if name not in unused:
                    rows.append((point.seconds, value / MB, series_name(key, str(name))))
            if point.kv.get("budget_bytes"):
                rows.append((point.seconds, point.kv["budget_bytes"] / MB, BUDGET_SERIES))
                if key == "bytes_by_tier" and point.kv.get("tiered_kv_bytes") is not None:
                    rows.append((point.seconds, point.kv["tiered_kv_bytes"] / MB, BUDGETED_SERIES))
        return pd.DataFrame(rows, columns=["t", "MB", "series"])

    def ratio_frame(self) -> pd.DataFrame:
        rows = [(p.seconds, float(p.kv["compression_ratio"])) for p in self.points if p.kv.get("compression_ratio")]
        return pd.DataFrame(rows, columns=["t", "ratio"])

    def time_range(self) -> list[float]:
        """The plots' x axis: from the meeting's start (or the oldest point kept, once the history is full) to the
        latest point, never past the meeting."""
        if not self.points:
            return [0.0, 1.0]
        first = self.points[0].seconds if len(self.points) == self.points.maxlen else 0.0
        return [first, max(self.points[-1].seconds, first + 1.0)]


def kv_stats_markdown(kv: dict, commit_lag: float | None = None, cost: Any = None) -> str:
    """The model's memory of the meeting (its KV cache) in plain words, one item per line: its places, tokens, memory
    on the device split into what the budget counts and what it does not, how much smaller than uncompressed,
    the cold tier, prefetch hits, commit lag. Engineers' words (KV, tier, prefetch, budget) stay in the stats'
    keys; a person reads what they mean."""
    if not kv:
        return "The model's memory of the meeting is empty: nothing has been said yet."
    mode = kv.get("mode", "normal")
    badge = ("**only the fast ones**: a slower place (disk or Redis) failed or was too slow, so the meeting is kept in "
             "this machine's memory alone" if mode == "fallback" else "**all working**")
    by_tier = kv.get("bytes_by_tier") or {}
    on_device = sum(v for name, v in by_tier.items() if not str(name).startswith("cold_")) / MB
    cold = sum(v for name, v in by_tier.items() if str(name).startswith("cold_")) / MB
    sliding = by_tier.get("sliding", 0) / MB
    budgeted = (kv["tiered_kv_bytes"] / MB) if kv.get("tiered_kv_bytes") is not None else on_device - sliding
    budget = (kv.get("budget_bytes") or 0) / MB
    full = (kv.get("full_precision_bytes") or 0) / MB
    ratio = kv.get("compression_ratio", 1.0) or 1.0
    hit = kv.get("prefetch_hit_rate")
    if ratio >= 1.05:
        size = f"the meeting is kept {ratio:.1f}x smaller than uncompressed" + (f" ({full:.2f} MB)" if full else "")
    elif ratio >= 1.0 and budget and not by_tier.get("L2"):
        size = "not compressed: the meeting still fits its allowance exactly as heard"
    elif ratio >= 1.0:
        size = f"about the uncompressed size ({ratio:.2f}x smaller)"
    else:  # a short meeting: block headers and scales outweigh what compression saved so far
        size = f"not compressed yet ({1 / ratio:.1f}x the uncompressed size while the meeting is short)"
    memory = f"memory used: {on_device:.2f} MB of this machine's fast memory"
    if budget:
        memory += f"; the meeting's share {budgeted:.2f} MB of its {budget:.2f} MB allowance"
    if sliding:
        memory += (f"; {sliding:.2f} MB in the layers that read only the latest words (part of the model, outside "
                   "the allowance)")
    items = [
        f"places the memory is kept: {badge}",
        f"pieces of words the model holds: {kv.get('tokens', 0)}",
        memory,
        f"compression: {size}",
        *([f"moved out to slower storage (disk or Redis), read back when a question needs it: {cold:.2f} MB"]
          if cold else []),
        (f"read ahead in time (what a question needed from slower storage was already in fast memory): {hit:.0%}"
         if hit is not None else "read ahead in time: n/a (nothing read back from slower storage yet)"),
    ]
    drift = kv.get("quality_drift_js")
    if drift is not None:  # only with a sparse decode read (decode_top_k_blocks)
        agree = kv.get("shadow_top1_agreement") or 0.0
        items.append(f"sparse-read drift from a dense read: JS {drift:.3f}, same next word {agree:.0%} "
                     f"({kv.get('drift_samples', 0)} sampled steps)")
    exact = kv.get("shadow_exact_agreement")
    if exact is not None:
        items.append(f"sampled answers the uncompressed meeting gives word for word: {exact:.0%} "
                     f"(JS {kv.get('shadow_exact_js') or 0:.3f})")
    pressure = kv.get("controller_pressure")
    if pressure is not None:  # a device cap: the controller's PID holds the KV at its setpoint
        share = kv.get("controller_share")
        items.append(f"device memory: {pressure:.0%} of the cap (held at {kv.get('controller_setpoint') or 0:.0%}"
                     + (f"; the budget follows {share:.0%} of the cap)" if share is not None else ")"))
    arm = kv.get("controller_decode_top_k")
    if arm is not None:  # the bandit picks the decode read per answer
        items.append("decode read chosen for the last answer: " + ("every block" if arm == 0 else f"{arm} blocks per head"))
    same = kv.get("shadow_answer_agreement")
    if same is not None:
        items.append(f"sampled answers a dense read gives word for word: {same:.0%} "
                     f"({kv.get('shadow_questions', 0)} compared)")
    if commit_lag is not None:
        items.append(f"commit lag (speech to transcript): {commit_lag:.1f} s")
    if cost is not None:  # an app.platform.cost.CostReport
        hourly = cost.per_meeting_hour
        items.append(f"cost so far: ${cost.total:.4f}" + (f", ${hourly:.3f} per meeting-hour" if hourly else "")
                     + f" (this meeting's share of {cost.cores} cores" + (f" and {cost.gpus} GPUs" if cost.gpus else "")
                     + ", its saved copy, its network use; prices in the config's `cost:`)")
    return "\n".join(f"- {item}" for item in items)


def meeting_title(source: str) -> str:
    """What the page calls a meeting in its exports: the recording's name, or "Live meeting"; not the session's
    internal source tag ("replay:standup.ogg", "...-without-SPEAKER_03" after a forget)."""
    name = source.removeprefix("replay:") if source else ""
    name = re.sub(r"-without-\S+$", "", name)
    return "Live meeting" if not name or name == "live" else name


def status_line(snapshot: Any, notice: str | None = None) -> str:
    """One line on top of the page that tells where the meeting is: heard up to, transcribed up to and how
    far behind (a busy machine falls behind; the page says so), or finished; an error or notice after."""
    state = snapshot.state if snapshot is not None else "idle"
    text = f"**{state}**"
    if snapshot is not None:
        turns = len(snapshot.transcript.turns)
        people = len(snapshot.transcript.speakers)
        said = (f"{counted(people, 'person', 'people')} spoke {counted(turns, 'time')}" if turns
                else "first words coming in" if snapshot.tentative.strip() else "nothing said yet")
        if state == "finished":
            text += f" · {format_time(snapshot.stream_seconds)} of meeting · {said}"
        else:
            heard, decoded = snapshot.stream_seconds, snapshot.decoded_seconds
            text += f" · heard up to {format_time(heard)} · transcribed up to {format_time(decoded)}"
            if heard - decoded >= BEHIND_SECONDS:
                text += f" · behind by {heard - decoded:.0f} s"
            text += f" · {said}"
        if snapshot.error:
            text += f" · ⚠️ error: {snapshot.error}"
        elif state == "finished" and not turns:
            text += " · ⚠️ no speech found in this recording"
    if notice:
        text += f" · {notice}"
    return text
