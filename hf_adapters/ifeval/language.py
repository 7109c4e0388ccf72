"""Deterministic language detection with langdetect, without touching its global seed."""

from __future__ import annotations

import functools

from langdetect.detector_factory import PROFILES_DIRECTORY, DetectorFactory
from langdetect.lang_detect_exception import LangDetectException

SEED = 0


@functools.cache
def _factory() -> DetectorFactory:
    # A private factory: its seed is an instance attribute, so ``DetectorFactory.seed`` (the
    # class attribute every caller of ``langdetect.detect`` shares) is left as the caller set it.
    factory = DetectorFactory()
    factory.load_profile(PROFILES_DIRECTORY)
    factory.set_seed(SEED)
    return factory


def detect_language(text: str) -> str | None:
    """The langdetect language code of ``text`` with seed 0, or None when langdetect gives up."""
    detector = _factory().create()
    try:
        detector.append(text)
        return detector.detect()
    except LangDetectException:
        return None
