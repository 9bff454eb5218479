"""Gradio live meeting page."""
