from __future__ import annotations

import json

import pytest
from tickwork.fsm.values import ModelReply, ProposedCall, Usage
from tickwork.worker.models import ModelSettings, ReActModel
from tickwork.worker.models.react import FORMAT_REMINDER, parse, render

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file in the workspace.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    },
    {"type": "function", "function": {"name": "run_tests", "description": "Run the tests."}},
]


class Recorder:
    """A text-only inner model that answers `text` and keeps what it was asked."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.calls: list[tuple[list, list, ModelSettings]] = []

    def generate(self, messages, tools, settings):
        self.calls.append((messages, tools, settings))
        return ModelReply(
            content=self.text,
            usage=Usage(prompt_tokens=9, completion_tokens=4),
            model="llama3",
            latency_ms=12.0,
        )


def call(name, arguments):
    return ProposedCall(name=name, arguments=arguments)


@pytest.mark.parametrize(
    "text",
    [
        'Thought: look at the file\nAction: read_file\nAction Input: {"path": "a.py"}',
        "  thought:   look at the file  \n\n  ACTION :  read_file \n action input: "
        '{"path": "a.py"}\n',
        "Thought: look at the file\n**Action:** `read_file`\n**Action Input:**\n```json\n"
        '{"path": "a.py"}\n```',
        'Thought: look at the file\nAction: read_file\nAction Input: ```{"path": "a.py"}```',
        'Thought: look at the file\nAction: read_file\nAction_Input: {"path": "a.py"} '
        "and then I will fix it",
        'Thought: look at the file\nAction: read_file\nAction Input: {"path": "a.py"}\n'
        "Observation: def f(): ...\nThought: now fix it\nAction: write_file\n"
        'Action Input: {"path": "a.py"}\nFinal Answer: done',
        'look at the file\nAction: read_file {"path": "a.py"}',
    ],
)
def test_an_action_in_its_variants(text):
    assert parse(text) == ("look at the file", call("read_file", '{"path": "a.py"}'))


def test_nested_json_is_kept_whole():
    text = 'Action: write_file\nAction Input: {"path": "a.py", "meta": {"mode": "w"}}'

    _, proposed = parse(text)

    assert json.loads(proposed.arguments) == {"path": "a.py", "meta": {"mode": "w"}}


def test_an_action_without_input_has_empty_arguments():
    assert parse("Thought: check\nAction: run_tests") == ("check", call("run_tests", ""))


def test_input_that_is_not_json_keeps_the_name_and_the_text():
    assert parse("Action: read_file\nAction Input: path=a.py") == (
        "",
        call("read_file", "path=a.py"),
    )


@pytest.mark.parametrize(
    "text",
    [
        "Thought: I know it now\nFinal Answer: The bug was an off-by-one.",
        "final answer:The bug was an off-by-one.",
        "**Final Answer:** The bug was an off-by-one.",
    ],
)
def test_final_answer(text):
    assert parse(text) == ("The bug was an off-by-one.", None)


def test_final_answer_is_the_rest_of_the_text_even_if_an_action_follows():
    text = "Final Answer: line one\nline two\nAction: read_file\n"

    assert parse(text) == ("line one\nline two\nAction: read_file", None)


@pytest.mark.parametrize("text", ["I am not sure what to do.", "Action:\nAction Input: {}", ""])
def test_garbage_becomes_a_call_with_no_name_and_the_whole_text(text):
    assert parse(text) == ("", call("", text.strip()))


def test_without_tools_plain_text_is_the_answer():
    assert parse("It is fixed.", tools_offered=False) == ("It is fixed.", None)


def test_render_puts_tools_and_format_in_the_system_prompt():
    messages = [
        {"role": "system", "content": "You repair code."},
        {"role": "user", "content": "Fix it."},
    ]

    out = render(messages, TOOLS)

    assert out[0]["role"] == "system"
    assert out[0]["content"].startswith("You repair code.\n\n")
    assert "- read_file: Read a file in the workspace." in out[0]["content"]
    assert '"path": {"type": "string"}' in out[0]["content"]
    assert "one of: read_file, run_tests" in out[0]["content"]
    assert out[1] == {"role": "user", "content": "Fix it."}


def test_render_turns_calls_and_results_into_text():
    messages = [
        {"role": "user", "content": "Fix it."},
        {
            "role": "assistant",
            "content": "look first",
            "tool_calls": [
                {
                    "id": "s1c0",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
                },
                {
                    "id": "s1c1",
                    "type": "function",
                    "function": {"name": "run_tests", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "s1c0", "name": "read_file", "content": "x = 1"},
        {"role": "tool", "tool_call_id": "s1c1", "name": "run_tests", "content": "ERROR: 1 failed"},
        {"role": "user", "content": "Hurry up."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "s2c0",
                    "type": "function",
                    "function": {"name": "", "arguments": "I will think about it."},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "s2c0", "name": "", "content": "unknown tool"},
    ]

    out = render(messages, [])

    assert out == [
        {"role": "user", "content": "Fix it."},
        {
            "role": "assistant",
            "content": "Thought: look first\nAction: read_file\n"
            'Action Input: {"path": "a.py"}\nAction: run_tests\n'
            "Action Input: {}",
        },
        {
            "role": "user",
            "content": "Observation: x = 1\n\nObservation: ERROR: 1 failed\n\nHurry up.",
        },
        {"role": "assistant", "content": "I will think about it."},
        {"role": "user", "content": f"Observation: {FORMAT_REMINDER}"},
    ]


def test_adapter_calls_the_inner_model_without_tools_and_parses():
    inner = Recorder('Thought: look\nAction: read_file\nAction Input: {"path": "a.py"}')
    model = ReActModel(inner)

    reply = model.generate(
        [{"role": "user", "content": "Fix it."}], TOOLS, ModelSettings(temperature=0)
    )

    assert reply == ModelReply(
        content="look",
        calls=(call("read_file", '{"path": "a.py"}'),),
        usage=Usage(prompt_tokens=9, completion_tokens=4),
        model="llama3",
        latency_ms=12.0,
    )
    messages, tools, settings = inner.calls[0]
    assert tools == []
    assert messages[0]["role"] == "system" and "Action Input:" in messages[0]["content"]
    assert settings.extra == {"stop": ["\nObservation:"]} and settings.temperature == 0


def test_adapter_keeps_a_stop_the_caller_set():
    inner = Recorder("Final Answer: ok")

    reply = ReActModel(inner).generate([], TOOLS, ModelSettings(extra={"stop": ["END"]}))

    assert reply.content == "ok" and reply.calls == ()
    assert inner.calls[0][2].extra == {"stop": ["END"]}


def test_adapter_round_trip_keeps_the_assistant_count():
    messages = [{"role": "user", "content": "Fix it."}]
    for step in range(3):
        messages += [
            {
                "role": "assistant",
                "content": "t",
                "tool_calls": [
                    {
                        "id": f"s{step}c0",
                        "type": "function",
                        "function": {"name": "run_tests", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"s{step}c0", "content": "ok"},
        ]

    out = render(messages, TOOLS)

    assert sum(m["role"] == "assistant" for m in out) == 3
