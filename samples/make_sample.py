"""Regenerate the bundled sample meeting in samples/standup/.

    .venv/bin/python samples/make_sample.py [--out DIR] [--keep-wav] [--video-out DIR | --no-video]

Needs the Debian packages espeak-ng, sox and ffmpeg (with libopus). Each turn is
synthesised with espeak-ng, resampled to 16 kHz mono and trimmed of the silence
espeak puts around speech (sox), so a turn's clip is exactly its speech region.
The clips are joined with fixed pauses, and the reference times are computed
from sample counts, so they are exact. Everything is deterministic: fixed voices
and parameters, sox in repeatable mode without dither, ffmpeg in bitexact mode.

Writes:
  meeting.ogg      Opus in Ogg, 16 kHz mono, 24 kb/s
  reference.json   minutia.transcript/1 reference transcript
  reference.rttm   speech regions per speaker, for DER scoring
  reference.txt    "Speaker: text", one turn per line
  facts.json       questions with answers, decisions and action items for `minutia ask` tests

Then samples/make_slides.py builds the same meeting with a slide video in samples/standup-video/
(meeting.webm: slides timed to the topics + this audio; slides.json gold), unless --no-video.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import wave
from pathlib import Path

RATE = 16000
URI = "standup"  # RTTM file id
AUDIO_NAME = "meeting.ogg"

# espeak-ng settings per speaker: voice (+variant), pitch (-p 0-99), speed (-s wpm),
# amplitude (-a). Chosen to be acoustically distinct: a low, slow American male,
# a high British female and a mid-pitch American female variant with a faster pace.
VOICES: dict[str, dict[str, object]] = {
    "Alice": {"voice": "en-us+f3", "pitch": 62, "speed": 160, "amplitude": 120},
    "Bob": {"voice": "en-us+m3", "pitch": 30, "speed": 155, "amplitude": 110},
    "Carol": {"voice": "en-gb+f4", "pitch": 75, "speed": 165, "amplitude": 120},
}
SPEAKERS = list(VOICES)

LEAD_IN = 0.5  # seconds of silence before the first turn
TAIL = 0.6  # after the last turn
# Pauses between turns, used in order (cycled); all within 0.3-0.8 s.
PAUSES = [0.5, 0.35, 0.7, 0.45, 0.6, 0.3, 0.8, 0.4, 0.55, 0.65]

# The meeting. Numbers are written as words: that is what espeak says, and
# samples/textnorm.py maps both these words and Whisper's digits to the same form.
# Calendar: 2025 (Thursday March 6, Friday March 7, Monday March 10,
# Wednesday March 12, Monday April 14).
TURNS: list[tuple[str, str]] = [
    ("Alice", "Good morning. This is our weekly meeting about the new customer website. Bob, can you start?"),
    ("Bob", "Sure, Alice. The login page is finished. The payment page needs one more week of work."),
    ("Alice", "Thanks, Bob. Carol, how does the budget look?"),
    ("Carol", "We have spent thirty thousand dollars so far, out of a total budget of fifty thousand dollars."),
    ("Alice", "And what about the pilot?"),
    ("Carol", "The pilot will cost twelve thousand dollars. It starts on Monday, March tenth, and runs for four weeks."),
    ("Bob", "We want two hundred users in the pilot, so we can test the servers with real traffic."),
    ("Alice", "Thank you, Bob. Are there any problems?"),
    ("Bob", "There is one problem. The payment company did not sign the contract, so we cannot test real payments."),
    ("Carol", "I called the company yesterday. They want a lower price."),
    ("Alice", "Should we keep this company, or look for a new one?"),
    ("Bob", "We should keep the company. A new company would cost us three weeks."),
    ("Carol", "I agree with Bob. We can offer a small discount."),
    ("Alice", "Okay. We decided to keep the payment company and offer a five percent discount."),
    ("Bob", "I will send the new contract to the payment company by Thursday, March sixth."),
    ("Alice", "Great. Carol, can you update the budget with the new price?"),
    ("Carol", "I will update the budget and share it with the team by Friday, March seventh."),
    ("Alice", "And I will write the test plan for the pilot by Wednesday, March twelfth."),
    ("Bob", "Also, last week we decided to move the release to Monday, April fourteenth."),
    ("Alice", "Right, the release is on April fourteenth. Let's meet again next Tuesday at ten in the morning."),
    ("Carol", "That works for me. Thank you, Alice."),
    ("Bob", "Works for me too. Thanks, everyone."),
]

FACTS = {
    "format": "minutia.facts/1",
    "source": AUDIO_NAME,
    "questions": [
        {"question": "What is the budget for the pilot?", "answer": "12,000 dollars",
         "keywords": ["12,000", "12000", "twelve thousand"]},
        {"question": "What is the total budget for this phase?", "answer": "50,000 dollars",
         "keywords": ["50,000", "50000", "fifty thousand"]},
        {"question": "How much money has been spent so far?", "answer": "30,000 dollars",
         "keywords": ["30,000", "30000", "thirty thousand"]},
        {"question": "When does the pilot start?", "answer": "Monday, March 10th",
         "keywords": ["March 10", "March tenth"]},
        {"question": "How long does the pilot run?", "answer": "four weeks",
         "keywords": ["four weeks", "4 weeks"]},
        {"question": "How many users will be in the pilot?", "answer": "200 users",
         "keywords": ["200", "two hundred"]},
        {"question": "What is the new launch date?", "answer": "Monday, April 14th",
         "keywords": ["April 14", "April fourteenth"]},
        {"question": "What discount will be offered to the payment company?", "answer": "a five percent discount",
         "keywords": ["5%", "5 percent", "five percent"]},
        {"question": "Who will send the contract to the payment company?", "answer": "Bob",
         "keywords": ["Bob"]},
        {"question": "When is the next meeting?", "answer": "next Tuesday at 10 in the morning",
         "keywords": ["Tuesday", "10", "ten"]},
    ],
    "decisions": [
        "Keep the current payment company and offer them a five percent discount.",
        "The launch moves to Monday, April 14th.",
    ],
    "action_items": [
        {"owner": "Bob", "task": "send the new contract to the payment company", "due": "Thursday, March 6th"},
        {"owner": "Carol", "task": "update the budget and share it with the team", "due": "Friday, March 7th"},
        {"owner": "Alice", "task": "write the test plan for the pilot and send it to Bob and Carol",
         "due": "Wednesday, March 12th"},
    ],
}


def _run(cmd: list[str]) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"command failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr.strip()}")


def _need(tool: str) -> None:
    if shutil.which(tool) is None:
        raise SystemExit(f"{tool} not found; install the Debian package (apt-get install espeak-ng sox ffmpeg)")


def synth_turn(speaker: str, text: str, path: Path, tmp: Path) -> bytes:
    """16 kHz mono 16-bit PCM frames of one turn, leading/trailing silence trimmed."""
    v = VOICES[speaker]
    raw = tmp / (path.stem + ".raw.wav")
    _run(["espeak-ng", "-v", str(v["voice"]), "-p", str(v["pitch"]), "-s", str(v["speed"]),
          "-a", str(v["amplitude"]), "-w", str(raw), text])
    # -R: repeatable, -D: no dither. Trim silence below 0.5% at both ends.
    _run(["sox", "-R", "-D", str(raw), "-r", str(RATE), "-c", "1", "-b", "16", str(path),
          "silence", "1", "0.02", "0.5%", "reverse", "silence", "1", "0.02", "0.5%", "reverse"])
    with wave.open(str(path), "rb") as w:
        assert w.getframerate() == RATE and w.getnchannels() == 1 and w.getsampwidth() == 2
        return w.readframes(w.getnframes())


def silence(seconds: float) -> bytes:
    return b"\x00\x00" * round(seconds * RATE)


def build(out: Path, keep_wav: bool = False) -> dict:
    for tool in ("espeak-ng", "sox", "ffmpeg"):
        _need(tool)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="minutia-sample-") as td:
        tmp = Path(td)
        pcm = bytearray(silence(LEAD_IN))
        turns = []
        for i, (speaker, text) in enumerate(TURNS):
            if i:
                pcm += silence(PAUSES[(i - 1) % len(PAUSES)])
            frames = synth_turn(speaker, text, tmp / f"turn{i:02d}.wav", tmp)
            start = len(pcm) // 2 / RATE
            pcm += frames
            end = len(pcm) // 2 / RATE
            turns.append({"speaker": speaker, "start": round(start, 3), "end": round(end, 3), "text": text})
        pcm += silence(TAIL)
        duration = len(pcm) // 2 / RATE

        wav = tmp / "meeting.wav"
        with wave.open(str(wav), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(RATE)
            w.writeframes(bytes(pcm))
        if keep_wav:
            shutil.copyfile(wav, out / "meeting.wav")
        audio = out / AUDIO_NAME
        _run(["ffmpeg", "-nostdin", "-y", "-loglevel", "error", "-i", str(wav),
              "-ac", "1", "-ar", str(RATE), "-c:a", "libopus", "-b:a", "24k", "-application", "voip",
              "-map_metadata", "-1", "-fflags", "+bitexact", "-flags:a", "+bitexact", str(audio)])

    reference = {
        "format": "minutia.transcript/1",
        "source": AUDIO_NAME,
        "duration": round(duration, 3),
        "speakers": SPEAKERS,
        "turns": turns,
    }
    (out / "reference.json").write_text(json.dumps(reference, indent=2) + "\n")
    rttm = "".join(
        f"SPEAKER {URI} 1 {t['start']:.3f} {t['end'] - t['start']:.3f} <NA> <NA> {t['speaker']} <NA> <NA>\n"
        for t in turns
    )
    (out / "reference.rttm").write_text(rttm)
    (out / "reference.txt").write_text("".join(f"{t['speaker']}: {t['text']}\n" for t in turns))
    (out / "facts.json").write_text(json.dumps(FACTS, indent=2) + "\n")
    return reference


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "standup")
    ap.add_argument("--keep-wav", action="store_true", help="also write the uncompressed meeting.wav")
    # --- video sample (samples/make_slides.py) ---
    ap.add_argument("--video-out", type=Path, default=Path(__file__).resolve().parent / "standup-video",
                    help="where samples/make_slides.py writes the video version of the meeting")
    ap.add_argument("--no-video", action="store_true", help="skip the video version")
    # --- end video sample ---
    args = ap.parse_args(argv)
    ref = build(args.out, keep_wav=args.keep_wav)
    names = [AUDIO_NAME, "reference.json", "reference.rttm", "reference.txt", "facts.json"]
    if args.keep_wav:
        names.append("meeting.wav")
    print(f"wrote {args.out}/")
    for name in names:
        print(f"  {name:15s} {(args.out / name).stat().st_size:>8d} bytes")
    per = {s: sum(t["end"] - t["start"] for t in ref["turns"] if t["speaker"] == s) for s in SPEAKERS}
    print(f"duration {ref['duration']:.3f} s, {len(ref['turns'])} turns, speech per speaker: "
          + ", ".join(f"{s} {d:.1f} s" for s, d in per.items()))
    for s, v in VOICES.items():
        print(f"  {s}: espeak-ng -v {v['voice']} -p {v['pitch']} -s {v['speed']} -a {v['amplitude']}")
    # --- video sample (samples/make_slides.py) ---
    if not args.no_video:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import make_slides

        make_slides.main(["--audio-dir", str(args.out), "--out", str(args.video_out)])
    # --- end video sample ---
    return 0


if __name__ == "__main__":
    sys.exit(main())
