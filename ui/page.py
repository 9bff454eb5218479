"""The Gradio live meeting page's layout: its tabs and controls, wired to the handlers of :class:`ui.app.LivePage`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import gradio as gr

from app.text.transcript import Transcript
from ui import render
from ui.app import LivePage
from ui.inputs import UPLOAD_TYPES
from ui.meetings import build_meetings_tab
from ui.page_text import HOW_TO
from ui.settings import UISettings

if TYPE_CHECKING:
    from app.live.runtime import Runtime

X_TITLE = "meeting time (s)"
PLOT_HEIGHT = 260


def build_page(runtime: Runtime, ui_settings: UISettings | None = None) -> gr.Blocks:
    """The live meeting page for ``runtime``; ``page.live`` is the :class:`LivePage` behind it."""
    page = LivePage(runtime, ui_settings)
    ui = page.ui
    settings = runtime.settings
    samples = list(page.samples)
    with gr.Blocks(title="minutia — live meeting", analytics_enabled=False) as demo:
        gr.Markdown("# minutia — live meeting")
        status = gr.Markdown(render.status_line(None), elem_id="mt-status")
        with gr.Accordion("How to use this page", open=False, elem_id="mt-howto"):
            gr.Markdown(HOW_TO)
        with gr.Tabs():
            with gr.Tab("Meeting", elem_id="mt-tab-meeting"):
                with gr.Row():
                    with gr.Column(scale=3):
                        with gr.Tab("Recording"):
                            with gr.Row():
                                sample = gr.Dropdown(samples, value=samples[0] if samples else None, label="Sample meeting", elem_id="mt-sample")
                                speed = gr.Slider(0, 16, value=ui.replay_speed, step=0.5, label="Replay speed (x real time; 0 = fastest)", elem_id="mt-speed")
                            upload = gr.File(label=f"…or upload a recording (≤ {ui.max_upload_mb:g} MB)", type="filepath",
                                             file_types=UPLOAD_TYPES, elem_id="mt-upload")
                            replay_button = gr.Button("Replay live", variant="primary", elem_id="mt-replay")
                        with gr.Tab("Microphone / webcam"):
                            mic = gr.Audio(sources=["microphone"], streaming=True, label="Microphone", elem_id="mt-mic")
                            cam = gr.Image(sources=["webcam"], streaming=True, label="Webcam (slides)", elem_id="mt-cam",
                                           webcam_options=gr.WebcamOptions(mirror=False))  # slide text must not come out mirrored
                        gr.Markdown("### Live transcript")
                        search = gr.Textbox(placeholder="Search the transcript (words or a speaker), then Enter", show_label=False,
                                            elem_id="mt-search")
                        transcript = gr.HTML(render.transcript_html(Transcript(turns=[])), elem_id="mt-transcript")
                        player = gr.HTML("", elem_id="mt-player")  # replaced only when the recording changes: playback goes on
                        slides = gr.Gallery(label="Slides", columns=6, height=160, object_fit="contain", elem_id="mt-slides")
                    with gr.Column(scale=2):
                        chat = gr.Chatbot(label="Ask about the meeting", height=320, elem_id="mt-chat")
                        with gr.Row():
                            question = gr.Textbox(placeholder="e.g. What is the budget for the pilot?", show_label=False, scale=4, elem_id="mt-question")
                            ask_button = gr.Button("Ask", scale=1, elem_id="mt-ask")
                        with gr.Accordion("Summary and action items", open=True):
                            summary = gr.Markdown("_No summary yet._", elem_id="mt-summary")
                            summary_button = gr.Button("Refresh summary", size="sm", elem_id="mt-summary-refresh")
                            actions = gr.Markdown("_No action items yet._", elem_id="mt-actions")
                        with gr.Accordion("Speakers", open=False, elem_id="mt-speakers"):
                            with gr.Row():
                                rename_from = gr.Textbox(placeholder="speaker, e.g. SPEAKER_01", show_label=False, scale=2,
                                                         elem_id="mt-rename-speaker")
                                rename_to = gr.Textbox(placeholder="their name", show_label=False, scale=2,
                                                       elem_id="mt-rename-name")
                                rename_button = gr.Button("Rename", scale=1, elem_id="mt-rename")
                            gr.Markdown("**Forget** removes everything one person has said so far (or, with *screen*, "
                                        "every slide shown so far) from the meeting and from the model's memory "
                                        "(the meeting goes on without it). The first press says what will go; "
                                        "press again to do it.")
                            with gr.Row():
                                forget_box = gr.Textbox(placeholder="name or label, e.g. Bob or SPEAKER_01, or screen",
                                                        show_label=False, scale=3, elem_id="mt-forget-speaker")
                                forget_button = gr.Button("Forget", scale=1, variant="stop", elem_id="mt-forget")
                        with gr.Accordion("Export", open=True):
                            export_button = gr.Button("Export transcript + summary", size="sm", elem_id="mt-export")
                            files = gr.File(label="Files (Markdown, JSON, SRT, VTT; summary.md; slides.md and their images)", file_count="multiple", interactive=False, elem_id="mt-files")
            with gr.Tab("Engine", elem_id="mt-tab-engine"):
                gr.Markdown("How the model remembers this meeting: how much memory it uses against the meeting's "
                            "allowance, where it keeps it, and how often what a question needed was already at hand. "
                            "(For engineers: the model's KV cache, its tiers and its prefetcher.)")
                kv_stats = gr.Markdown(render.kv_stats_markdown({}), elem_id="mt-kv-stats")
                # one plot per row: the legend (up to nine short series names) fits on one line under each
                plot = dict(x="t", x_title=X_TITLE, height=PLOT_HEIGHT, x_lim=[0, 1])
                tier_plot = gr.LinePlot(y="MB", color="series", title="Memory by how exactly it is kept and where, against the allowance", color_title="", elem_id="mt-plot-tier", **plot)
                modality_plot = gr.LinePlot(y="MB", color="series", title="Memory by what it holds (speech, slides, instructions), against the allowance", color_title="", elem_id="mt-plot-modality", **plot)
                ratio_plot = gr.LinePlot(y="ratio", title="Compression: the uncompressed size divided by the size held (above 1 saves memory)", elem_id="mt-plot-ratio", **plot)
                with gr.Accordion("Settings (apply to the next meeting you start)", open=False):
                    model = gr.Textbox(value=settings.llm.model, label="LLM (embedded name or local HF folder)", elem_id="mt-model")
                    budget = gr.Slider(0.05, 1.0, value=settings.kv.budget_ratio, step=0.05, label="Memory allowance for a meeting (share of its uncompressed size)", elem_id="mt-budget")
                    apply_button = gr.Button("Apply", size="sm", elem_id="mt-apply")
            with gr.Tab("Meetings", elem_id="mt-tab-meetings"):
                page.meetings = build_meetings_tab(runtime)

        timer = gr.Timer(ui.poll_seconds)
        tab_outputs = [status, transcript, tier_plot, modality_plot, ratio_plot, kv_stats, slides, actions, summary, player,
                       chat, files]
        timer.tick(page.refresh, outputs=tab_outputs, show_progress="hidden", concurrency_limit=None)
        replay_button.click(page.start_replay, inputs=[sample, upload, speed], outputs=[status, chat], concurrency_limit=None, show_progress="hidden")
        ask_button.click(page.ask, inputs=[question], outputs=[question, chat], concurrency_limit=None, show_progress="hidden")
        question.submit(page.ask, inputs=[question], outputs=[question, chat], concurrency_limit=None, show_progress="hidden")
        search.submit(page.search, inputs=[search], outputs=[transcript], concurrency_limit=None, show_progress="hidden")
        summary_button.click(page.refresh_summary, outputs=[summary], concurrency_limit=None)
        export_button.click(page.export, outputs=[files], concurrency_limit=None)
        rename_button.click(page.rename, inputs=[rename_from, rename_to], outputs=[rename_from, rename_to, status],
                            concurrency_limit=None, show_progress="hidden")
        forget_button.click(page.forget, inputs=[forget_box, chat], outputs=[forget_box, status, chat],
                            concurrency_limit=None, show_progress="hidden")
        apply_button.click(page.apply_settings, inputs=[model, budget], outputs=[status], concurrency_limit=None, show_progress="hidden")
        mic.stream(page.feed_microphone, inputs=[mic], outputs=None, stream_every=0.5, concurrency_limit=None)
        mic.stop_recording(page.stop_microphone, outputs=[status], concurrency_limit=None)
        cam.stream(page.feed_webcam, inputs=[cam], outputs=None, stream_every=1.0, concurrency_limit=None)
        demo.unload(page.close_tab)
    demo.live = page  # type: ignore[attr-defined]
    return demo
