"""`precision-doctor completion bash|zsh|fish`: a shell completion script, generated from the command line's own
parser, so it never lists an option the doctor does not take: commands, each command's options, the choices of
an option that has them (`--format`, `--fail-on`), GPU profiles after `--target`/`--compare`, rule ids after
`--select`/`--ignore`/`rule`, and files elsewhere.

    eval "$(precision-doctor completion bash)"          # ~/.bashrc
    eval "$(precision-doctor completion zsh)"           # ~/.zshrc (through bash completion's compatibility)
    precision-doctor completion fish > ~/.config/fish/completions/precision-doctor.fish
"""

from __future__ import annotations

import argparse
import shlex

from ._common import EXIT_OK

SHELLS = ("bash", "zsh", "fish")
TARGET_OPTIONS = ("--target", "--compare")
RULE_OPTIONS = ("--select", "--ignore")


def register(sub) -> None:
    completion = sub.add_parser("completion", help="print a shell completion script (bash, zsh, fish)")
    completion.add_argument("shell", choices=SHELLS, help="the shell to complete in")


def print_completion(parser: argparse.ArgumentParser, shell: str) -> int:
    print(script_for(parser, shell))
    return EXIT_OK


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return dict(_subcommands(parser).choices)


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


PATH_DESTS = {"facts", "config", "output", "plot", "python", "script", "cache_dir", "model_config", "model"}


def _values(action: argparse.Action) -> list[str] | str | None:
    """What an option's value is completed from: its choices, "targets", "rules", "files", or "" (a number or a
    command line: nothing to offer); None when it takes no value."""
    if action.nargs == 0:
        return None
    if action.choices is not None:
        return [str(c) for c in action.choices]
    if any(o in TARGET_OPTIONS for o in action.option_strings):
        return "targets"
    if any(o in RULE_OPTIONS for o in action.option_strings):
        return "rules"
    return "files" if action.dest in PATH_DESTS else ""


def _positional_choices(sub: argparse.ArgumentParser) -> str:
    """The choices of a command's positional argument (`completion bash`), space-separated; "" when none."""
    for action in sub._actions:
        if not action.option_strings and action.choices:
            return " ".join(str(c) for c in action.choices)
    return ""


def _words() -> dict[str, list[str]]:
    from ..probes.target import CPU_TARGET, PROFILES
    from ..rules.catalog import rules

    return {
        "targets": sorted({CPU_TARGET, *(n for p in PROFILES for n in (p.name, *p.aliases))}),
        "rules": sorted(r.id for r in rules()),
    }


def script_for(parser: argparse.ArgumentParser, shell: str) -> str:
    commands = _commands(parser)
    words = _words()
    if shell == "fish":
        helps = {a.dest: a.help or "" for a in _subcommands(parser)._choices_actions}
        return _fish(commands, words, helps)
    return (_ZSH_PRELUDE if shell == "zsh" else "") + _bash(commands, words)


def _bash(commands: dict[str, argparse.ArgumentParser], words: dict[str, list[str]]) -> str:
    options, values = [], []
    for name, sub in commands.items():
        opts = [o for a in sub._actions for o in a.option_strings]
        options.append(f"        {name}) opts={shlex.quote(' '.join(opts))} ;;")
        for action in sub._actions:
            kind = _values(action)
            if kind is None or not action.option_strings:
                continue
            if isinstance(kind, list):
                listed = " ".join(kind)
            else:
                listed = " ".join(words[kind]) if kind in words else kind or "none"
            for option in action.option_strings:
                values.append(f"        {name}:{option}) values={shlex.quote(listed)} ;;")
    first = " ".join(commands)
    rule_ids = " ".join(words["rules"])
    for name, sub in commands.items():  # a positional with choices (`completion bash`)
        shells = _positional_choices(sub)
        if shells:
            values.append(
                f'        {name}:{name}) [[ $COMP_CWORD -eq 2 && "$cur" != -* ]] && values={shlex.quote(shells)} ;;'
            )
    return f"""# precision-doctor completion for bash: eval "$(precision-doctor completion bash)"
_precision_doctor() {{
    local cur prev command opts values prefix
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    COMPREPLY=()
    if [[ "$cur" == "=" ]]; then  # `--target=`: bash splits the word at `=`
        cur=""
    elif [[ "$prev" == "=" && $COMP_CWORD -ge 2 ]]; then
        prev="${{COMP_WORDS[COMP_CWORD-2]}}"
    fi
    if [[ $COMP_CWORD -eq 1 ]]; then
        COMPREPLY=($(compgen -W "{first} --help --version" -- "$cur"))
        return 0
    fi
    command="${{COMP_WORDS[1]}}"
    values=""
    case "$command:$prev" in
{chr(10).join(values)}
    esac
    if [[ "$command" == rule && $COMP_CWORD -eq 2 && "$cur" != -* ]]; then
        values={shlex.quote(rule_ids)}
    fi
    if [[ "$values" == files ]]; then
        mapfile -t COMPREPLY < <(compgen -f -- "$cur")
        return 0
    elif [[ "$values" == none ]]; then
        return 0
    elif [[ -n "$values" ]]; then
        prefix=""
        [[ "$cur" == *,* ]] && prefix="${{cur%,*}},"  # a list: `--select PD201,PD2`
        COMPREPLY=($(compgen -P "$prefix" -W "$values" -- "${{cur##*,}}"))
        return 0
    fi
    case "$command" in
{chr(10).join(options)}
        *) opts="" ;;
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    else
        mapfile -t COMPREPLY < <(compgen -f -- "$cur")
    fi
    return 0
}}
complete -o filenames -F _precision_doctor precision-doctor
"""


_ZSH_PRELUDE = """# zsh: through bash completion's compatibility layer (compinit first, where .zshrc has not loaded it)
(( $+functions[compdef] )) || { autoload -U +X compinit && compinit -u }
autoload -U +X bashcompinit && bashcompinit
"""


def _fish(commands: dict[str, argparse.ArgumentParser], words: dict[str, list[str]], helps: dict[str, str]) -> str:
    lines = ["# precision-doctor completion for fish", "complete -c precision-doctor -f"]
    takes_paths = " ".join(
        n for n, sub in commands.items() if any(not a.option_strings and not a.choices for a in sub._actions)
    )
    lines.append(f"complete -c precision-doctor -n '__fish_seen_subcommand_from {takes_paths}' -F")
    for name, sub in commands.items():
        described = shlex.quote(helps.get(name, "")[:60])
        lines.append(f"complete -c precision-doctor -n __fish_use_subcommand -a {name} -d {described}")
        for action in sub._actions:
            longs = [o[2:] for o in action.option_strings if o.startswith("--")]
            shorts = [o[1:] for o in action.option_strings if not o.startswith("--")]
            if not longs and not shorts:
                continue
            spec = " ".join([f"-l {o}" for o in longs] + [f"-s {o}" for o in shorts])
            kind = _values(action)
            if kind is None:
                tail = ""
            elif kind == "files":
                tail = " -r -F"
            elif kind == "":
                tail = " -r -f"
            else:
                listed = words[kind] if isinstance(kind, str) else kind
                tail = " -r -f -a " + shlex.quote(" ".join(listed))
            lines.append(f"complete -c precision-doctor -n '__fish_seen_subcommand_from {name}' {spec}{tail}")
        chosen = _positional_choices(sub)
        if chosen:
            lines.append(f"complete -c precision-doctor -n '__fish_seen_subcommand_from {name}' -f -a '{chosen}'")
        if name == "rule":
            ids = shlex.quote(" ".join(words["rules"]))
            lines.append(f"complete -c precision-doctor -n '__fish_seen_subcommand_from rule' -f -a {ids}")
    return "\n".join(lines) + "\n"
