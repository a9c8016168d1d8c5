"""No secret in any output: credentials planted in every source the doctor reads never reach a report, and
terminal control sequences from a script or a log never reach the terminal."""

import io
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from precision_doctor import engine
from precision_doctor.cli.check import render_data
from precision_doctor.knowledge.versions import CURRENT
from precision_doctor.model.redact import describe_command, printable, redact_text, secret_name
from precision_doctor.probes.collect import System, gather, snapshot_json
from precision_doctor.report.text import render as render_text

from .fake_nvml import FakeNVML, load_machine

ROOT = Path(__file__).resolve().parents[1]

# one marker per source, so a leak names the source that leaked
SECRETS = {
    "argparse default": "PlainArgDefault5531",
    "script kwarg": "hf_KwargSecretAbCdEfGhIjKlMnOpQrSt",
    "script kwarg, plain": "PlainKwargSecret8842",
    "deepspeed json": "hf_DeepSpeedSecretAbCdEfGhIjKlMnOp",
    "deepspeed json, plain": "PlainDsPassword4417",
    "model config.json": "ghp_ModelConfigSecret0123456789abcdef",
    "model config.json, plain": "PlainModelAuth9932",
    "ACCELERATE_* env": "PlainAccelerateEnv6610",
    "ACCELERATE_MIXED_PRECISION": "hf_AccMixedPrecisionAbCdEfGhIjKlMn",
    "NCCL_* env": "PlainNcclEnv2208",
    "TORCH_* env": "PlainTorchEnv7781",
    "MASTER_ADDR": "PlainMasterAddrPw3391",
    "HF_TOKEN": "hf_EnvTokenAbCdEfGhIjKlMnOpQrStUv",
    "accelerate config": "PlainAccConfigToken5004",
    "accelerate config, shaped": "AKIAACCCONFIG0000001",
    "another process": "hf_OtherProcessAbCdEfGhIjKlMnOpQr",
    "another process, plain": "PlainProcessPassword1177",
    "training log": "hf_TrainingLogAbCdEfGhIjKlMnOpQrSt",
    "training log, plain": "PlainLogSecret6654",
}
ESC_TITLE = "\x1b]0;pwned\x07"
ESC_CLEAR = "\x1b[2J"

SCRIPT = f"""\
import argparse
from transformers import AutoModelForCausalLM, TrainingArguments, Trainer

parser = argparse.ArgumentParser()
parser.add_argument("--hub_token", default="{SECRETS["argparse default"]}")
args = parser.parse_args()
model = AutoModelForCausalLM.from_pretrained("model")
targs = TrainingArguments("out", deepspeed="ds.json", bf16=True, hub_token="{SECRETS["script kwarg"]}", push_to_hub=True)
other = TrainingArguments("out2", hub_token=args.hub_token, hub_private_repo=True, report_to="none")
third = TrainingArguments("out3", hub_token="{SECRETS["script kwarg, plain"]}", bf16=True)
Trainer(model=model, args=targs).train()
"""  # noqa: E501


def _plant(tmp_path: Path) -> tuple[Path, dict, Path]:
    """A project with a secret in each file, an HF_HOME with an accelerate config, and an environment."""
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "ds.json").write_text(
        json.dumps(
            {
                "fp16": {"enabled": True},
                "zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}},
                "hub_token": SECRETS["deepspeed json"],
                "wandb": {"password": SECRETS["deepspeed json, plain"]},
            }
        )
    )
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "torch_dtype": "bfloat16",
                "_name_or_path": SECRETS["model config.json"],
                "auth": SECRETS["model config.json, plain"],
                "hidden_size": 64,
            }
        )
    )
    hf_home = tmp_path / "hf"
    (hf_home / "accelerate").mkdir(parents=True)
    (hf_home / "accelerate" / "default_config.yaml").write_text(
        f"distributed_type: MULTI_GPU\nmixed_precision: bf16\nnum_processes: 2\n"
        f"hub_token: {SECRETS['accelerate config']}\naws_access_key_id: {SECRETS['accelerate config, shaped']}\n"
    )
    environ = {
        "HF_HOME": str(hf_home),
        "PATH": "/usr/bin:/bin",
        "ACCELERATE_HUB_TOKEN": SECRETS["ACCELERATE_* env"],
        "ACCELERATE_MIXED_PRECISION": SECRETS["ACCELERATE_MIXED_PRECISION"],
        "NCCL_IB_HCA": SECRETS["NCCL_* env"],
        "TORCH_HOME_TOKEN": SECRETS["TORCH_* env"],
        "MASTER_ADDR": f"https://user:{SECRETS['MASTER_ADDR']}@example.com",
        "HF_TOKEN": SECRETS["HF_TOKEN"],
    }
    log = tmp_path / "train.log"
    log.write_text(
        f"step 1\nRuntimeError: Cannot copy out of meta tensor; --hub_token {SECRETS['training log']} "
        f"password={SECRETS['training log, plain']} {ESC_TITLE}{ESC_CLEAR}\n"
    )
    return tmp_path / "train.py", environ, log


@pytest.fixture
def port_holder():
    """Another process listening on a port, with a token on its command line."""
    with socket.socket() as probe:
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import socket,sys,time; s=socket.socket(); "
            "s.bind(('', int(sys.argv[1]))); s.listen(); print('ready', flush=True); time.sleep(60)",
            str(port),
            "--hub_token",
            SECRETS["another process"],
            "--password",
            SECRETS["another process, plain"],
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        yield port, child.pid
    finally:
        child.kill()
        child.wait()


def _assert_no_secret(text: str, where: str) -> None:
    leaked = [source for source, secret in SECRETS.items() if secret in text]
    assert not leaked, f"{where} shows the secret planted in: {', '.join(leaked)}"


def test_no_secret_in_any_output(tmp_path, port_holder, monkeypatch):
    port, holder_pid = port_holder
    script, environ, log = _plant(tmp_path)
    monkeypatch.chdir(tmp_path)
    launcher = f"torchrun --nproc_per_node 2 --master_port {port} train.py"
    # a known GPU (fake NVML) with the real process table and the real port probe
    system = System(nvml=FakeNVML(load_machine("titan_rtx")["nvml"]))
    facts = gather([str(script)], launcher=launcher, environ=environ, system=system, stack_overrides=CURRENT)
    result = engine.run(facts)

    # the sources were read, and what the rules need survived
    host = facts.machine.host
    assert [(b.port, b.pid) for b in host.busy_ports] == [(port, holder_pid)]
    assert host.busy_ports[0].command == describe_command([sys.executable])
    assert host.accelerate_config == {"distributed_type": "MULTI_GPU", "mixed_precision": "bf16", "num_processes": 2}
    ids = {f.rule_id for f in result.findings}
    assert {"PD110", "PD501"} <= ids  # the busy port, and fp16 in ds.json against bf16=True
    pd110 = next(f for f in result.findings if f.rule_id == "PD110")
    assert f"by pid {holder_pid} ({describe_command([sys.executable])})" in pd110.message
    assert facts.scripts[0].local_configs["model"]["model_type"] == "llama"

    outputs = {fmt: render_data(fmt, result, facts, no_color=True) for fmt in ("text", "json", "sarif")}
    terminal = io.StringIO()
    render_text(result, facts, Console(file=terminal, force_terminal=True, width=200))
    outputs["text on a terminal"] = terminal.getvalue()
    outputs["snapshot"] = snapshot_json(facts.machine, facts.stack)
    assert SECRETS["script kwarg"][:8] in SCRIPT and "hub_token=" in outputs["text"]  # the excerpt is shown
    for where, text in outputs.items():
        _assert_no_secret(text, where)

    # the command line: this machine's own probes, explain, and the script's findings beside a log
    env = {**environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    runs = {
        "check --format json": ["check", "train.py", "--launcher", launcher, "--format", "json", "--include-facts"],
        "check --format sarif": ["check", "train.py", "--launcher", launcher, "--format", "sarif"],
        "check (text)": ["check", "train.py", "--launcher", launcher, "--target", "titan-rtx"],
        "snapshot": ["snapshot", "--launcher", launcher],
        "explain": ["explain", str(log), "--script", "train.py", "--target", "titan-rtx"],
        "explain --format json": ["explain", str(log), "--format", "json"],
    }
    for where, args in runs.items():
        proc = subprocess.run(
            [sys.executable, "-m", "precision_doctor", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode in (0, 1), (where, proc.stderr)
        _assert_no_secret(proc.stdout + proc.stderr, where)
    # the JSON facts of this machine's own probe still name the holder of the port
    proc = subprocess.run(
        [sys.executable, "-m", "precision_doctor", *runs["check --format json"]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    busy = json.loads(proc.stdout)["facts"]["machine"]["host"]["busy_ports"]
    assert {"port": port, "pid": holder_pid}.items() <= busy[0].items()


def test_control_sequences_never_reach_the_terminal(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "from transformers import AutoModelForCausalLM, TrainingArguments, Trainer\n"
        "model = AutoModelForCausalLM.from_pretrained('gpt2')\n"
        f"args = TrainingArguments('out{ESC_TITLE}', bf16=True)  # [red]{ESC_CLEAR}\u202e\n"
        "Trainer(model=model, args=args).train()\n"
    )
    log = tmp_path / "train.log"
    log.write_text(f"RuntimeError: Cannot copy out of meta tensor {ESC_TITLE}{ESC_CLEAR}[red]x[/red]\u202e\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    for args in (["check", str(script), "--target", "titan-rtx"], ["explain", str(log)]):
        proc = subprocess.run(
            [sys.executable, "-m", "precision_doctor", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode in (0, 1), proc.stderr
        assert "\x1b" not in proc.stdout and "\u202e" not in proc.stdout
        assert "\\x1b]0;pwned\\x07" in proc.stdout  # shown, as an escape
        assert "[red]" in proc.stdout  # markup in a line is shown literally


def test_redaction_keeps_what_is_not_a_secret():
    assert not secret_name("tokenizer") and not secret_name("pad_token_id") and not secret_name("max_new_tokens")
    assert secret_name("hub_token") and secret_name("WANDB_API_KEY") and secret_name("use_auth_token")
    kept = (
        "tok = AutoTokenizer.from_pretrained(name, token=args.hub_token, use_auth_token=True)",
        "KeyError: 'pad_token'",
        "pad_token_id=50256, key=lambda x: x",
        "revision='4a8b3c2d1e0f'",
    )
    for line in kept:
        assert redact_text(line) == line
    assert redact_text("cmd --hub_token abc123def --lr 1") == "cmd --hub_token <redacted> --lr 1"
    assert redact_text("git clone https://bob:s3cr3t@github.com/x") == "git clone https://bob:<redacted>@github.com/x"
    assert printable("a\tb\x1b[2Jc\x9b\u2066") == "a\tb\\x1b[2Jc\\x9b\\u2066"
    assert describe_command(["/opt/venv/bin/python3", "-m", "torch.distributed.run", "--hub_token", "x"]) == "torchrun"
    assert (
        describe_command(["python", "-m", "vllm.entrypoints.openai.api_server", "--api-key", "x"]) == "python -m vllm"
    )


def test_fix_shows_control_characters_in_its_diff_as_escapes():
    from types import SimpleNamespace

    from precision_doctor.fix.edits import FileChange
    from precision_doctor.fix.session import Step, _show

    finding = SimpleNamespace(
        severity="error",
        rule_id="PD101",
        name="bf16-on-unsupported-gpu",
        message="m",
        fix=SimpleNamespace(safe=True, description="d", notes=()),
    )
    change = FileChange(
        "train.py",
        f"args = TrainingArguments('out{ESC_TITLE}', bf16=True)\n",
        f"args = TrainingArguments('out{ESC_TITLE}', fp16=True)\n",
    )
    shown = io.StringIO()
    _show(Console(file=shown, width=200), Step([finding], [change]))
    assert "\x1b" not in shown.getvalue() and "\\x1b]0;pwned\\x07', fp16=True)" in shown.getvalue()


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("[]\\/#@ab Z1:=")), max_size=24) | st.text(max_size=24))
def test_markup_is_escaped_as_rich_escapes_it(text):
    """The report's markup is escaped without importing rich (a plain report needs none of it), exactly as rich's
    own escape does it, so that the styled report rich renders shows the same text."""
    from rich.markup import escape

    from precision_doctor.model.redact import escape_markup

    assert escape_markup(text) == escape(text)


@settings(max_examples=400, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("[]\\/#@ab Z1:=")), max_size=24)
    | st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), max_size=24),
    st.text(alphabet=st.sampled_from(list("[]\\/ab")), max_size=8),
)
def test_a_plain_report_shows_the_text_rich_shows(text, other):
    """A report written without rich (piped, NO_COLOR) shows what rich shows for the same markup: brackets and
    backslashes in file names and source lines (`trail\\`, `a\\[red]b`) included. (Control characters are made
    visible before they reach markup: `redact.shown`.)"""
    from rich.markup import render

    from precision_doctor.model.redact import escape_markup
    from precision_doctor.report.text import plain

    markup = f"[bold]{escape_markup(text)}[/bold]  {escape_markup(other)} [dim]({escape_markup(text)})[/dim]"
    assert plain(markup) == render(markup, emoji=False).plain
