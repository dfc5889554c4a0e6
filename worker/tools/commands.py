"""Which shell commands are destructive: the approval policy of `run_command`.

`destructive_reason` reads a command line the way a shell would, closely enough to find
every simple command in it: it splits at `;`, `&&`, `||`, `|`, `&`, newlines and
parentheses, looks inside `$(...)`, backticks, `<(...)`, `sh -c '...'`, `eval` and
`find -exec`, skips `FOO=1` prefixes, keywords and wrappers (`env`, `nice`, `timeout`,
`xargs`, ...), and checks every command name and every `>` redirect.

It errs towards asking a person: text it cannot parse, a command name computed at run
time, or a wrapper option it does not know all count as destructive. What it cannot see is
what a program does on its own (`python -c ...`, a script file, a Makefile).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tickwork.worker.tools.command_rules import SAFE_SINKS, program_reason
from tickwork.worker.tools.shell_syntax import (
    Redirect,
    Unparsable,
    Word,
    lex,
    simple_commands,
    word_set,
)

#: how deep `sh -c`, `$(...)` and wrappers may nest before we give up and ask
_MAX_DEPTH = 12

_OVERWRITING = word_set("> >| &> >&")
_KEYWORDS = word_set("if then else elif fi do done while until ! { } coproc")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
_SQL = re.compile(
    r"\b(drop\s+(table|database|schema|view|index|user|role)|truncate\s+table|delete\s+from)\b",
    re.IGNORECASE,
)

#: programs that run a command given after options we do not model; every operand is
#: tried as the start of that command (`strace -f rm x`, `flock /tmp/l rm x`)
_RUNNERS = word_set(
    "strace ltrace valgrind chroot flock nsenter unshare firejail chrt fakeroot proot bwrap "
    "systemd-run parallel entr catchsegv torsocks proxychains proxychains4 rlwrap xvfb-run "
    "dbus-run-session sem"
)
_SHELLS = word_set("sh bash zsh dash ksh mksh ash yash posh fish rbash csh tcsh")


@dataclass(frozen=True)
class _Wrapper:
    """A command that runs the command after its options (`nice -n 5 rm x`)."""

    flags: str = ""
    values: str = ""
    #: short options whose value, if any, is attached (`xargs -i{}`)
    attached: str = ""
    long_flags: frozenset[str] = frozenset()
    long_values: frozenset[str] = frozenset()
    #: operands before the command, such as timeout's duration
    skip: int = 0
    #: the command is the rest joined into one line for a shell (`watch`)
    joined: bool = False


# options not listed are "not understood" and make the command need approval (env -S, time -o)
_WRAPPERS = {
    "env": _Wrapper(
        flags="i0v",
        values="uC",
        long_flags=word_set("--ignore-environment --null --debug"),
        long_values=word_set("--unset --chdir"),
    ),
    "nice": _Wrapper(flags="0123456789", values="n", long_values=word_set("--adjustment")),
    "nohup": _Wrapper(),
    "timeout": _Wrapper(
        flags="v",
        values="sk",
        skip=1,
        long_flags=word_set("--preserve-status --foreground --verbose"),
        long_values=word_set("--signal --kill-after"),
    ),
    "time": _Wrapper(
        flags="pqv",
        values="f",
        long_flags=word_set("--portability --quiet --verbose"),
        long_values=word_set("--format"),
    ),
    "command": _Wrapper(flags="pvV"),
    "builtin": _Wrapper(),
    "exec": _Wrapper(flags="cl", values="a"),
    "setsid": _Wrapper(flags="cfw", long_flags=word_set("--ctty --fork --wait")),
    "stdbuf": _Wrapper(values="ioe", long_values=word_set("--input --output --error")),
    "ionice": _Wrapper(
        flags="t",
        values="cnpPu",
        long_flags=word_set("--ignore"),
        long_values=word_set("--class --classdata"),
    ),
    "taskset": _Wrapper(flags="acp", skip=1),
    "unbuffer": _Wrapper(),
    "busybox": _Wrapper(),
    "xargs": _Wrapper(
        flags="0prtx",
        values="adEILnPs",
        attached="eil",
        long_flags=word_set("--null --no-run-if-empty --verbose --interactive --exit --open-tty"),
        long_values=word_set(
            "--arg-file --delimiter --eof --replace --max-lines --max-args --max-procs "
            "--max-chars --process-slot-var"
        ),
    ),
    "watch": _Wrapper(
        flags="bcdegtx",
        values="nq",
        joined=True,
        long_values=word_set("--interval"),
        long_flags=word_set(
            "--beep --color --differences --errexit --chgexit --no-title --exec --precise"
        ),
    ),
}


def destructive_reason(command: str) -> str | None:
    """Why `command` may destroy or change something a person should approve, or None."""
    if not isinstance(command, str):
        return f"the command is a {type(command).__name__}, not text"
    return _source_reason(command, 0)


def is_destructive(command: str) -> bool:
    """True if a person should approve `command` first; false positives are by design."""
    return destructive_reason(command) is not None


def command_needs_approval(arguments: Mapping[str, Any]) -> str | None:
    """The approval policy of `run_command`: the call's arguments in, why a person should
    approve it out (stored with the call and shown to the approver), or None."""
    return destructive_reason(arguments.get("command"))  # type: ignore[arg-type]


def _source_reason(source: str, depth: int) -> str | None:
    if depth > _MAX_DEPTH:
        return "the command nests too deeply to be checked"
    sql = _SQL.search(source)
    if sql:
        return f"runs SQL that deletes data ({' '.join(sql.group(0).split())!r})"
    try:
        shlex.split(source, comments=True)
        lexed = lex(source)
        commands = list(simple_commands(lexed.tokens))
    except (ValueError, Unparsable) as exc:
        return f"the command cannot be parsed ({exc}), so it cannot be checked"
    for inner in lexed.substitutions:
        reason = _source_reason(inner, depth + 1)
        if reason:
            return reason
    for words, redirects in commands:
        reason = _redirect_reason(redirects) or _argv_reason(words, depth)
        if reason:
            return reason
    return None


def _redirect_reason(redirects: Sequence[Redirect]) -> str | None:
    for op, target in redirects:
        if op not in _OVERWRITING:
            continue
        if op == ">&" and (target.text.isdigit() or target.text == "-") and not target.dynamic:
            continue  # `2>&1` duplicates a descriptor
        if target.dynamic:
            return f"'{op}' writes to a file whose name is only known at run time"
        if target.text not in SAFE_SINKS:
            return f"'{op} {target.text}' overwrites that file (use '>>' to append)"
    return None


def _argv_reason(words: Sequence[Word], depth: int) -> str | None:
    if depth > _MAX_DEPTH:
        return "the command nests too deeply to be checked"
    words = list(words)
    while words:
        head = words[0]
        if _ASSIGNMENT.match(head.text) or (not head.quoted and head.text in _KEYWORDS):
            del words[0]
        elif not head.quoted and head.text == "function":
            del words[:2]
        else:
            break
    if not words:
        return None
    head, args = words[0], words[1:]
    if not head.quoted and head.text in ("for", "select", "case"):
        return None  # their words are values; the commands come after `do` or a pattern
    if head.dynamic:
        return f"the command name {head.text!r} is only known at run time, so it cannot be checked"
    if head.pattern and head.text not in ("[", "[["):
        return (
            f"the command name {head.text!r} is a pattern the shell expands, so it is not checked"
        )
    name = head.text.rsplit("/", 1)[-1]
    if name in _SHELLS:
        return _shell_reason(name, args, depth)
    if name in _WRAPPERS:
        return _wrapped_reason(name, args, depth)
    if name in _RUNNERS:
        return _runner_reason(args, depth)
    check = _CHECKS.get(name)
    return check(args, depth) if check else program_reason(name, args)


def _wrapped_reason(name: str, args: Sequence[Word], depth: int) -> str | None:
    spec = _WRAPPERS[name]
    i = 0
    while i < len(args):
        text = args[i].text
        if text == "--":
            i += 1
            break
        if text.startswith("--"):
            key, equals, _ = text.partition("=")
            if key in spec.long_values:
                i += 1 if equals else 2
            elif key in spec.long_flags:
                i += 1
            else:
                return f"{name}: option {text!r} is not understood, so its command is not checked"
            continue
        if text.startswith("-") and len(text) > 1 and not args[i].dynamic:
            taken = 1
            for j, letter in enumerate(text[1:], 1):
                if letter in spec.values:
                    taken = 2 if j == len(text) - 1 else 1
                    break
                if letter in spec.attached:
                    break
                if letter not in spec.flags:
                    return (
                        f"{name}: option -{letter} is not understood, so its command is not checked"
                    )
            i += taken
            continue
        if text == "-" and name == "env":
            i += 1
            continue
        break
    rest = list(args[i + spec.skip :])
    if not rest:
        return None
    if spec.joined:
        if any(w.dynamic for w in rest):
            return f"{name} runs a command only known at run time"
        return _source_reason(" ".join(w.text for w in rest), depth + 1)
    return _argv_reason(rest, depth + 1)


def _runner_reason(args: Sequence[Word], depth: int) -> str | None:
    for start, word in enumerate(args):
        if not word.text.startswith("-"):
            reason = _argv_reason(args[start:], depth + 1)
            if reason:
                return reason
    return None


def _shell_reason(name: str, args: Sequence[Word], depth: int) -> str | None:
    command_string = reads_stdin = False
    i = 0
    while i < len(args):
        text = args[i].text
        if text in ("-", "--"):
            i += 1
            break
        if text.startswith("--command"):
            command_string = True
            if "=" in text:
                return _source_reason(text.partition("=")[2], depth + 1)
            i += 1
            break
        if text.startswith("--"):
            i += 2 if text in ("--rcfile", "--init-file") else 1
            continue
        if text[:1] in "-+" and len(text) > 1:
            letters = text[1:]
            command_string |= text[0] == "-" and "c" in letters
            reads_stdin |= "s" in letters
            i += 2 if ("o" in letters or "O" in letters) else 1
            continue
        break
    operands = args[i:]
    if command_string:
        if not operands:
            return None
        if operands[0].dynamic:
            return f"{name} -c runs a command only known at run time, so it cannot be checked"
        return _source_reason(operands[0].text, depth + 1)
    if reads_stdin or not operands:
        return f"{name} runs commands from its input, which cannot be checked"
    return None  # a script file: like any program, what it does is not read here


def _eval_reason(args: Sequence[Word], depth: int) -> str | None:
    if any(w.dynamic for w in args):
        return "eval runs text only known at run time, so it cannot be checked"
    return _source_reason(" ".join(w.text for w in args), depth + 1)


def _trap_reason(args: Sequence[Word], depth: int) -> str | None:
    if not args or args[0].text.startswith("-"):
        return None
    if args[0].dynamic:
        return "trap installs a command only known at run time"
    return _source_reason(args[0].text, depth + 1)


def _alias_reason(args: Sequence[Word], depth: int) -> str | None:
    for word in args:
        name, equals, value = word.text.partition("=")
        if equals and (word.dynamic or _source_reason(value, depth + 1)):
            return f"alias {name} stands for a command that needs approval or cannot be checked"
    return None


def _find_reason(args: Sequence[Word], depth: int) -> str | None:
    i = 0
    while i < len(args):
        text = args[i].text
        if text == "-delete":
            return "find -delete deletes the files it finds"
        if text in ("-fprint", "-fprint0", "-fprintf", "-fls"):
            return f"find {text} overwrites a file"
        if text in ("-exec", "-execdir", "-ok", "-okdir"):
            end = i + 1
            while end < len(args) and args[end].text not in (";", "+"):
                end += 1
            reason = _argv_reason(args[i + 1 : end], depth + 1)
            if reason:
                return f"find {text} runs: {reason}"
            i = end
        i += 1
    return None


_CHECKS: dict[str, Callable[[Sequence[Word], int], str | None]] = {
    "eval": _eval_reason,
    "alias": _alias_reason,
    "trap": _trap_reason,
    "find": _find_reason,
}
