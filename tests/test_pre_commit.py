"""The pre-commit hook as a user pastes it: the real `pre-commit` tool installs this repository (a clone of the
working tree, by file URL and commit) into its own environment and runs the hook on staged files, including an
empty `__init__.py` and a helper module staged alone.

Offline: the hook's environment gets the doctor from the clone and its dependencies from the environment running
the tests (PYTHONPATH to its site-packages, pip told not to fetch them)."""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BAD = (
    "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float16)\n"
    "Trainer(model=model, args=TrainingArguments('out', fp16=True)).train()\n"
)

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(*args, cwd):
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def working_tree_repo(dest: Path) -> str:
    """This working tree (tracked and new files, as they are now) committed into a fresh repository: its commit."""
    listed = git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT).split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file() and not rel.startswith(("tests/", "fixtures/", "benchmarks/")):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    git("init", "-q", cwd=dest)
    git("add", "-A", cwd=dest)
    git("commit", "-q", "-m", "doctor", cwd=dest)
    return git("rev-parse", "HEAD", cwd=dest)


@pytest.fixture(scope="module")
def hook_project(tmp_path_factory):
    pytest.importorskip("pre_commit")
    doctor_repo = tmp_path_factory.mktemp("doctor")
    rev = working_tree_repo(doctor_repo)
    project = tmp_path_factory.mktemp("project")
    git("init", "-q", cwd=project)
    (project / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {doctor_repo.as_uri()}\n    rev: {rev}\n    hooks:\n      - id: precision-doctor\n"
        f"        args: [--target, t4]\n"
    )
    git("add", ".pre-commit-config.yaml", cwd=project)
    git("commit", "-q", "-m", "config", cwd=project)
    # pip reads PIP_NO_BUILD_ISOLATION inverted: "0" turns build isolation off (setuptools from PYTHONPATH)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(
        PRE_COMMIT_HOME=str(tmp_path_factory.mktemp("pre-commit-home")),
        PIP_NO_DEPS="1",
        PIP_NO_BUILD_ISOLATION="0",
        PIP_NO_INDEX="1",
        PYTHONPATH=sysconfig.get_paths()["purelib"],
        HF_HUB_OFFLINE="1",
    )

    def run_hook(*staged: tuple[str, str]) -> subprocess.CompletedProcess:
        for rel, text in staged:
            (project / rel).parent.mkdir(parents=True, exist_ok=True)
            (project / rel).write_text(text)
        git("reset", "-q", cwd=project)
        git("add", *[rel for rel, _ in staged], cwd=project)
        return subprocess.run(
            [sys.executable, "-m", "pre_commit", "run"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    return run_hook


def test_hook_passes_an_empty_init_and_a_helper_module_staged_alone(hook_project):
    proc = hook_project(("pkg/__init__.py", ""))
    assert proc.returncode == 0 and "Passed" in proc.stdout, proc.stdout + proc.stderr
    proc = hook_project(("pkg/helpers.py", "import torch\n\ndef ones():\n    return torch.ones(2)\n"))
    assert proc.returncode == 0 and "Passed" in proc.stdout, proc.stdout + proc.stderr


def test_hook_fails_the_commit_on_an_error_finding(hook_project):
    proc = hook_project(("train.py", BAD))
    assert proc.returncode == 1 and "Failed" in proc.stdout and "PD201" in proc.stdout, proc.stdout + proc.stderr


def test_readme_snippet_is_the_config_the_test_runs():
    """The README's pre-commit snippet names the hook and the arguments this test passes, and a rev that is a
    real ref of this repository or an explicit placeholder to replace (no tag that does not exist)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    snippet = readme[readme.index("**pre-commit**") :]
    snippet = snippet[snippet.index("```yaml") + 7 : snippet.index("```", snippet.index("```yaml") + 7)]
    assert "id: precision-doctor" in snippet
    rev = next(line.split(":", 1)[1].strip() for line in snippet.splitlines() if line.strip().startswith("rev:"))
    tags = git("tag", "--list", cwd=ROOT).split()
    assert rev in tags or rev.startswith("<"), f"rev {rev!r} is neither a tag of this repository nor a placeholder"
