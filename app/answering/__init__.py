"""Questions answered from what was said: reading the question, finding the lines (BM25, MiniLM, the meeting
ranker), the typed answers, action items and the summary. Stands on app.text and app.platform; the LLM is handed
in as a callable."""
