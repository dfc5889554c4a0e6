"""Just enough shell syntax to find every command a command line runs.

`lex` splits text into words and operators the way a POSIX shell does (quotes, escapes,
`$(...)`, backticks, `${...}`, redirects with file descriptors, comments) and keeps the
bodies of substitutions, which run too; `simple_commands` groups the words between
`;`, `&&`, `||`, `|`, `&`, newlines and parentheses. It does no expansion: a word records
whether it holds an expansion (`dynamic`) or a glob or brace pattern (`pattern`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

SEPARATORS = ("&&", "||", ";;", "|&", ";", "|", "&", "(", ")")
REDIRECTS = ("&>>", "&>", ">>", ">|", ">&", ">", "<<<", "<<-", "<<", "<&", "<>", "<")


def word_set(words: str) -> frozenset[str]:
    """`word_set("a b")` is `frozenset({"a", "b"})`: tables of names read better this way."""
    return frozenset(words.split())


class Unparsable(Exception):
    """The text is not shell syntax this reader can follow."""


@dataclass
class Word:
    text: str = ""
    #: some of it was quoted or escaped (so it is never a keyword)
    quoted: bool = False
    #: it contains an expansion or substitution, so its value is only known at run time
    dynamic: bool = False
    #: it has unquoted `*?[{`: glob or brace patterns the shell expands (`/bin/r?`, `{rm,x}`)
    pattern: bool = False


@dataclass(frozen=True)
class Op:
    text: str


@dataclass(frozen=True)
class Lexed:
    tokens: tuple[Word | Op, ...]
    #: bodies of `$(...)`, backticks and `<(...)`: commands that run as well
    substitutions: tuple[str, ...] = ()


def lex(source: str) -> Lexed:
    """The words and operators of `source`; `Unparsable` if quotes or parentheses are open."""
    lexer = _Lexer(source)
    tokens = lexer.run()
    return Lexed(tuple(tokens), tuple(lexer.substitutions))


class _Lexer:
    """Splits shell text into words and operators; collects `$(...)`/backtick bodies."""

    def __init__(self, source: str) -> None:
        self.s = source
        self.pos = 0
        self.tokens: list[Word | Op] = []
        self.substitutions: list[str] = []
        self.word: Word | None = None

    def run(self) -> list[Word | Op]:
        s = self.s
        while self.pos < len(s):
            c = s[self.pos]
            if c in " \t":
                self._flush()
                self.pos += 1
            elif c == "\n":
                self._flush()
                self.tokens.append(Op(";"))
                self.pos += 1
            elif c == "#" and self.word is None:
                end = s.find("\n", self.pos)
                self.pos = len(s) if end < 0 else end
            elif c == "\\":
                self._escape()
            elif c == "'":
                end = s.find("'", self.pos + 1)
                if end < 0:
                    raise Unparsable("unterminated single quote")
                self._current(quoted=True).text += s[self.pos + 1 : end]
                self.pos = end + 1
            elif c == '"':
                self._double()
            elif c == "`":
                self._current(dynamic=True)
                self._backtick()
            elif c == "$":
                self._dollar(in_quotes=False)
            elif c in "<>" and s.startswith("(", self.pos + 1):
                self._current(dynamic=True)
                self.pos += 2
                self._parenthesised()
            elif c in "<>" or s.startswith("&>", self.pos):
                self._redirect()
            elif c in ";&|()":
                self._flush()
                op = next(o for o in SEPARATORS if s.startswith(o, self.pos))
                self.tokens.append(Op(op))
                self.pos += len(op)
            else:
                word = self._current()
                word.text += c
                word.pattern |= c in "*?[{"
                self.pos += 1
        self._flush()
        return self.tokens

    def _current(self, *, quoted: bool = False, dynamic: bool = False) -> Word:
        if self.word is None:
            self.word = Word()
        self.word.quoted |= quoted
        self.word.dynamic |= dynamic
        return self.word

    def _flush(self) -> None:
        if self.word is not None:
            self.tokens.append(self.word)
            self.word = None

    def _escape(self) -> None:
        if self.pos + 1 >= len(self.s):
            raise Unparsable("the command ends with a backslash")
        following = self.s[self.pos + 1]
        if following != "\n":  # a backslash-newline only continues the line
            self._current(quoted=True).text += following
        self.pos += 2

    def _double(self) -> None:
        word = self._current(quoted=True)
        self.pos += 1
        while self.pos < len(self.s):
            c = self.s[self.pos]
            if c == '"':
                self.pos += 1
                return
            if c == "\\" and self.pos + 1 < len(self.s) and self.s[self.pos + 1] in '"\\$`\n':
                word.text += self.s[self.pos + 1].strip("\n")
                self.pos += 2
            elif c == "`":
                word.dynamic = True
                self._backtick()
            elif c == "$":
                self._dollar(in_quotes=True)
            else:
                word.text += c
                self.pos += 1
        raise Unparsable("unterminated double quote")

    def _dollar(self, *, in_quotes: bool) -> None:
        word = self._current(dynamic=True)
        following = self.s[self.pos + 1 : self.pos + 2]
        if following == "(":
            self.pos += 2
            self._parenthesised()
        elif following == "{":
            end = self.s.find("}", self.pos)
            if end < 0:
                raise Unparsable("unterminated ${")
            body = self.s[self.pos + 2 : end]
            if "$(" in body or "`" in body:  # ${x:-$(cmd)} runs cmd
                self.substitutions.append(body)
            word.text += self.s[self.pos : end + 1]
            self.pos = end + 1
        elif following == "'" and not in_quotes:  # $'...' may spell anything, e.g. $'\x72m'
            end = self.pos + 2
            while end < len(self.s) and self.s[end] != "'":
                end += 2 if self.s[end] == "\\" else 1
            if end >= len(self.s):
                raise Unparsable("unterminated $'")
            word.text += self.s[self.pos + 2 : end]
            self.pos = end + 1
        else:
            word.text += "$"
            self.pos += 1

    def _parenthesised(self) -> None:
        """Read up to the `)` matching an already consumed `(`; keep the body."""
        start, depth, s = self.pos, 1, self.s
        while self.pos < len(s):
            c = s[self.pos]
            if c == "\\":
                self.pos += 2
                continue
            if c in "'\"":
                end = self.pos + 1
                while end < len(s) and s[end] != c:
                    end += 2 if s[end] == "\\" and c == '"' else 1
                if end >= len(s):
                    raise Unparsable("unterminated quote inside $(...)")
                self.pos = end + 1
                continue
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    self.substitutions.append(s[start : self.pos])
                    self.pos += 1
                    return
            self.pos += 1
        raise Unparsable("unterminated $( or <(")

    def _backtick(self) -> None:
        self.pos += 1
        body: list[str] = []
        while self.pos < len(self.s):
            c = self.s[self.pos]
            if c == "\\" and self.pos + 1 < len(self.s):
                following = self.s[self.pos + 1]
                body.append(following if following in "`\\$" else c + following)
                self.pos += 2
                continue
            if c == "`":
                self.substitutions.append("".join(body))
                self.pos += 1
                return
            body.append(c)
            self.pos += 1
        raise Unparsable("unterminated backtick")

    def _redirect(self) -> None:
        word = self.word
        if word is not None and word.text.isdigit() and not (word.quoted or word.dynamic):
            self.word = None  # `2>`: the digits name a file descriptor
        else:
            self._flush()
        op = next(o for o in REDIRECTS if self.s.startswith(o, self.pos))
        self.tokens.append(Op(op))
        self.pos += len(op)


Redirect = tuple[str, Word]


def simple_commands(tokens: Sequence[Word | Op]) -> Iterator[tuple[list[Word], list[Redirect]]]:
    words: list[Word] = []
    redirects: list[Redirect] = []
    stream = iter(tokens)
    for token in stream:
        if isinstance(token, Word):
            words.append(token)
        elif token.text in SEPARATORS:
            yield words, redirects
            words, redirects = [], []
        else:
            target = next(stream, None)
            if not isinstance(target, Word):
                raise Unparsable(f"'{token.text}' is not followed by a file name")
            redirects.append((token.text, target))
    yield words, redirects
