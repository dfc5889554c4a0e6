"""The command line's flags for the fields the core's messages name.

A message of the client's checks, or one stored on a session (why it failed, how to fork
it on), names the fields an API caller gives, in backticks (`max_steps`). The command
line prints it with each such field that a flag gives as the flag (--max-steps): its user
typed flags. The API and the page keep the fields' names.
"""

from __future__ import annotations

import re

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
    **INPUT_OPTIONS,
}
_FIELD = re.compile("`(" + "|".join(FLAG_OF) + ")`")


def in_flags(message: str) -> str:
    """`message` as a user of the command line reads it: each field it names in backticks
    that a flag gives is the flag (`max_steps` is --max-steps); other words stay."""
    return _FIELD.sub(lambda found: FLAG_OF[found[1]], message)
