"""`--hub`, tested against a local server that answers like the Hub: only with the opt-in, only config.json and
the safetensors index, kept for the next run, the token sent to the Hub's host only and never shown."""

import http.server
import json
import threading

import pytest

from precision_doctor import engine
from precision_doctor.knowledge.versions import CURRENT
from precision_doctor.model.facts import CheckpointSource
from precision_doctor.probes.checkpoint import give_model_configs
from precision_doctor.probes.collect import gather
from precision_doctor.report.json_report import render

from .conftest import machine_probes
from .test_model_config import LLAMA_7B, SCRIPT

TOKEN = "hf_testtokenabcdefghijklmnopqrstuvwxyz"
INDEX = {"metadata": {"total_size": 13476839424}, "weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors"}}


class Hub(http.server.BaseHTTPRequestHandler):
    seen: list[tuple[str, str]] = []  # (path, Authorization header)

    def do_GET(self):  # noqa: N802 - the handler's protocol
        Hub.seen.append((self.path, self.headers.get("Authorization", "")))
        port = self.server.server_address[1]
        if self.path.startswith("/someone/llama-copy/resolve/main/"):
            name = self.path.rsplit("/", 1)[1]
            return self._json({"config.json": LLAMA_7B, "model.safetensors.index.json": INDEX}.get(name))
        if self.path.startswith("/gated/llama/resolve/main/"):
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self._status(401)
            return self._json(LLAMA_7B if self.path.endswith("config.json") else None)
        if self.path == "/moved/llama/resolve/main/config.json":  # to another host, as the Hub's CDN
            self.send_response(302)
            self.send_header("Location", f"http://localhost:{port}/cdn/config.json")
            self.end_headers()
            return None
        if self.path == "/cdn/config.json":
            return self._json(LLAMA_7B)
        return self._status(404)

    def _json(self, value):
        if value is None:
            return self._status(404)
        body = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        return None

    def _status(self, code):
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def hub(monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Hub.seen = []
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    yield server
    server.shutdown()
    server.server_close()
    give_model_configs([])


def run(tmp_path, model_id, hub_on=True):
    (tmp_path / "train.py").write_text(SCRIPT)
    give_model_configs([], hub=hub_on)
    facts = gather(
        [],
        target="a100-40gb",
        launcher=f"torchrun train.py --model_name_or_path {model_id}",
        stack_overrides=dict(CURRENT),
        **machine_probes(),
    )
    result = engine.run(facts)
    return result, facts, facts.scripts[0].checkpoints[model_id]


def test_nothing_is_fetched_without_the_opt_in(tmp_path, monkeypatch, hub):
    monkeypatch.chdir(tmp_path)
    _, _, checkpoint = run(tmp_path, "someone/llama-copy", hub_on=False)
    assert checkpoint.source == CheckpointSource.UNKNOWN and Hub.seen == []


def test_fetched_once_then_read_from_the_state_folder(tmp_path, monkeypatch, hub):
    monkeypatch.chdir(tmp_path)
    result, _, checkpoint = run(tmp_path, "someone/llama-copy")
    assert checkpoint.source == CheckpointSource.HUB and checkpoint.hidden_size == 4096
    assert "PD603" in {f.rule_id for f in result.findings}  # a 7B full fine-tune on a 40 GB A100
    assert {path for path, _ in Hub.seen} == {
        "/someone/llama-copy/resolve/main/config.json",
        "/someone/llama-copy/resolve/main/model.safetensors.index.json",
    }
    hub.shutdown()  # offline now: the kept copy answers
    _, _, again = run(tmp_path, "someone/llama-copy")
    assert again.source == CheckpointSource.HUB and again.hidden_size == 4096


def test_a_gated_model_needs_a_token_sent_to_the_hub_only(tmp_path, monkeypatch, hub):
    monkeypatch.chdir(tmp_path)
    _, _, checkpoint = run(tmp_path, "gated/llama")
    assert checkpoint.source == CheckpointSource.UNKNOWN and "HF_TOKEN" in checkpoint.detail
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    result, facts, checkpoint = run(tmp_path, "gated/llama")
    assert checkpoint.source == CheckpointSource.HUB
    assert TOKEN not in render(result, facts)
    Hub.seen.clear()
    _, _, moved = run(tmp_path, "moved/llama")
    assert moved.source == CheckpointSource.HUB
    assert dict(Hub.seen)["/moved/llama/resolve/main/config.json"] == f"Bearer {TOKEN}"
    assert dict(Hub.seen)["/cdn/config.json"] == ""  # the redirect to another host carries no token


def test_offline_mode_and_unknown_ids_fetch_nothing(tmp_path, monkeypatch, hub):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _, _, checkpoint = run(tmp_path, "someone/llama-copy")
    assert checkpoint.source == CheckpointSource.UNKNOWN and "HF_HUB_OFFLINE" in checkpoint.detail
    monkeypatch.delenv("HF_HUB_OFFLINE")
    _, _, missing = run(tmp_path, "nobody/nothing")
    assert missing.source == CheckpointSource.UNKNOWN and "no config.json" in missing.detail
    assert Hub.seen == [("/nobody/nothing/resolve/main/config.json", "")]
