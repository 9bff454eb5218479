"""Recordings on the command line: the pipeline from a file to a transcript, batch jobs (local or on Ray) and the
files they write. Stands on app.live and below."""
