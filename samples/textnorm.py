"""The transcript normaliser lives in app/text/textnorm.py (answers use it too); kept importable from here for the
sample scripts that put samples/ on sys.path."""

from app.text.textnorm import normalize  # noqa: F401
