"""minutia application layer: session engine, LLM engine, CLI."""
