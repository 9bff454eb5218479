"""minutia's application layer, in floors (lowest first; a floor imports only the floors below it, checked by
tests/test_import_layers.py):

- ``platform``: settings, the encrypted store, audit, metrics, cost, canaries, models, the Ray cluster;
- ``text``: transcripts, sentences, normalised words, entities, speaker names, personal data;
- ``answering``: questions read, lines found and answered, action items, the summary;
- ``llm``: the engine, the meeting's KV context, the batch assistant;
- ``library``: the meeting library (every meeting read, sealed; asked across);
- ``live``: the meeting session and its parts, events, the runtime, forget;
- ``batch``: recordings to transcripts, batch jobs, exports;
- ``rooms``: the WebRTC bot and the fleet of rooms;
- ``cli``: the ``minutia`` command, one module per command group, above them all (``testing`` holds the test peers).
"""
