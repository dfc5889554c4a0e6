"""A ReAct text adapter: tool calling for models that only write text.

The tool schemas go into the system prompt, the transcript's tool calls and results become
`Action:` / `Action Input:` / `Observation:` text, and the inner model, called without tools,
answers `Thought: ... / Action: name / Action Input: {json}` or `Final Answer: ...`. The
parser is tolerant of case, whitespace, markdown emphasis and code fences; of several actions
in one reply only the first is taken, and anything after it (a made-up `Observation:`) is
dropped.

A reply that does not follow the format still becomes a step, so the session goes on and the
model is told what to fix: it is one call with the name `""` whose arguments are the whole
reply text (an `Action:` with no name counts as missing). No tool has that name, so the
call runs nothing and gets an error observation; when the transcript is rendered again,
that call shows as the model's own text followed by an observation that restates the
format. An `Action:` whose input is not JSON keeps its name and passes the input through as
text; the state machine answers it with an error observation, as it does for malformed
native tool calls. When no tools are offered, a reply without labels is the final answer.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tickwork.fsm import context
from tickwork.fsm.values import ModelReply, ProposedCall
from tickwork.worker.models.base import Message, Model, ModelSettings, ToolSchema

_LABEL = re.compile(
    r"^[ \t>#*_]*(?P<label>thought|action[ _]?input|action|observation|final[ _]?answer)"
    r"[ \t*_]*:[ \t*_]*",
    re.IGNORECASE | re.MULTILINE,
)
_FENCE = re.compile(r"```[\w+-]*[ \t]*\n?(.*?)(?:```|$)", re.DOTALL)

#: the observation shown for a reply that did not follow the format
FORMAT_REMINDER = (
    "ERROR: your reply did not follow the format. Write `Action: <tool name>` and "
    "`Action Input: <JSON object>` to use a tool, or `Final Answer: <answer>` when you are done."
)

_INSTRUCTIONS = """\
You can use these tools:

{tools}

To use a tool, reply in exactly this format, then stop and wait for its result:

Thought: what you will do and why
Action: the tool's name, one of: {names}
Action Input: the arguments as one JSON object

The result comes back as "Observation: ...". Use one tool at a time. When you have the \
answer, reply:

Thought: why you are done
Final Answer: the answer"""


class ReActModel:
    """Wraps a text-only model so that it proposes tool calls in ReAct text.

    `stop` is added to the inner call's `settings.extra` (unless it has one) so the model
    stops before writing an observation of its own.
    """

    def __init__(self, inner: Model, *, stop: tuple[str, ...] = ("\nObservation:",)) -> None:
        self.inner = inner
        self.stop = stop

    def __repr__(self) -> str:
        return f"ReActModel({self.inner!r})"

    def generate(
        self, messages: list[Message], tools: list[ToolSchema], settings: ModelSettings
    ) -> ModelReply:
        if self.stop and "stop" not in settings.extra:
            settings = settings.model_copy(
                update={"extra": {**settings.extra, "stop": list(self.stop)}}
            )
        reply = self.inner.generate(render(messages, tools), [], settings)
        # a compaction's summary is plain text, whatever tools the prompt lists (it lists
        # them for the provider's prefix cache): not a call to parse out of it
        summarising = context.summary_asked(messages) is not None
        content, call = parse(reply.content, tools_offered=bool(tools) and not summarising)
        return reply.model_copy(update={"content": content, "calls": (call,) if call else ()})


def render(messages: list[Message], tools: list[ToolSchema]) -> list[Message]:
    """The transcript as plain chat text, with the tools and the format in the system prompt."""
    out: list[Message] = []
    names: dict[str, str] = {}
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            calls = [c for c in message.get("tool_calls") or () if isinstance(c, dict)]
            for call in calls:
                names[str(call.get("id"))] = _function(call).get("name") or ""
            text = _assistant_text(_str(message.get("content")), calls)
            out.append({"role": "assistant", "content": text})
        elif role == "tool":
            name = names.get(str(message.get("tool_call_id")))
            seen = FORMAT_REMINDER if name == "" else _str(message.get("content"))
            _add_user(out, f"Observation: {seen}")
        elif role == "user":
            _add_user(out, _str(message.get("content")))
        else:
            out.append({"role": role, "content": _str(message.get("content"))})
    if tools:
        instructions = _instructions(tools)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{instructions}"}
        else:
            out.insert(0, {"role": "system", "content": instructions})
    return out


def parse(text: str, *, tools_offered: bool = True) -> tuple[str, ProposedCall | None]:
    """(content, the proposed call or None) from a ReAct reply; see the module docstring."""
    marks = list(_LABEL.finditer(text))
    labels = [_normal(m["label"]) for m in marks]
    bodies = [
        text[m.end() : marks[i + 1].start() if i + 1 < len(marks) else len(text)]
        for i, m in enumerate(marks)
    ]
    action = labels.index("action") if "action" in labels else None
    final = labels.index("final answer") if "final answer" in labels else None
    if action is not None and (final is None or action < final):
        has_input = action + 1 < len(labels) and labels[action + 1] == "action input"
        name, inline = _name(bodies[action])
        if name:
            arguments = _arguments(bodies[action + 1] if has_input else inline)
            before = [text[: marks[0].start()]] + [
                body
                for label, body in zip(labels[:action], bodies[:action], strict=True)
                if label == "thought"
            ]
            thought = "\n".join(part.strip() for part in before if part.strip())
            return thought, ProposedCall(name=name, arguments=arguments)
    if final is not None:
        return text[marks[final].end() :].strip(), None
    if not tools_offered:
        return text.strip(), None
    return "", ProposedCall(name="", arguments=text.strip())


def _normal(label: str) -> str:
    label = label.lower().replace("_", " ")
    return {"actioninput": "action input", "finalanswer": "final answer"}.get(label, label)


def _name(body: str) -> tuple[str, str]:
    """(tool name, arguments written on the same line as in `read_file {"path": "a"}`)."""
    line = body.strip().split("\n", 1)[0]
    brace = line.find("{")
    inline = line[brace:] if brace >= 0 else ""
    name = line[:brace] if brace >= 0 else line
    return name.strip().strip("`*\"'([").strip().rstrip(".").strip(), inline


def _arguments(body: str) -> str:
    """The JSON object as written, out of code fences and loose text; else the text itself."""
    text = body.strip()
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group(1).strip()
    start = text.find("{")
    if start >= 0:
        try:
            _, end = json.JSONDecoder().raw_decode(text, start)
        except ValueError:
            return text
        return text[start:end]
    return text


def _assistant_text(content: str, calls: list[dict[str, Any]]) -> str:
    if not calls:
        return f"Final Answer: {content}"
    lines = [f"Thought: {content}"] if content else []
    for call in calls:
        function = _function(call)
        arguments = _str(function.get("arguments"))
        if not function.get("name"):
            lines.append(arguments)
        else:
            lines += [f"Action: {function['name']}", f"Action Input: {arguments}"]
    return "\n".join(lines)


def _add_user(out: list[Message], text: str) -> None:
    # consecutive user turns are merged: some chat templates insist that roles alternate
    if out and out[-1]["role"] == "user":
        out[-1] = {"role": "user", "content": f"{out[-1]['content']}\n\n{text}"}
    else:
        out.append({"role": "user", "content": text})


def _instructions(tools: list[ToolSchema]) -> str:
    lines, names = [], []
    for tool in tools:
        function = _function(tool)
        name = str(function.get("name") or "")
        names.append(name)
        lines.append(f"- {name}: {function.get('description') or ''}".rstrip())
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        lines.append(f"  arguments (JSON schema): {json.dumps(parameters, ensure_ascii=False)}")
    return _INSTRUCTIONS.format(tools="\n".join(lines), names=", ".join(names))


def _function(item: dict[str, Any]) -> dict[str, Any]:
    function = item.get("function")
    return function if isinstance(function, dict) else {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)
