"""The transcript normaliser lives in app/textnorm.py (answers use it too); kept importable from here for the
sample scripts that put samples/ on sys.path."""

from app.textnorm import normalize  # noqa: F401
