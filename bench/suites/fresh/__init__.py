"""A vocabulary for the suite generator written afresh, without reading the answering code."""
