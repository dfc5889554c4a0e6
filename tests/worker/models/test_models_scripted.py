from __future__ import annotations

import json

import pytest
from tickwork.fsm import context
from tickwork.fsm.errors import ConfigurationError, PermanentModelError, TransientModelError
from tickwork.fsm.values import ProposedCall, Usage
from tickwork.worker.models import Model, ModelSettings, ScriptedModel
from tickwork.worker.models.base import estimate_tokens, transcript_text

SETTINGS = ModelSettings()
REPAIR = [
    {
        "content": "Let me look.",
        "tool_calls": [
            {"name": "read_file", "arguments": {"path": "a.py"}},
            {"name": "run_tests", "arguments": {}},
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20},
    },
    {"content": "", "tool_calls": [{"name": "write_file", "arguments": '{"path": "a.py", '}]},
    {"content": "Fixed the off-by-one."},
]


def transcript(assistant_turns: int) -> list[dict]:
    messages: list[dict] = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    for i in range(assistant_turns):
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": f"s{i}c0",
                        "type": "function",
                        "function": {"name": "run_tests", "arguments": "{}"},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"s{i}c0", "content": "ok"})
    return messages


def test_it_is_a_model(write_script):
    assert isinstance(ScriptedModel(write_script(REPAIR)), Model)


def test_reply_is_chosen_by_the_number_of_assistant_messages(write_script):
    model = ScriptedModel(write_script(REPAIR))

    first = model.generate(transcript(0), [], SETTINGS)
    third = model.generate(transcript(2), [], SETTINGS)
    first_again = model.generate(transcript(0), [], SETTINGS)

    assert first.calls == (
        ProposedCall(name="read_file", arguments='{"path": "a.py"}'),
        ProposedCall(name="run_tests", arguments="{}"),
    )
    assert first.usage == Usage(prompt_tokens=100, completion_tokens=20)
    assert first.model == "scripted"
    assert third.content == "Fixed the off-by-one." and third.calls == ()
    assert first_again == first.model_copy(update={"latency_ms": first_again.latency_ms})


def _summarised(through: int, summary: str, *replies: list[dict]) -> list[dict]:
    """A prompt after a compaction: the summary, then the replies after its cut."""
    heading = {"role": "user", "content": context.SUMMARY_HEADING.format(through=through)}
    heading["content"] += summary
    return [*transcript(0), heading, *(m for reply in replies for m in reply)]


def _asking(messages: list[dict], through: int) -> list[dict]:
    return [*messages, {"role": "user", "content": context.SUMMARISE.format(through=through)}]


def test_a_compaction_is_answered_without_using_a_reply_of_the_script(write_script):
    model = ScriptedModel(write_script(REPAIR))
    asked = _asking(transcript(2), through=1)
    second = transcript(2)[4:]  # the second reply and its observation

    summary = model.generate(asked, [], SETTINGS)
    after = model.generate(_summarised(1, summary.content, second), [], SETTINGS)

    assert summary.content == "[scripted summary] replies 1-1; compactions after the cut: steps 3"
    assert summary.calls == ()
    assert summary.usage == Usage(
        prompt_tokens=estimate_tokens(transcript_text(asked)),
        completion_tokens=estimate_tokens(summary.content),
    )
    assert after.content == "Fixed the off-by-one.", "the third reply: step 2 after 1 summarised"


def test_a_summary_counts_the_compactions_after_its_cut_as_no_replies(write_script):
    model = ScriptedModel(write_script({"replies": REPAIR, "repeat_last": True}))
    reply = transcript(1)[2:]
    # steps 2 and 4 are replies, 3 the compaction that cut at 1
    first = "[scripted summary] replies 1-1; compactions after the cut: steps 3"

    again = model.generate(_asking(_summarised(1, first, reply, reply), through=2), [], SETTINGS)
    later = _summarised(2, again.content, reply, reply)

    assert again.content == "[scripted summary] replies 1-2; compactions after the cut: steps 3, 5"
    assert model.generate(_asking(later, through=4), [], SETTINGS).content == (
        "[scripted summary] replies 1-3; compactions after the cut: steps 5, 7"
    )


def test_a_summary_the_scripted_model_did_not_write_is_refused(write_script):
    path = write_script(REPAIR)
    edited = _summarised(4, "The agent read a.py and ran the tests.", transcript(1)[2:])

    with pytest.raises(PermanentModelError) as caught:
        ScriptedModel(path).generate(edited, [], SETTINGS)

    assert str(caught.value).startswith(
        f"script {path}: the summary of steps 1-4 in the prompt was not written by the "
        "scripted model (it begins 'The agent read a.py"
    )


def test_string_arguments_pass_through_raw(write_script):
    reply = ScriptedModel(write_script(REPAIR)).generate(transcript(1), [], SETTINGS)

    assert reply.calls == (ProposedCall(name="write_file", arguments='{"path": "a.py", '),)


def test_usage_is_estimated_when_missing(write_script):
    model = ScriptedModel(write_script([{"content": "x" * 40}]))

    usage = model.generate([{"role": "user", "content": "y" * 80}], [], SETTINGS).usage

    assert usage == Usage(prompt_tokens=20, completion_tokens=10)


def test_past_the_end_is_a_permanent_error(write_script):
    path = write_script(REPAIR)

    with pytest.raises(PermanentModelError) as caught:
        ScriptedModel(path).generate(transcript(3), [], SETTINGS)

    assert str(caught.value).startswith(
        f"script {path} has 3 replies; the session asked for reply 4"
    )


def test_past_the_end_says_the_calls_before_count_a_fork_s_too(write_script):
    """A fork from step 3 onto a new script (`fork --model scripted:NEW`, its three
    replies written for what comes next) failed "has 3 replies; the session asked for
    reply 4", nowhere saying that the kept steps count: the new script is played from
    reply 4, its first three standing for them."""
    path = write_script(REPAIR)

    with pytest.raises(PermanentModelError) as caught:
        ScriptedModel(path).generate(transcript(3), [], SETTINGS)

    said = str(caught.value)
    assert "reply 4 (3 model calls came before it; in a fork they include its kept steps" in said
    assert "a script a fork switches to is played from reply 4 too" in said, said
    assert said.endswith('add replies or set "repeat_last": true'), said


def test_repeat_last_expresses_a_loop(write_script):
    same = {"content": "again", "tool_calls": [{"name": "run_tests", "arguments": {}}]}
    model = ScriptedModel(write_script({"replies": [same], "repeat_last": True}))

    replies = [model.generate(transcript(n), [], SETTINGS) for n in range(5)]

    assert {r.calls for r in replies} == {(ProposedCall(name="run_tests", arguments="{}"),)}


def test_delay_sleeps_before_answering(write_script):
    model = ScriptedModel(write_script([{"content": "slow", "delay_s": 0.1}]))

    assert model.generate([], [], SETTINGS).latency_ms >= 100


def test_error_entries_raise(write_script):
    path = write_script(
        {
            "replies": [
                {"error": {"transient": True, "message": "rate limited", "retry_after_s": 2}},
                {"error": {"transient": False, "message": "bad key"}},
            ]
        }
    )
    model = ScriptedModel(path)

    with pytest.raises(TransientModelError, match="rate limited") as transient:
        model.generate(transcript(0), [], SETTINGS)
    with pytest.raises(PermanentModelError, match=r"bad key .*replies\[1\]"):
        model.generate(transcript(1), [], SETTINGS)

    assert transient.value.retry_after_s == 2


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ("[{", "is not valid JSON: line 1 column 3"),
        ([], "non-empty list of replies"),
        ({"replies": []}, "non-empty list of replies"),
        ({"replies": [{}], "loop": True}, "unknown keys ['loop']"),
        ({"replies": [{}], "repeat_last": "yes"}, '"repeat_last" must be true or false'),
        ([{}, "hello"], "replies[1] must be an object, got str"),
        ([{}, {}, {"content": 5}], "replies[2] is not valid: content"),
        ([{"tool_calls": [{"arguments": {}}]}], "replies[0] is not valid: tool_calls.0.name"),
        ([{"tool_calls": [{"name": "x", "arguments": [1]}]}], "tool_calls.0.arguments"),
        ([{"contents": "typo"}], "replies[0] is not valid: contents"),
        ([{"delay_s": -1}], "replies[0] is not valid: delay_s"),
        # a negative count took tokens and cost off the session's bill, past its budgets
        (
            [{"usage": {"prompt_tokens": -1000000, "completion_tokens": 5}}],
            "replies[0] is not valid: usage.prompt_tokens: Input should be greater than or "
            "equal to 0",
        ),
        (
            [{"usage": {"completion_tokens": 2**53}}],
            "replies[0] is not valid: usage.completion_tokens: Input should be less than or equal",
        ),
        ([{"error": {"message": "m"}}], "replies[0] is not valid: error.transient"),
    ],
)
def test_invalid_files_are_refused_naming_file_and_reply(write_script, data, expected):
    path = write_script(data)

    with pytest.raises(ConfigurationError) as caught:
        ScriptedModel(path)

    assert str(path) in str(caught.value)
    assert expected in str(caught.value)


def test_a_missing_file_is_refused(tmp_path):
    with pytest.raises(ConfigurationError, match=r"cannot read script .*nope\.json"):
        ScriptedModel(tmp_path / "nope.json")


def test_an_edited_script_is_played_as_it_is_now(write_script):
    """A worker keeps its models by spec: a script edited since plays its new replies (the
    submit checked the new file), and one left unreadable plays on as it was."""
    path = write_script([{"content": "old"}])
    model = ScriptedModel(path)
    assert model.generate(transcript(0), [], SETTINGS).content == "old"

    with open(path, "w") as out:
        json.dump([{"content": "new, and longer"}], out)
    assert model.generate(transcript(0), [], SETTINGS).content == "new, and longer"

    with open(path, "w") as out:
        out.write("[{")  # half written
    assert model.generate(transcript(0), [], SETTINGS).content == "new, and longer"
