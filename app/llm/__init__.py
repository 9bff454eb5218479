"""The local LLM: the engine, the meeting's KV context (kvstore), drift checks and the batch assistant that lets
the model write free-form answers. Stands on app.answering and below."""
