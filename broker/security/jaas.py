"""The JAAS configuration syntax of Kafka's ``sasl.jaas.config``, parsed strictly.

An entry is ``<login module> <control flag> [<key>=<value> ...];`` and a text
holds one or more entries::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret"
        user_admin="admin-secret" user_alice="alice-secret";

The tokens are those of Kafka's JaasConfig (a java.io.StreamTokenizer):

- words: letters (ASCII, and any character from U+00A0 up), ``_``, ``$`` and
  ``-``, then also digits and ``.``; a token starting with a digit or ``.`` is
  a number, which Kafka cannot take as a value, so it is refused here too;
- quoted strings in ``"`` or ``'`` with Java's escapes (``\\n``, ``\\t``, ``\\b``,
  ``\\f``, ``\\r``, ``\\a``, ``\\v``, octal ``\\0``-``\\377``, and a backslash before
  any other character stands for that character: ``\\"``, ``\\\\``); a quoted
  string may not run past the end of its line;
- ``=`` and ``;``; comments ``// ...`` and ``/* ... */``; whitespace.

Control flags are required, requisite, sufficient or optional, in any case.
Where StreamTokenizer would quietly end the text (an unterminated comment or
string) or Kafka would keep the last of two equal keys, this parser refuses the
text with a message naming the problem: a configuration that holds passwords
should not mean something other than what it says. Option values never appear
in messages or in ``repr``. Errors are :class:`JaasConfigError` (a ValueError).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

# A generous bound on the text (a JAAS config of many users is a few KiB):
# every loop below is bounded by it.
TEXT_CHARS_MAX = 1 << 20


class JaasConfigError(ValueError):
    """The text is not a valid JAAS configuration."""


class ControlFlag(enum.Enum):
    REQUIRED = "required"
    REQUISITE = "requisite"
    SUFFICIENT = "sufficient"
    OPTIONAL = "optional"


@dataclass(frozen=True)
class JaasEntry:
    """One login module of a JAAS configuration, with its options."""

    login_module: str
    control_flag: ControlFlag
    options: Mapping[str, str] = field(repr=False)

    def __repr__(self) -> str:  # option values are passwords: show the keys only
        return f"JaasEntry({self.login_module!r}, {self.control_flag.value}, keys={sorted(self.options)})"


# ------------------------------------------------------------------ tokens

_WORD, _QUOTED, _EQUALS, _SEMICOLON, _NUMBER = "word", "quoted", "=", ";", "number"

_ESCAPES = {"a": "\x07", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\x0b"}


def _is_word_start(char: str) -> bool:
    return ("a" <= char <= "z") or ("A" <= char <= "Z") or char in "_$-" or char >= "\u00a0"


def _is_word_part(char: str) -> bool:
    return _is_word_start(char) or ("0" <= char <= "9") or char == "."


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    line: int


def _tokens(text: str) -> list[_Token]:
    if len(text) > TEXT_CHARS_MAX:
        raise JaasConfigError(f"JAAS config is longer than {TEXT_CHARS_MAX} characters")
    tokens: list[_Token] = []
    i, line, end = 0, 1, len(text)
    while i < end:  # every branch advances i
        char = text[i]
        if char == "\n":
            line += 1
            i += 1
        elif char <= " ":
            i += 1
        elif text.startswith("//", i):
            newline = text.find("\n", i)
            i = end if newline < 0 else newline
        elif text.startswith("/*", i):
            close = text.find("*/", i + 2)
            if close < 0:
                raise JaasConfigError(f"unterminated comment in JAAS config (line {line})")
            line += text.count("\n", i, close)
            i = close + 2
        elif char == "=" or char == ";":
            tokens.append(_Token(char, char, line))
            i += 1
        elif char == '"' or char == "'":
            value, i = _quoted(text, i, line)
            tokens.append(_Token(_QUOTED, value, line))
        elif _is_word_start(char):
            start = i
            while i < end and _is_word_part(text[i]):
                i += 1
            tokens.append(_Token(_WORD, text[start:i], line))
        elif "0" <= char <= "9" or char == ".":
            start = i
            while i < end and _is_word_part(text[i]):
                i += 1
            tokens.append(_Token(_NUMBER, text[start:i], line))
        else:
            raise JaasConfigError(f"unexpected character {char!r} in JAAS config (line {line})")
    return tokens


def _quoted(text: str, start: int, line: int) -> tuple[str, int]:
    quote = text[start]
    out: list[str] = []
    i, end = start + 1, len(text)
    while i < end:  # every branch advances i
        char = text[i]
        if char == quote:
            return "".join(out), i + 1
        if char in "\r\n":
            break
        if char != "\\":
            out.append(char)
            i += 1
            continue
        if i + 1 >= end:
            break
        escaped = text[i + 1]
        if "0" <= escaped <= "7":
            # Java's octal escape: up to three digits, three only when the first is 0-3.
            digits_max = 3 if escaped <= "3" else 2
            j = i + 1
            while j < end and j - (i + 1) < digits_max and "0" <= text[j] <= "7":
                j += 1
            out.append(chr(int(text[i + 1 : j], 8)))
            i = j
        else:
            out.append(_ESCAPES.get(escaped, escaped))
            i += 2
    raise JaasConfigError(f"unterminated quoted string in JAAS config (line {line})")


# ------------------------------------------------------------------ grammar


def parse_jaas_config(text: str) -> list[JaasEntry]:
    """Every entry of a JAAS configuration text, in order."""
    tokens = _tokens(text)
    entries: list[JaasEntry] = []
    position = 0
    while position < len(tokens):  # each entry consumes at least three tokens
        entry, position = _entry(tokens, position)
        entries.append(entry)
    if not entries:
        raise JaasConfigError("Login module not specified in JAAS config")
    return entries


def parse_jaas_entry(text: str) -> JaasEntry:
    """The one entry of a ``sasl.jaas.config`` value (Kafka takes exactly one there)."""
    entries = parse_jaas_config(text)
    if len(entries) != 1:
        raise JaasConfigError(f"JAAS config property contains {len(entries)} login modules, should be 1 module")
    return entries[0]


def _name(token: _Token, what: str) -> str:
    if token.kind not in (_WORD, _QUOTED):
        raise JaasConfigError(f"expected {what} in JAAS config, found {token.text!r} (line {token.line})")
    return token.text


def _entry(tokens: list[_Token], position: int) -> tuple[JaasEntry, int]:
    module = _name(tokens[position], "a login module name")
    position += 1
    if position >= len(tokens):
        raise JaasConfigError("Login module control flag not specified in JAAS config")
    flag_token = tokens[position]
    flag_name = _name(flag_token, "a login module control flag").lower()
    flag = next((flag for flag in ControlFlag if flag.value == flag_name), None)
    if flag is None:
        raise JaasConfigError(f"Invalid login module control flag '{flag_token.text}' in JAAS config")
    position += 1
    options: dict[str, str] = {}
    while position < len(tokens) and tokens[position].kind != _SEMICOLON:
        key = _name(tokens[position], "an option name or ';'")
        if (
            position + 2 >= len(tokens)
            or tokens[position + 1].kind != _EQUALS
            or tokens[position + 2].kind not in (_WORD, _QUOTED)
        ):
            raise JaasConfigError(f"Value not specified for key '{key}' in JAAS config")
        if key in options:
            raise JaasConfigError(f"key '{key}' appears twice in the JAAS config entry of {module}")
        options[key] = tokens[position + 2].text
        position += 3
    if position >= len(tokens):
        raise JaasConfigError("JAAS config entry not terminated by semi-colon")
    return JaasEntry(module, flag, options), position + 1
