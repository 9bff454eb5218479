"""What was said, as text: transcripts and their turns, sentences, normalised words, entities, speaker names and
personal data. Stands on app.platform only."""
