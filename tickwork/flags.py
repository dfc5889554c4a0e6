"""The command line's flags for the fields the core's messages name.

A message of the client's checks, or one stored on a session (why it failed, how to fork
it on), names the fields an API caller gives, in backticks (`max_steps`). The command
line prints it with each such field that a flag gives as the flag (--max-steps): its user
typed flags. The API and the page keep the fields' names. A refusal by the settings
(`by_settings`) keeps its own words: a roles file's `system_prompt` is no --system-prompt.
"""

from __future__ import annotations

import re
import sys

from tickwork.fsm import errors

#: the repair options that fill a field of the input (`submit --goal` ...)
INPUT_OPTIONS = {
    "workspace": "--workspace",
    "repo": "--repo",
    "ref": "--ref",
    "test_command": "--test-cmd",
    "goal": "--goal",
    "setup": "--setup",
}
#: the fields (a budget of `tickwork.fsm.values.Budgets`, a submit's or a fork's, the job's
#: input) that a flag of `submit` or `fork` gives
FLAG_OF = {
    "max_steps": "--max-steps",
    "max_tokens": "--max-tokens",
    "max_cost_usd": "--max-cost-usd",
    "deadline_s": "--deadline",
    "context_window": "--context-window",
    "tool_outputs": "--tool-output",
    "model": "--model",
    "price": "--price",
    "from_step": "--from-step",
    "system_prompt": "--system-prompt",
    "append_instruction": "--append-instruction",
    "state": "--state",
    "concurrency_key": "--concurrency-key",
    "max_per_key": "--max-per-key",
    "again": "--again",
    # a tenant named by a token that may not (`tickwork.api.tenancy`): submit, ls, dlq's
    "tenant": "--tenant",
    **INPUT_OPTIONS,
}
_FIELD = re.compile("`(" + "|".join(FLAG_OF) + ")`")


def in_flags(message: str) -> str:
    """`message` as a user of the command line reads it: each field it names in backticks
    that a flag gives is the flag (`max_steps` is --max-steps); other words stay."""
    return _FIELD.sub(lambda found: FLAG_OF[found[1]], message)


#: how a stored reason a broken setting made begins: a tick that raised a
#: `ConfigurationError` or a kind of it (a roles file, a job kind's declaration) fails the
#: session INTERNAL with "ConfigurationError: ..." (`tickwork.worker.tick.advance`)
SETTINGS_SAID = tuple(
    f"{kind.__name__}: "
    for kind in vars(errors).values()
    if isinstance(kind, type) and issubclass(kind, errors.ConfigurationError)
)


def by_settings(error: Exception | str) -> bool:
    """Whether `error` is a refusal by the settings, said in their words and never in flags:
    a `ConfigurationError` (or a kind of it) raised here, one a server answered (its API
    code is in `tickwork.remote.errors.SETTINGS_CODES`), or a stored reason one made."""
    if isinstance(error, str):
        return error.startswith(SETTINGS_SAID)
    if isinstance(error, errors.ConfigurationError):
        return True
    remote = sys.modules.get("tickwork.remote.errors")  # loaded only if a server was named
    return (
        remote is not None
        and isinstance(error, remote.RemoteError)
        and error.code in remote.SETTINGS_CODES
    )
