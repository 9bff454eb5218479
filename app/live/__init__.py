"""A meeting as it happens: the session and its parts (speech, vision, prefill, answers, checkpoints), its events,
the runtime that builds sessions, forget and lineage. Stands on app.llm and below."""
