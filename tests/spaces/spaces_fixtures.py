"""Fixtures for the Spaces demo tests: the app module, a tiny saved model, a local server, Chromium."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import build_model, build_tokenizer

ROOT = Path(__file__).resolve().parents[2]
SPACE = ROOT / "spaces_demo"
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def load_app():
    """``spaces_demo/app.py`` imported once as the module ``spaces_demo_app`` (no telemetry)."""
    if "spaces_demo_app" not in sys.modules:
        os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
        if str(SPACE) not in sys.path:  # the app's own modules sit beside it, as they do in the Space
            sys.path.insert(0, str(SPACE))
        spec = importlib.util.spec_from_file_location("spaces_demo_app", SPACE / "app.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["spaces_demo_app"] = module
        spec.loader.exec_module(module)
    return sys.modules["spaces_demo_app"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# Fixtures carry a ``name`` so test modules import them without shadowing (ruff F811).
@pytest.fixture(scope="module", name="app")
def app_fixture():
    return load_app()


@pytest.fixture(scope="module", name="tiny_model_dir")
def tiny_model_dir_fixture(tmp_path_factory) -> str:
    """A tiny random Llama and its tokenizer saved with ``save_pretrained``: a local model path."""
    folder = tmp_path_factory.mktemp("tiny_model")
    tokenizer = build_tokenizer()
    build_model(len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module", name="server_url")
def server_url_fixture(app) -> Iterator[str]:
    """The demo served on a free local port by ``app.launch``, closed after the module's tests."""
    _, url, _ = app.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True)
    try:
        yield url
    finally:
        app.demo.close()


def ensure_chromium() -> Path:
    """Debian's Chromium, installed with apt-get when missing and possible; else the test skips."""
    if CHROMIUM.exists():
        return CHROMIUM
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip(f"{CHROMIUM} is missing and cannot be installed (needs root and apt-get): "
                    "run `apt-get install -y chromium`")
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            pytest.skip(f"`{' '.join(command)}` failed, so there is no browser: {done.stderr.strip()[-300:]}")
    if not CHROMIUM.exists():
        pytest.skip(f"apt-get installed chromium but {CHROMIUM} is still missing")
    return CHROMIUM


@pytest.fixture(scope="module", name="browser_page")
def browser_page_fixture(tmp_path_factory):
    """A Playwright page in Debian's Chromium with a fresh user data dir and the issue's flags."""
    executable = ensure_chromium()
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (Python) is not installed")
    profile = tmp_path_factory.mktemp("chromium_profile")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            user_data_dir=str(profile), executable_path=str(executable), headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1280, "height": 1000},
        )
        try:
            yield context.pages[0] if context.pages else context.new_page()
        finally:
            context.close()
