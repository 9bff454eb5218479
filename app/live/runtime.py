"""Models shared by every meeting of one process, and the meetings themselves.

Loading Whisper and the LLM takes seconds and hundreds of MB each; a page with several tabs or a
bot in several rooms loads them once here and gives every session the same instances (each model
serialises its own calls with a lock).
"""

from __future__ import annotations

import logging
import re
import shutil
import threading
import uuid
from typing import TYPE_CHECKING, Any, Callable

from app.platform.canary import rollout_for
from app.platform.config import Settings, tiered_cache_config
from encoders.errors import InputError

if TYPE_CHECKING:
    from app.llm.engine import LLMEngine
    from app.text.pii import PIIDetector
    from app.live.session import MeetingSession
    from app.live.session_speech import SpeechRecogniser, StreamingDiarizer
    from app.live.session_vision import SlidePipeline

log = logging.getLogger("minutia.runtime")
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


class Runtime:
    """The settings' models, built on first use; ``transcriber``, ``engine``, ``diarizer`` and ``vision`` (factories,
    one diarizer and one vision pipeline per session) replace them, so that sessions run on small stand-ins in tests."""

    def __init__(self, settings: Settings, *, transcriber: SpeechRecogniser | None = None,
                 engine: LLMEngine | None = None, diarizer: Callable[[], StreamingDiarizer] | None = None,
                 vision: Callable[[], SlidePipeline] | None = None) -> None:
        self.settings = settings
        self._sessions: dict[str, MeetingSession] = {}
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()
        given = {"asr": transcriber, "llm": engine}
        self._models: dict[str, Any] = {name: model for name, model in given.items() if model is not None}
        self._diarizer = diarizer
        self._vision = vision
        self._claims: dict[str, Any] = {}  # session id -> SessionClaim, for sessions that write the store
        self.canary = rollout_for(settings, self._audit_canary)  # a KV preset on a share of new sessions, or None

    # ------------------------------------------------------------------ shared models
    def _shared(self, name: str, load: Callable[[], Any]) -> Any:
        """Load a model once, even when several sessions ask for it at the same moment."""
        if name not in self._models:
            with self._load_lock:
                if name not in self._models:
                    self._models[name] = load()
        return self._models[name]

    @property
    def engine(self) -> "LLMEngine":
        from app.llm.engine import LLMEngine

        return self._shared("llm", lambda: LLMEngine.from_settings(self.settings.llm, self.settings.home, self.settings.kv))

    @property
    def pii_detector(self) -> "PIIDetector | None":
        """The detector the ``pii`` settings ask for (None with the policy off); loaded once."""
        from app.text.pii import detector_for

        return self._shared("pii", lambda: detector_for(self.settings.pii))

    @property
    def transcriber(self) -> "SpeechRecogniser":
        from app.platform.models import EMBEDDED_ASR, resolve_model
        from encoders.asr import Transcriber

        asr = self.settings.asr

        def load() -> Transcriber:
            folder = resolve_model(asr.model, self.settings.home, "ASR", EMBEDDED_ASR, "model.bin")
            return Transcriber(folder, asr.device, asr.compute_type, asr.cpu_threads)

        return self._shared("asr", load)

    def online_diarizer(self) -> "StreamingDiarizer":
        """A diarizer per session (its speakers are those of one stream)."""
        if self._diarizer is not None:
            return self._diarizer()
        from encoders.online_diarize import make_online_diarizer

        diarization = self.settings.diarization
        diarizer = make_online_diarizer(diarization.backend, diarization.model, diarization.live_embedding)
        diarizer.max_speakers = diarization.max_speakers
        return diarizer

    def vision_pipeline(self) -> "SlidePipeline":
        """A vision pipeline per session (its keyframe state is per stream); slides are embedded by one shared
        CLIP model only when ``vision.clip_checkpoint`` gives pretrained weights."""
        if self._vision is not None:
            return self._vision()
        from encoders.vision import ClipEmbedder, ClipOptions, SlideReader, VisionPipeline

        vision = self.settings.vision
        embedder = None
        if vision.clip_checkpoint is not None:
            options = ClipOptions(model=vision.clip_model, checkpoint=vision.clip_checkpoint)
            embedder = self._shared("clip", lambda: ClipEmbedder(options))
        return VisionPipeline(reader=SlideReader(), embedder=embedder)

    def warm_up(self) -> None:
        """Load the models now rather than on the first session's first words."""
        _ = self.transcriber, self.engine, self.pii_detector

    def session_store(self, create_key: bool = True):
        """The encrypted store durable sessions are saved to (one per runtime)."""
        from app.platform.store import open_session_store

        return self._shared("store", lambda: open_session_store(self.settings, create_key=create_key))

    def cold_tier(self, session_id: str, source: str = ""):
        """A meeting's cold tier (kvstore.cold): staging + host memory (sealed unless kv.cold.encrypt_host is
        off), then the encrypted session store; its blocks are tagged with ``source`` (the meeting's)."""
        from kvstore.cold import ColdTier
        from kvstore.placement import PlacementPolicy, Tier, TierPlacement
        from kvstore.tier_guards import WatermarkController
        from app.platform.store import host_cold_tier
        from kvstore.stores.memory import MemoryStore

        cold = self.settings.kv.cold
        if not (cold.enabled and self.settings.kv.enabled and self.settings.kv.compress):
            return None
        mib = 1 << 20
        device = "cuda" if self.engine.model.device.type == "cuda" else "cpu"
        tiers = {Tier.DEVICE: MemoryStore(device, tier="device"), Tier.HOST: host_cold_tier(self.settings)}
        if cold.spill_to_store:  # opened on the first spill only (key, audit log, Redis)
            from app.platform.store import LazyStore, cold_folder, open_cold_store

            if self.settings.store.backend == "redis":
                tiers[Tier.REDIS] = LazyStore(self.session_store, "redis")
            else:  # an encrypted segment log of its own, removed with the meeting
                folder = cold_folder(self.settings, session_id)

                def open_segments():
                    return open_cold_store(self.settings, session_id, log=getattr(self.session_store(), "log", None))

                def remove(store) -> None:
                    if store is not None:
                        store.close()
                    shutil.rmtree(folder, ignore_errors=True)

                tiers[Tier.DISK] = LazyStore(open_segments, "disk", on_close=remove)
        placement = TierPlacement(tiers, f"{session_id}.cold", WatermarkController(int(cold.staging_mib * mib)),
                                  PlacementPolicy(host_bytes=int(cold.host_mib * mib)))
        return ColdTier(placement, recall_top_k=cold.recall_top_k, source=source, exact_copies=cold.exact_copies)

    # ------------------------------------------------------------------ sessions
    def new_session(self, session_id: str | None = None, source: str = "live", autosave: bool = False,
                    replace: bool = False, library: bool = False) -> "MeetingSession":
        """A new meeting; ``autosave`` saves it to the session store as it goes (see ``minutia resume``).
        A saved meeting of that id is never overwritten unless ``replace``. A saved meeting, or one opened with
        ``library``, is recorded in the meeting library when it ends."""
        from app.live.session import MeetingSession

        session_id = session_id or uuid.uuid4().hex[:12]
        if not _SESSION_ID.fullmatch(session_id):
            raise InputError(f"session ids are 1-64 letters, digits, '-' or '_'; got {session_id!r}")
        with self._lock:
            if session_id in self._sessions:
                raise InputError(f"session {session_id} already exists")
        claim = self._claim(session_id, refuse_saved=not replace) if autosave else None
        try:
            settings = self.settings_for(session_id)
            with self._lock:
                if session_id in self._sessions:
                    raise InputError(f"session {session_id} already exists")
                session = MeetingSession(self, session_id, source, autosave=autosave, settings=settings,
                                         library=library)
                self._sessions[session_id] = session
                if claim is not None:
                    self._claims[session_id] = claim
        except BaseException:
            if claim is not None:
                claim.release()
            with self._lock:
                live = session_id in self._sessions
            if self.canary is not None and not live:  # a live session of that id keeps its arm
                self.canary.forget(session_id)
            raise
        log.info("session %s opened (%s)", session_id, source)
        return session

    def settings_for(self, session_id: str) -> Settings:
        """A session's settings: the runtime's, with the canary's KV changes when the session is in its share."""
        if self.canary is None:
            return self.settings
        kv = self.canary.kv_for(self.settings.kv, session_id)
        return self.settings if kv is self.settings.kv else self.settings.model_copy(update={"kv": kv})

    def _canary_ended(self, session: "MeetingSession") -> None:
        """An ending session's golden signals go to the canary, which decides when it has enough of both arms. A
        failure here is logged: it must not keep the session from closing."""
        if self.canary is None:
            return
        try:
            session.settle()  # the last answer's drift is measured after it
            self.canary.ended(session.session_id, session.snapshot().kv or {})
            self.canary.evaluate()
        except Exception:
            log.exception("canary: session %s's signals were not taken", session.session_id)

    def _audit_canary(self, decision) -> None:
        self.session_store().log.record("*", "rollout", [], decision.name, state=decision.state,
                                        reason=decision.reason, evidence=decision.evidence)

    def _claim(self, session_id: str, refuse_saved: bool):
        """Hold the session's name against other processes; with ``refuse_saved``, refuse a name already saved."""
        from app.platform.store import SessionClaim
        from kvstore.persist import MANIFEST

        claim = SessionClaim(self.settings.home, session_id)
        try:
            if refuse_saved and self.session_store().contains(session_id, MANIFEST):
                raise InputError(f"session {session_id} is already saved: `minutia resume {session_id}` continues it, "
                                 "--replace overwrites it")
        except BaseException:
            claim.release()
            raise
        return claim

    def resume_session(self, session_id: str, autosave: bool = False) -> "MeetingSession":
        """Continue a saved meeting: its KV cache is loaded, not prefilled again."""
        store = self.session_store(create_key=False)
        with self._lock:
            if session_id in self._sessions:
                raise InputError(f"session {session_id} is already open")
        claim = self._claim(session_id, refuse_saved=False) if autosave else None  # it writes the session again
        try:
            session = self._resume(store, session_id, autosave)
            if claim is not None:
                with self._lock:
                    self._claims[session_id] = claim
        except BaseException:
            if claim is not None:
                claim.release()
            raise
        log.info("session %s resumed at %.1f s", session_id, session.stream_seconds)
        return session

    def _resume(self, store, session_id: str, autosave: bool) -> "MeetingSession":
        from app.live.session import MeetingSession
        from app.live.session_store import SavedMeeting
        from kvstore.persist import SessionNotFound, load_session
        from kvstore.stores import StoreError

        made: list = []

        def cold_for(metadata: Any):  # the cold tier tags its blocks with the meeting's source (shredding goes by it)
            made.append(self.cold_tier(session_id, (metadata or {}).get("source", "")))
            return made[-1]

        try:
            cache, metadata = load_session(store, session_id, self.engine.model.config,
                                           settings=tiered_cache_config(self.settings.kv), cold_tier_for=cold_for)
        except (SessionNotFound, StoreError) as exc:
            for cold in made:
                if cold is not None:
                    cold.close()
            if isinstance(exc, SessionNotFound):
                raise InputError(str(exc)) from None
            raise InputError(f"session {session_id!r} cannot be resumed: {exc}") from None
        with self._lock:
            if session_id in self._sessions:
                cache.attach_cold_tier(None)
                raise InputError(f"session {session_id} is already open")
            session = MeetingSession(self, session_id, "resumed", autosave=autosave,
                                     restored=SavedMeeting(cache, metadata or {}),
                                     settings=self._settings_kept_by((metadata or {}).get("pii")))
            self._sessions[session_id] = session
        return session

    def _settings_kept_by(self, saved_pii: dict | None):
        """This runtime's settings, under the personal-data policy a meeting was saved with when that one keeps
        more out (zero-in-kv over mask-in-exports over off): resuming without the config does not undo it."""
        from app.platform.config import PIISettings

        if not saved_pii:
            return None
        saved = PIISettings.model_validate(saved_pii)
        order = ("off", "mask-in-exports", "zero-in-kv")
        if order.index(saved.policy) <= order.index(self.settings.pii.policy):
            return None
        return self.settings.model_copy(update={"pii": saved})

    def session(self, session_id: str) -> "MeetingSession":
        with self._lock:
            return self._sessions[session_id]

    def sessions(self) -> list["MeetingSession"]:
        with self._lock:
            return list(self._sessions.values())

    def close_session(self, session_id: str) -> None:
        with self._lock:
            session = self._sessions.pop(session_id, None)
            claim = self._claims.pop(session_id, None)
        try:
            if session is not None:
                try:
                    self._canary_ended(session)
                finally:
                    session.close()
                log.info("session %s closed", session_id)
        finally:
            if claim is not None:
                claim.release()

    def close(self) -> None:
        for session in self.sessions():
            self.close_session(session.session_id)
        store = self._models.pop("store", None)
        if store is not None:
            store.close()
