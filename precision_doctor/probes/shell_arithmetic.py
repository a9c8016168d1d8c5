"""Shell arithmetic (`$(( ... ))`) as bash evaluates it, for the values a job script computes from what it sets.

Bash arithmetic is signed 64-bit: every result wraps as bash's does, division truncates toward zero, and the
remainder takes the dividend's sign. The expression is turned into postfix order and evaluated with two stacks, so no
input (a product of a thousand factors, parentheses a thousand deep, repeated squaring) recurses or grows a number
past 64 bits. Whatever bash would refuse or the doctor does not model (division by zero, a negative exponent,
assignments, `?:`, a name that is not a number) is None: the value stays unknown.
"""

from __future__ import annotations

import re

MAX_EXPRESSION = 4096  # characters: a job script's arithmetic is a line, not a program
MAX_DEPTH = 256  # parentheses
_BITS = 64
_TOKEN = re.compile(
    r"\s*(?:(?P<number>0[xX][0-9a-fA-F]+|[0-9]+#[0-9a-zA-Z@_]+|[0-9]+)|(?P<op>\*\*|<<|>>|<=|>=|==|"
    r"!=|&&|\|\||[-+*/%<>&|^!~()]))",
    re.ASCII,
)
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
# binary operators: precedence (higher binds tighter) and whether they group to the right
_BINARY = {
    "**": (13, True),
    "*": (12, False),
    "/": (12, False),
    "%": (12, False),
    "+": (11, False),
    "-": (11, False),
    "<<": (10, False),
    ">>": (10, False),
    "<": (9, False),
    ">": (9, False),
    "<=": (9, False),
    ">=": (9, False),
    "==": (8, False),
    "!=": (8, False),
    "&": (7, False),
    "^": (6, False),
    "|": (5, False),
    "&&": (4, False),
    "||": (3, False),
}
_UNARY_PRECEDENCE = 14  # `-2**2` is 4 in bash: unary minus binds tighter than **
_UNARY = {"-": "neg", "+": "pos", "!": "not", "~": "inv"}


class _Refused(Exception):
    """Bash refuses it, or the doctor does not model it."""


def wrap(number: int) -> int:
    """`number` as a signed 64-bit integer, as bash stores it."""
    return ((number + (1 << (_BITS - 1))) % (1 << _BITS)) - (1 << (_BITS - 1))


def evaluate(expression: str) -> int | None:
    """The value bash gives `$((expression))`, once every variable in it has been replaced by its value; None when
    it cannot be known here."""
    if len(expression) > MAX_EXPRESSION:
        return None
    try:
        return _run(_postfix(_tokens(expression)))
    except _Refused:
        return None


def _tokens(expression: str) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    position, end = 0, len(expression.rstrip())
    while position < end:
        match = _TOKEN.match(expression, position)
        if match is None:
            raise _Refused  # a name left unexpanded, `=`, `?:`, `,`, `++`: not modelled
        if match.group("number") is not None:
            out.append(("number", _number(match.group("number"))))
        else:
            out.append(("op", match.group("op")))
        position = match.end()
    return out


def _number(text: str) -> int:
    """An integer constant as bash reads it: 0x hex, 0 octal, BASE#DIGITS (bases 2 to 36 here, digits of either
    case; a base written with a leading zero, a digit past the base, an underscore: bash refuses them), else decimal."""
    if text[:2] in ("0x", "0X"):
        return wrap(int(text[2:], 16))
    if "#" in text:
        base_text, digits = text.split("#", 1)
        if base_text.startswith("0") or not 2 <= int(base_text) <= 36 or len(digits) > 64:
            raise _Refused  # bases up to 64 exist, with their own digit order: not modelled
        return wrap(_digits(digits.lower(), int(base_text)))
    if len(text) > 1 and text.startswith("0"):
        return wrap(_digits(text[1:], 8))  # `08`: bash says "value too great for base"
    if len(text) > 30:
        raise _Refused  # bash wraps long literals digit by digit; not worth modelling
    return wrap(int(text))


def _digits(text: str, base: int) -> int:
    value = 0
    for c in text:
        digit = _DIGITS.find(c)
        if digit < 0 or digit >= base:
            raise _Refused
        value = value * base + digit
    return value


def _postfix(tokens: list[tuple[str, object]]) -> list[tuple[str, object]]:
    """Shunting-yard: operands and operators in evaluation order."""
    out: list[tuple[str, object]] = []
    stack: list[tuple[str, object]] = []  # ("unary", name) | ("binary", op) | ("paren", "(")
    expect_operand = True
    depth = 0
    for kind, value in tokens:
        if kind == "number":
            if not expect_operand:
                raise _Refused
            out.append((kind, value))
            expect_operand = False
        elif value == "(":
            if not expect_operand:
                raise _Refused
            depth += 1
            if depth > MAX_DEPTH:
                raise _Refused
            stack.append(("paren", "("))
        elif value == ")":
            if expect_operand:
                raise _Refused
            while stack and stack[-1][0] != "paren":
                out.append(stack.pop())
            if not stack:
                raise _Refused
            stack.pop()
            depth -= 1
        elif expect_operand:
            if value not in _UNARY:
                raise _Refused
            stack.append(("unary", _UNARY[value]))  # right-associative and tightest: nothing to pop
        else:
            if value not in _BINARY:
                raise _Refused
            precedence, right = _BINARY[str(value)]
            while stack and stack[-1][0] != "paren":
                top_kind, top = stack[-1]
                top_precedence = _UNARY_PRECEDENCE if top_kind == "unary" else _BINARY[str(top)][0]
                if top_precedence > precedence or (top_precedence == precedence and not right):
                    out.append(stack.pop())
                else:
                    break
            stack.append(("binary", value))
            expect_operand = True
    if expect_operand:
        raise _Refused
    while stack:
        if stack[-1][0] == "paren":
            raise _Refused
        out.append(stack.pop())
    return out


def _run(program: list[tuple[str, object]]) -> int:
    values: list[int] = []
    for kind, value in program:
        if kind == "number":
            values.append(int(value))  # type: ignore[call-overload]
        elif kind == "unary":
            if not values:
                raise _Refused
            values.append(_unary(str(value), values.pop()))
        else:
            if len(values) < 2:
                raise _Refused
            right = values.pop()
            left = values.pop()
            values.append(_binary(str(value), left, right))
    if len(values) != 1:
        raise _Refused
    return values[0]


def _unary(name: str, x: int) -> int:
    if name == "neg":
        return wrap(-x)
    if name == "not":
        return int(x == 0)
    if name == "inv":
        return wrap(~x)
    return x


def _binary(op: str, a: int, b: int) -> int:
    if op in ("/", "%"):
        if b == 0:
            raise _Refused  # bash: division by 0
        quotient = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)  # toward zero, as C
        return wrap(quotient if op == "/" else a - quotient * b)
    if op == "**":
        if b < 0:
            raise _Refused  # bash: exponent less than 0
        return wrap(pow(a, b, 1 << _BITS))
    if op in ("<<", ">>"):
        shift = b & (_BITS - 1)  # the shift count as the machine takes it
        return wrap(a << shift) if op == "<<" else a >> shift
    simple = {
        "*": a * b,
        "+": a + b,
        "-": a - b,
        "&": a & b,
        "|": a | b,
        "^": a ^ b,
        "<": int(a < b),
        ">": int(a > b),
        "<=": int(a <= b),
        ">=": int(a >= b),
        "==": int(a == b),
        "!=": int(a != b),
        "&&": int(bool(a) and bool(b)),
        "||": int(bool(a) or bool(b)),
    }
    return wrap(simple[op])
