"""What single programs do that needs approval, judged from their arguments.

These are programs that do not run other commands (those are unwrapped in `commands`):
names that always need a person (`rm`, `mv`, `sudo`, ...), and rules for programs where
the arguments decide (`git`, `sed -i`, `tee`, `ln -f`, `cp`, `docker rm`, ...).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from tickwork.worker.tools.shell_syntax import Word, word_set

SAFE_SINKS = word_set("/dev/null /dev/stdout /dev/stderr /dev/tty")

_SED_COMMAND = re.compile(
    r"(?:^|[;{}\n])\s*(?:[0-9$,~+]+|/(?:[^/\\\n]|\\.)*/)*\s*!?\s*[ewW](?:\s|$)"
)
_SED_SUBSTITUTE = re.compile(r"s(.)(?:\\.|(?!\1).)*\1(?:\\.|(?!\1).)*\1[gpiImM0-9]*[ewW]")

_NAMED = {
    "rm": "deletes files",
    "rmdir": "deletes directories",
    "unlink": "deletes a file",
    "shred": "destroys file contents",
    "srm": "destroys files",
    "wipe": "destroys files",
    "mv": "moves files, replacing any file at the target",
    "rsync": "copies over files and can delete them",
    "install": "copies over files",
    "chmod": "changes file permissions",
    "chown": "changes file ownership",
    "chgrp": "changes file ownership",
    "sudo": "runs a command as another user",
    "su": "runs a command as another user",
    "doas": "runs a command as another user",
    "pkexec": "runs a command as another user",
    "runuser": "runs a command as another user",
    "dd": "writes raw data over files or devices",
    "truncate": "cuts files to a size",
    "wipefs": "erases disk signatures",
    "fdisk": "changes disk partitions",
    "sfdisk": "changes disk partitions",
    "parted": "changes disk partitions",
    "mkswap": "formats a device",
    "kill": "stops processes",
    "pkill": "stops processes",
    "killall": "stops processes",
    "shutdown": "stops the machine",
    "reboot": "restarts the machine",
    "halt": "stops the machine",
    "poweroff": "stops the machine",
    "unzip": "extracts over existing files",
    "wget": "writes downloads over files",
}

#: tools whose subcommand decides: any of these words as an argument removes something
_SUBCOMMANDS = {
    "docker": word_set("rm rmi prune kill down"),
    "podman": word_set("rm rmi prune kill down"),
    "kubectl": word_set("delete drain replace"),
    "helm": word_set("uninstall delete"),
    "terraform": word_set("destroy"),
    "gh": word_set("delete"),
    "pip": word_set("uninstall"),
    "pip3": word_set("uninstall"),
    "npm": word_set("uninstall remove rm un prune"),
    "apt": word_set("remove purge autoremove"),
    "apt-get": word_set("remove purge autoremove"),
}

_GIT_HARMLESS_CONFIG = ("user.", "color.", "advice.", "init.", "safe.directory", "core.quotepath")
_GIT_ALWAYS = {
    "push": "publishes to a remote",
    "am": "changes files like apply_patch",
    "rebase": "rewrites history",
    "filter-branch": "rewrites history",
    "filter-repo": "rewrites history",
}
#: subcommand -> (options any of which make it destructive, what it then does)
_GIT_FLAGGED = {
    "reset": (word_set("--hard --merge --keep"), "--hard discards uncommitted changes"),
    "switch": (
        word_set("-f --force --discard-changes -C --force-create"),
        "--force discards changes",
    ),
    "branch": (word_set("-d -D --delete -f --force -M -C"), "deletes or overwrites a branch"),
    "tag": (word_set("-d --delete -f --force"), "deletes or overwrites a tag"),
    "update-ref": (word_set("-d --stdin"), "can delete refs"),
    "submodule": (word_set("deinit"), "deinit removes a submodule's files"),
}
_GIT_ACTIONS = {
    ("stash", "drop"),
    ("stash", "clear"),
    ("reflog", "expire"),
    ("reflog", "delete"),
    ("worktree", "remove"),
    ("worktree", "prune"),
}
_GIT_CHECKOUT_DISCARDS = word_set(". -- -f --force -p --patch -B --ours --theirs -m --merge")
_GZIP_KEEPS = word_set("--stdout --to-stdout --keep --list --test")
_GIT_APPLY_CHECKS = word_set("--check --stat --numstat --summary")
_GIT_CONFIG_WRITES = word_set(
    "--unset --unset-all --add --replace-all --edit -e --rename-section --remove-section"
)


def program_reason(name: str, args: Sequence[Word]) -> str | None:
    """Why running program `name` with `args` needs approval, or None."""
    if name in _NAMED:
        return f"{name} {_NAMED[name]}"
    if name.startswith("mkfs"):
        return f"{name} formats a file system"
    if name in _SUBCOMMANDS:
        hit = next((w.text for w in args if w.text in _SUBCOMMANDS[name]), None)
        return f"{name} {hit} removes things" if hit else None
    rule = _RULES.get(name)
    return rule(args) if rule else None


def _git_reason(args: Sequence[Word]) -> str | None:
    i = 0
    while i < len(args) and args[i].text.startswith("-"):
        text = args[i].text
        if text == "-c":
            setting = args[i + 1].text if i + 1 < len(args) else ""
            if not setting.lower().startswith(_GIT_HARMLESS_CONFIG):
                return f"git -c {setting!r} sets configuration that can run commands"
            i += 2
        elif text in ("-C", "--git-dir", "--work-tree", "--namespace", "--config-env"):
            i += 2
        else:
            i += 1
    if i >= len(args):
        return None
    if args[i].dynamic:
        return "the git subcommand is only known at run time"
    return _git_subcommand_reason(args[i].text, [w.text for w in args[i + 1 :]])


def _short(texts: Sequence[str], letter: str) -> bool:
    """Whether a short option cluster such as `-fd` includes `letter`."""
    return any(t.startswith("-") and not t.startswith("--") and letter in t for t in texts)


def _git_subcommand_reason(sub: str, rest: list[str]) -> str | None:
    flags = set(rest)
    first = rest[0] if rest else ""
    if sub in _GIT_ALWAYS:
        return f"git {sub} {_GIT_ALWAYS[sub]}"
    if sub in _GIT_FLAGGED and flags & _GIT_FLAGGED[sub][0]:
        return f"git {sub} {_GIT_FLAGGED[sub][1]}"
    if (sub, first) in _GIT_ACTIONS:
        return f"git {sub} {first} deletes data"
    if sub == "clean" and not (_short(rest, "n") or "--dry-run" in flags):
        return "git clean deletes untracked files"
    if sub == "checkout" and (flags & _GIT_CHECKOUT_DISCARDS or first not in ("-b", "--orphan")):
        return "git checkout can discard uncommitted changes (git switch changes branches)"
    if sub == "restore" and not (flags & {"--staged", "-S"} and not flags & {"--worktree", "-W"}):
        return "git restore discards uncommitted changes"
    if sub == "rm" and "--cached" not in flags:
        return "git rm deletes files"
    if sub == "mv" and (_short(rest, "f") or _short(rest, "k") or "--force" in flags):
        return "git mv --force moves over files"
    if sub == "apply" and not flags & _GIT_APPLY_CHECKS:
        return "git apply changes files like apply_patch"
    if sub == "gc" and any(r.startswith("--prune") for r in rest):
        return "git gc --prune deletes unreachable objects"
    if sub == "config":
        operands = [r for r in rest if not r.startswith("-")]
        if flags & _GIT_CONFIG_WRITES or len(operands) >= 2:
            return "git config changes settings, some of which run commands"
    return None


def _sed_reason(args: Sequence[Word]) -> str | None:
    texts = [w.text for w in args]
    if _short(texts, "i") or any(t.startswith("--in-place") for t in texts):
        return "sed -i edits files in place"
    for text in texts:
        if not text.startswith("-") and (_SED_COMMAND.search(text) or _SED_SUBSTITUTE.search(text)):
            return "the sed script writes files or runs commands (e, w)"
    return None


def _perl_reason(args: Sequence[Word]) -> str | None:
    return "perl -i edits files in place" if _short([w.text for w in args], "i") else None


def _tee_reason(args: Sequence[Word]) -> str | None:
    texts = [w.text for w in args]
    if _short(texts, "a") or "--append" in texts:
        return None
    files = [t for t in texts if not t.startswith("-") and t not in SAFE_SINKS]
    return f"tee overwrites {files[0]!r} (use tee -a to append)" if files else None


def _ln_reason(args: Sequence[Word]) -> str | None:
    texts = [w.text for w in args]
    return "ln -f replaces existing files" if _short(texts, "f") or "--force" in texts else None


def _tar_reason(args: Sequence[Word]) -> str | None:
    texts = [w.text for w in args]
    first = texts[0] if texts else ""
    bundled = not first.startswith("-") and "t" in first  # `tar tzf a.tgz`
    if bundled or _short(texts, "t") or "--list" in texts:
        return None
    return "tar extracts or writes archives over existing files"


def _compress_reason(args: Sequence[Word]) -> str | None:
    texts = [w.text for w in args]
    if any(_short(texts, letter) for letter in "cklt") or _GZIP_KEEPS & set(texts):
        return None
    return "(de)compressing replaces each file in place (keep it with -k)"


def _curl_reason(args: Sequence[Word]) -> str | None:
    texts = [w.text for w in args]
    output = {"--output", "--remote-name", "--remote-name-all", "--output-dir"} & set(texts)
    if output or _short(texts, "o") or _short(texts, "O"):
        return "curl -o writes the download over a file"
    return None


def _patch_reason(args: Sequence[Word]) -> str | None:
    texts = {w.text for w in args}
    return None if "--dry-run" in texts else "patch changes files like apply_patch"


def _awk_reason(args: Sequence[Word]) -> str | None:
    texts = [w.text for w in args]
    return "awk -i inplace edits files in place" if "inplace" in texts else None


def _cp_reason(args: Sequence[Word]) -> str | None:
    if {w.text for w in args} & {"-n", "--no-clobber", "--update=none"}:
        return None
    return "cp copies over any file already at the target"


_RULES: dict[str, Callable[[Sequence[Word]], str | None]] = {
    "git": _git_reason,
    "sed": _sed_reason,
    "gsed": _sed_reason,
    "perl": _perl_reason,
    "tee": _tee_reason,
    "ln": _ln_reason,
    "cp": _cp_reason,
    "tar": _tar_reason,
    **dict.fromkeys(("gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz"), _compress_reason),
    "curl": _curl_reason,
    "patch": _patch_reason,
    "awk": _awk_reason,
    "gawk": _awk_reason,
}
