"""Shell completion generated from the parser, and `--help` in colour on a terminal only."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from precision_doctor.cli.app import build_parser
from precision_doctor.cli.completion import script_for

ESCAPES = re.compile(r"\x1b\[[0-9;]*m")


def complete(tmp_path, *words: str) -> list[str]:
    """What bash offers for the last word of `precision-doctor WORDS...`, with the generated script loaded."""
    script = tmp_path / "complete.bash"
    script.write_text(script_for(build_parser(), "bash"))
    line = ["precision-doctor", *words]
    quoted = " ".join(f"'{w}'" for w in line)
    program = (
        f"source {script}\nCOMP_WORDS=({quoted})\nCOMP_CWORD={len(line) - 1}\n"
        '_precision_doctor\nprintf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, cwd=tmp_path, check=True)
    return [w for w in done.stdout.splitlines() if w]


def test_bash_completes_commands_options_and_their_values(tmp_path):
    (tmp_path / "train.py").write_text("")
    assert complete(tmp_path, "ch") == ["check"]
    assert "--target" in complete(tmp_path, "check", "--tar")
    assert {"a100", "a10g", "a100-80gb"} <= set(complete(tmp_path, "check", "--target", "a10"))
    assert complete(tmp_path, "check", "--format", "j") == ["json"]
    assert complete(tmp_path, "check", "--fail-on", "w") == ["warning"]
    assert "PD201" in complete(tmp_path, "check", "--select", "PD2")
    assert "PD201" in complete(tmp_path, "rule", "PD20")
    assert complete(tmp_path, "check", "--jobs", "") == []  # a number: nothing to offer, no file names
    assert complete(tmp_path, "check", "tr") == ["train.py"]
    assert complete(tmp_path, "memory", "--model", "tr") == ["train.py"]  # a config folder or an id


def test_every_option_of_every_command_is_offered(tmp_path):
    parser = build_parser()
    commands = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices
    for name, sub in commands.items():
        offered = set(complete(tmp_path, name, "-"))
        assert {o for a in sub._actions for o in a.option_strings} == offered, name


def test_zsh_and_fish_scripts_name_the_same_options():
    parser = build_parser()
    zsh, fish = script_for(parser, "zsh"), script_for(parser, "fish")
    assert "bashcompinit" in zsh and "_precision_doctor" in zsh
    assert "-l cache-dir -r -F" in fish and "-l jobs -s j -r -f" in fish
    assert "__fish_use_subcommand -a check" in fish


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_completion_command_prints_the_script(shell):
    done = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "completion", shell], capture_output=True, text=True, check=True
    )
    assert "precision-doctor" in done.stdout and "cache-dir" in done.stdout


def test_help_is_coloured_on_a_terminal_only_and_laid_out_alike():
    def help_text(**env: str) -> str:
        clean = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
        done = subprocess.run(
            [sys.executable, "-m", "precision_doctor", "check", "--help"],
            capture_output=True,
            text=True,
            env={**clean, **env, "COLUMNS": "100"},
        )
        return done.stdout

    plain, forced = help_text(), help_text(FORCE_COLOR="1")
    assert "\x1b[" not in plain  # a pipe: no escapes
    assert "\x1b[36m--target\x1b[0m" in forced and "\x1b[1moptions:\x1b[0m" in forced
    assert ESCAPES.sub("", forced) == plain  # colour added to the laid-out text, never moving a column
    assert "\x1b[" not in help_text(FORCE_COLOR="1", NO_COLOR="1")


def test_bash_completes_the_forms_people_type(tmp_path):
    (tmp_path / "my dir").mkdir()
    (tmp_path / "my dir" / "train.py").write_text("")
    assert complete(tmp_path, "check", "my") == ["my dir"]  # one word, spaces and all
    assert complete(tmp_path, "check", "my dir/t") == ["my dir/train.py"]
    assert {"a100", "a10g"} <= set(complete(tmp_path, "check", "--target", "=", "a10"))  # `--target=a10`
    assert complete(tmp_path, "check", "--format", "=", "") == ["text", "json", "sarif", "concise", "github"]
    assert "cpu" in complete(tmp_path, "check", "--target", "c")
    assert "PD201,PD202" in complete(tmp_path, "check", "--select", "PD201,PD20")
    assert complete(tmp_path, "completion", "") == ["bash", "zsh", "fish"]


@pytest.mark.skipif(not shutil.which("zsh"), reason="zsh is not installed")
def test_the_zsh_script_loads_in_a_bare_zsh_without_errors(tmp_path):
    script = tmp_path / "complete.zsh"
    script.write_text(script_for(build_parser(), "zsh"))
    done = subprocess.run(["zsh", "-f", "-c", f"source {script}"], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0 and not done.stderr, done.stderr


@pytest.mark.skipif(not shutil.which("fish"), reason="fish is not installed")
def test_the_fish_script_parses(tmp_path):
    script = tmp_path / "complete.fish"
    script.write_text(script_for(build_parser(), "fish"))
    done = subprocess.run(["fish", "--no-execute", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
