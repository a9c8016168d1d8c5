"""How a POSIX shell splits a command line into words, read without running anything: control operators
(`;`, `&&`, `|`, ...) and redirections outside quotes are words of their own kinds, quoted text is a word like any
other. Shared by the probes that read launch lines and job scripts and by the fixes that rewrite them."""

from __future__ import annotations

import re
import shlex


class Operator(str):
    """A control operator the shell reads outside quotes: `;`, `&&`, `||`, `|`, `&`, `|&`, `;;`, a subshell's `(`
    and `)`, or a newline (read as `;`). A quoted `";"` is a word like any other."""


class Redirection(str):
    """A redirection with its target (`2>&1`, `>train.log`, `&>>log`, `<input`): no word of the command."""


_CONTROL = ("&&", "||", ";;", "|&", ";", "|", "&", "(", ")")
_REDIRECT = re.compile(r"&>>|&>|>>|>\||>&|>|<<<|<<|<&|<>|<")
_DUPLICATE = re.compile(r"[0-9]+-?|-")  # `>&1`, `<&0`, `>&-`
_ARRAY_NAME = re.compile(r"[A-Za-z_]\w*\+?=")  # an array assignment's name: `ARGS=(`, `ARGS+=(`


def shell_words(text: str, comments: bool = True) -> list[str]:
    """The words of a shell command line, as `shlex.split(text, comments=True)` gives them, except that the control
    operators the shell reads outside quotes are `Operator` words of their own (`a;` is `a`, `;`), a redirection
    with its target is a `Redirection` (`train.py>log 2>&1` is `train.py`, `>log`, `2>&1`), and a quoted operator
    stays an ordinary word. Unbalanced quotes raise ValueError, as shlex does."""
    words: list[str] = []
    current: list[str] = []
    in_word = False
    target = False  # the next word is the target of the redirection just read
    i, n = 0, len(text)

    def flush() -> None:
        nonlocal in_word, target
        if in_word:
            word = "".join(current)
            if target and words and isinstance(words[-1], Redirection):
                words[-1] = Redirection(words[-1] + word)
            else:
                words.append(word)
            target = False
        current.clear()
        in_word = False

    while i < n:
        c = text[i]
        if c == "\\":
            if i + 1 >= n:
                raise ValueError("No escaped character")
            if text[i + 1] != "\n":  # a backslash-newline joins the lines
                current.append(text[i + 1])
                in_word = True
            i += 2
        elif c == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise ValueError("No closing quotation")
            current.append(text[i + 1 : end])
            in_word, i = True, end + 1
        elif c == '"':
            i += 1
            while True:
                if i >= n:
                    raise ValueError("No closing quotation")
                d = text[i]
                if d == '"':
                    i += 1
                    break
                if d == "\\" and i + 1 < n and text[i + 1] in '"\\$`\n':
                    if text[i + 1] != "\n":
                        current.append(text[i + 1])
                    i += 2
                    continue
                if d == "$" and text.startswith(("$(", "${"), i) or d == "`":  # `"$(echo "a b")"`: its own quotes
                    end = _substitution_end(text, i)
                    current.append(text[i:end])
                    i = end
                    continue
                current.append(d)
                i += 1
            in_word = True
        elif c == "$" and text.startswith(("$(", "${"), i) or c == "`":  # a substitution is part of the word
            end = _substitution_end(text, i)
            current.append(text[i:end])
            in_word, i = True, end
        elif c == "$" and text.startswith("$'", i):  # ANSI-C quoting: `$'a\tb'`
            end = i + 2
            while end < n and text[end] != "'":
                end += 2 if text[end] == "\\" else 1
            if end >= n:
                raise ValueError("No closing quotation")
            current.append(_ansi_c(text[i + 2 : end]))
            in_word, i = True, end + 1
        elif c == "\n":
            flush()
            words.append(Operator(";"))
            i += 1
        elif c.isspace():
            flush()
            i += 1
        elif c == "#" and comments and not in_word:
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif c in "<>" or text.startswith("&>", i):
            fd = "".join(current) if in_word and "".join(current).isdigit() else ""
            if fd:  # `2>`: the digits name the stream, no word of their own
                current.clear()
                in_word = False
            flush()
            match = _REDIRECT.match(text, i)
            assert match is not None  # the character is one of them
            op, i = fd + match.group(0), match.end()
            duplicate = _DUPLICATE.match(text, i) if op.endswith("&") else None
            if duplicate:
                words.append(Redirection(op + duplicate.group(0)))
                i = duplicate.end()
            else:
                words.append(Redirection(op))
                target = True
        elif c == "(" and in_word and _ARRAY_NAME.fullmatch("".join(current)):  # `ARGS=(--lr 1e-4)`: one word
            end = _group_end(text, i)
            current.append(text[i:end])
            i = end
        else:
            control = next((o for o in _CONTROL if text.startswith(o, i)), None)
            if control:
                flush()
                words.append(Operator(control))
                i += len(control)
            else:
                current.append(c)
                in_word = True
                i += 1
    flush()
    return words


_ANSI_C = re.compile(
    r"\\(?:([abeEfnrtv\\'\"?])|([0-7]{1,3})|x([0-9a-fA-F]{1,2})|u([0-9a-fA-F]{1,4})|U([0-9a-fA-F]{1,8})|c(.))"
)
_ANSI_C_LETTERS = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
}


def _ansi_c(body: str) -> str:
    """The text of `$'...'` as bash decodes it; an escape bash does not know keeps its backslash (`\\x`,
    `C:\\Users`)."""

    def one(m: re.Match) -> str:
        letter, octal, hex2, hex4, hex8, control = m.groups()
        if letter:
            return _ANSI_C_LETTERS.get(letter, letter)
        if control:
            return chr(ord(control) & 0x1F)
        code = int(octal, 8) & 0xFF if octal else int(hex2 or hex4 or hex8, 16)
        return chr(code) if code <= 0x10FFFF else m.group(0)

    return _ANSI_C.sub(one, body)


def _substitution_end(text: str, start: int) -> int:
    """Where `$(...)`, `${...}` (nested) or a backquoted command starting at `start` ends; unclosed: raise as shlex
    would."""
    if text[start] == "`":
        end = text.find("`", start + 1)
        if end < 0:
            raise ValueError("No closing quotation")
        return end + 1
    return _group_end(text, start + 1)


def _group_end(text: str, start: int) -> int:
    """Where the group opened by the `(` or `{` at `start` closes (nested, quotes and escapes skipped)."""
    opening = text[start]
    closing = ")" if opening == "(" else "}"
    depth, i, quote = 0, start, ""
    while i < len(text):
        c = text[i]
        if c == "\\" and quote != "'":  # `$(echo \))`: an escaped parenthesis is text
            i += 2
            continue
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == opening:
            depth += 1
        elif c == closing:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError("No closing parenthesis" if opening == "(" else "No closing brace")


def shell_join(words: list[str]) -> str:
    """The inverse of shell_words: each word quoted where it needs it, each operator as the operator."""
    return " ".join(w if isinstance(w, (Operator, Redirection)) else shlex.quote(w) for w in words)
