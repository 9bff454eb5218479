"""The meeting library: every meeting read, sealed in one SQLite file, listed, searched and asked across."""
