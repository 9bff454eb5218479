"""Loading and running a sentence encoder (all-MiniLM-L6-v2 and its adaptations): one place for the mean pooling
that the retrieval embedder (app/answering/retrieval.py), the meeting ranker (app/answering/rerank.py) and the ranker's training share."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

MAX_TOKENS = 128


def load_encoder(base: str | Path, adapter: str | Path | None = None):
    """(tokenizer, model) from a local folder, in eval mode; a LoRA adapter merged in when given."""
    import transformers
    from transformers import AutoModel, AutoTokenizer

    transformers.utils.logging.disable_progress_bar()
    transformers.logging.set_verbosity_error()
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    model = AutoModel.from_pretrained(str(base))
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    return tokenizer, model.eval()


def encode(tokenizer, model, texts: Sequence[str]):
    """Mean-pooled, L2-normalised vectors (a torch tensor; gradients flow when the model trains)."""
    import torch

    batch = tokenizer(list(texts), padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt")
    hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
    return torch.nn.functional.normalize(pooled, dim=-1)
