"""tickwork.options: the fork options, written once for `fork` and `dlq fork`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import pytest
import typer
from pydantic import ValidationError
from tickwork.fsm.errors import InvalidInput
from tickwork.fsm.values import MIN_PRICE_RATES, PRICE_RATES, ErrorCode
from typer.testing import CliRunner

from tickwork import options
from tickwork.api.bodies import SubmitOptions
from tickwork.cli import make_cli


def test_a_command_with_fork_options_is_given_them_as_one_value() -> None:
    got: list[tuple[str, options.Fork, bool]] = []

    @options.fork_options
    def probe(
        key: Annotated[str, typer.Argument()],
        fork: options.Fork,
        quiet: Annotated[bool, typer.Option("--quiet")] = False,
    ) -> None:
        got.append((key, fork, quiet))

    app = typer.Typer()
    app.command()(probe)
    app.command()(lambda: None)  # two commands, so `probe` is a subcommand
    done = CliRunner().invoke(
        app,
        [
            "probe",
            "s1",
            "--from-step",
            "2",
            "--tool-output",
            "c1=ok",
            "--tool-output",
            "c2=a=b",
            "--max-steps",
            "9",
            "--deadline",
            "60",
            "--as",
            "ana",
            "--id",
            "s1-fork",
            "--state",
            '{"n": 1}',
            "--context-window",
            "20000",
            "--model",
            "openai:gpt-4o",
            "--price",
            "3,12,1.5",
            "--priority",
            "3",
            "--json",
            "--again",
            "--quiet",
        ],
    )
    assert done.exit_code == 0, done.output
    [(key, fork, quiet)] = got
    assert (key, quiet, fork.json_output) == ("s1", True, True)
    assert fork.client_args() == {
        "from_step": 2,
        "by": "ana",
        "system_prompt": None,
        "append_instruction": None,
        "tool_outputs": {"c1": "ok", "c2": "a=b"},
        "budgets": {"max_steps": 9, "deadline_s": 60.0},
        "new_id": "s1-fork",
        "again": True,
        "state": {"n": 1},
        "model": "openai:gpt-4o",
        "price": (3.0, 12.0, 1.5),
        "context_window": 20_000,
        "priority": 3,
        "concurrency_key": None,
        "max_per_key": None,
    }


def test_fork_and_dlq_fork_take_the_same_options() -> None:
    command = typer.main.get_command(make_cli())

    def names(*path: str) -> list[str]:
        found = command
        for part in path:
            found = found.commands[part]  # type: ignore[attr-defined]
        return [p.name for p in found.params]

    shared = list(options.FORK_OPTIONS)
    assert names("fork") == ["session_id", *shared]
    assert names("dlq", "fork") == ["key", *shared]
    assert "again" in shared  # a fork of a session resolves its dead letter too


def test_a_bad_fork_option_names_the_option() -> None:
    with pytest.raises(InvalidInput, match="--tool-output takes CALL_ID=TEXT"):
        options.Fork(from_step=1, by="ana", tool_output=["no-equals"]).client_args()
    with pytest.raises(InvalidInput, match="--state is not valid JSON"):
        options.Fork(from_step=1, by="ana", state="{nope").client_args()


def test_a_call_given_two_outputs_is_refused_naming_both() -> None:
    """QA4 #15: the last one was kept, with no word."""
    given = ["s1c0=a=b", "s2c0=other", "s1c0=" + "second " * 20]
    with pytest.raises(InvalidInput) as raised:
        options.Fork(from_step=1, by="ana", tool_output=given).client_args()
    assert str(raised.value) == (
        "--tool-output gives s1c0 twice ('a=b' and 'second second second second second "
        "secon...'); give each call once"
    )


def test_fork_options_need_a_place_to_go() -> None:
    def bare(key: str) -> None: ...

    with pytest.raises(TypeError, match="bare takes no parameter `fork`"):
        options.fork_options(bare)


def test_the_fork_options_match_the_fork_value() -> None:
    assert list(options.FORK_OPTIONS) == [f for f in options.Fork.__dataclass_fields__]


def test_a_forks_as_says_it_names_the_forks_author() -> None:
    """`--as` of a fork is who forks, not who decides a call (found by an outside run)."""
    command = typer.main.get_command(make_cli())
    for path in (("fork",), ("dlq", "fork")):
        found = command
        for part in path:
            found = found.commands[part]  # type: ignore[attr-defined]
        (by,) = [p for p in found.params if p.name == "by"]
        assert "fork's author" in (by.help or "") and "decides" not in (by.help or ""), path


def test_a_call_output_can_come_from_a_file(tmp_path: Path) -> None:
    """Found by an outside run: an output longer than a command line takes (about 128 KB
    an argument) could not be given at all."""
    long = "line of a hand-fixed output\n" * 10_000  # 280 KB
    (tmp_path / "out.txt").write_text(long, encoding="utf-8")
    fork = options.Fork(
        from_step=1,
        by="ana",
        tool_output=["c1=short"],
        tool_output_file=[f"c2={tmp_path / 'out.txt'}"],
    )
    assert fork.client_args()["tool_outputs"] == {"c1": "short", "c2": long}


def test_a_file_too_large_is_refused_from_its_size_before_it_is_read(
    tmp_path: Path,
) -> None:
    """`text_file` read the whole file first: a log of gigabytes given by mistake filled
    the memory before any check said it was too long."""
    huge = tmp_path / "huge.log"
    with huge.open("wb") as file:  # sparse: no disk is written
        file.truncate(options.MAX_TEXT_FILE_BYTES + 1)
    fork = options.Fork(from_step=1, by="ana", tool_output_file=[f"c1={huge}"])
    with pytest.raises(InvalidInput) as refused:
        fork.client_args()
    assert f"--tool-output-file c1: {huge} is {options.MAX_TEXT_FILE_BYTES + 1:,} bytes" in str(
        refused.value
    )
    assert f"read up to {options.MAX_TEXT_FILE_BYTES:,} bytes: give a shorter one" in str(
        refused.value
    )


def test_a_file_read_keeps_its_text_as_read_text_does(tmp_path: Path) -> None:
    (tmp_path / "crlf.txt").write_bytes("caf\u00e9\r\nok\r".encode())
    assert options.text_file(str(tmp_path / "crlf.txt"), option="--x") == "caf\u00e9\nok\n"


@pytest.mark.parametrize(
    ("text", "files", "says"),
    [
        (["c1=a"], ["c1=out.txt"], "--tool-output and --tool-output-file both give c1"),
        (None, ["c1=missing.txt"], "--tool-output-file c1: cannot read missing.txt"),
        (None, ["c1=binary.bin"], "binary.bin is not UTF-8 text"),
        (None, ["c1="], "--tool-output-file c1 needs a file's path"),
    ],
)
def test_a_bad_output_file_is_refused_naming_the_call(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    text: list[str] | None,
    files: list[str],
    says: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out.txt").write_text("ok")
    (tmp_path / "binary.bin").write_bytes(b"\xff\xfe\x00")
    fork = options.Fork(from_step=1, by="ana", tool_output=text, tool_output_file=files)
    with pytest.raises(InvalidInput, match=re.escape(says)):
        fork.client_args()


@pytest.mark.parametrize(
    "argv",
    [("submit", "repair"), ("fork", "s1", "--from-step", "1"), ("dlq", "fork", "k")],
    ids=["submit", "fork", "dlq fork"],
)
def test_a_context_window_not_a_whole_number_says_what_to_give(
    argv: tuple[str, ...],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--context-window 1e5` was refused with pydantic's "Input should be a valid integer,
    unable to parse string as an integer"."""
    from tickwork.cli import main

    monkeypatch.setenv("TICKWORK_STATE_DIR", str(tmp_path / "state"))
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--context-window", "1e5"])
    assert exited.value.code == 2
    said = capsys.readouterr().err
    assert said.startswith("error: Invalid value for '--context-window': '1e5' is not a whole ")
    assert "number of tokens: give one from 1,024 to 10,000,000, e.g. --context-window 128000" in (
        said
    )
    assert "valid integer" not in said


@pytest.mark.parametrize(
    ("flag", "example"),
    [("--max-tokens", "--max-tokens 2000000"), ("--max-steps", "--max-steps 50")],
)
@pytest.mark.parametrize(
    "argv",
    [("submit", "repair"), ("fork", "s1", "--from-step", "1"), ("dlq", "fork", "k")],
    ids=["submit", "fork", "dlq fork"],
)
def test_a_budget_not_a_whole_number_says_what_to_give(
    argv: tuple[str, ...],
    flag: str,
    example: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--max-tokens 1e9` was refused with pydantic's "Input should be a valid integer,
    unable to parse string as an integer", as `--context-window 1e5` was."""
    from tickwork.cli import main

    monkeypatch.setenv("TICKWORK_STATE_DIR", str(tmp_path / "state"))
    with pytest.raises(SystemExit) as exited:
        main([*argv, flag, "1e9"])
    assert exited.value.code == 2
    said = capsys.readouterr().err
    assert said.startswith(f"error: Invalid value for '{flag}': '1e9' is not a whole number: ")
    assert f"give one, e.g. {example}" in said and "valid integer" not in said


@pytest.mark.parametrize("window", ["100", "20000000"])
@pytest.mark.parametrize(
    "argv",
    # `fork` looks its session up as it reads the arguments: tests/remote/test_cli.py
    [("submit", "repair"), ("dlq", "fork", "k", "--from-step", "1")],
    ids=["submit", "dlq fork"],
)
def test_a_context_window_out_of_bounds_is_refused_by_its_flag_before_anything_is_made(
    argv: tuple[str, ...],
    window: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The command line checks --context-window before it opens the database. The client's
    own check says the same words (`context_window`, printed as the flag), but a local
    submit reaches it only after it made the state folder's database."""
    from tickwork.cli import main

    state = tmp_path / "state"
    monkeypatch.setenv("TICKWORK_STATE_DIR", str(state))
    for name in ("TICKWORK_DATABASE_URL", "TICKWORK_SERVER"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--context-window", window])
    assert exited.value.code == 2
    said = capsys.readouterr().err
    assert said == (
        "error: --context-window must be between 1,024 and 10,000,000 tokens, "
        f"got {int(window):,}\n"
    )
    assert not state.exists()


def test_a_price_may_give_the_cached_rate_as_a_third_number() -> None:
    assert options.price("0.5,1.5") == (0.5, 1.5)
    assert options.price("0.5,1.5,0.05") == (0.5, 1.5, 0.05)
    assert options.price(" 3, 15 ,0.3") == (3.0, 15.0, 0.3)


def test_a_price_may_give_the_cache_write_rate_as_a_fourth_number() -> None:
    """Anthropic bills prompt tokens written to its cache at their own rate, which a
    submitter could not give: a fourth number is it."""
    assert options.price("3,15,0.3,3.75") == (3.0, 15.0, 0.3, 3.75)


def test_price_and_the_apis_price_take_the_same_numbers_of_rates() -> None:
    """--price and the API's `price` list take MIN_PRICE_RATES to all PRICE_RATES, alike."""
    for count in range(1, len(PRICE_RATES) + 2):
        taken = MIN_PRICE_RATES <= count <= len(PRICE_RATES)
        rates = [0.5] * count
        if taken:
            assert options.price(",".join(map(str, rates))) == tuple(rates)
            assert SubmitOptions(price=rates).price == rates
        else:
            with pytest.raises(InvalidInput, match=f"it has {count} numbers|it has one number"):
                options.price(",".join(map(str, rates)))
            with pytest.raises(ValidationError, match="price"):
                SubmitOptions(price=rates)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("cheap", "PROMPT 'cheap' is not a number"),
        ("0.5", "one number"),
        ("0.5,1.5,0.05,1,2", "5 numbers"),
        ("0.5,1.5,free", "CACHED 'free' is not a number"),
        ("0.5,nan", "COMPLETION 'nan' is not a finite number"),
        ("0.5,1.5,-1", "CACHED '-1' is below 0"),
        ("2e6,1.5", "PROMPT '2e6' is above 1,000,000"),
        ("3,15,0.3,-1", "CACHE_WRITE '-1' is below 0"),
        ("3,15,0.3,write", "CACHE_WRITE 'write' is not a number"),
        ("3,15,0.3,2e6", "CACHE_WRITE '2e6' is above 1,000,000"),
    ],
)
def test_a_bad_price_names_the_part_and_what_to_give(given: str, said: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        options.price(given)
    message = str(refused.value)
    assert said in message, message
    assert "--price takes PROMPT,COMPLETION[,CACHED[,CACHE_WRITE]] in USD per million" in message
    assert "e.g. --price 0.5,1.5 or --price 3,15,0.3,3.75" in message


def test_a_login_name_with_a_control_character_is_refused_naming_it_and_as(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No --as: the login name is recorded, and one from $LOGNAME or $USER holding a newline
    was refused as `submitted_by` or `by`, words the user never typed."""
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(name, "ali\nce")
    with pytest.raises(InvalidInput) as refused:
        options.approver(None, doing="submitting")
    said = refused.value.message
    assert said.startswith("the login name ($LOGNAME or $USER) 'ali\\nce' holds"), said
    assert said.endswith("; pass --as NAME")
    assert options.approver(" alice ") == "alice"


@pytest.mark.parametrize(
    ("given", "seconds"),
    [("600", 600.0), ("90s", 90.0), ("30m", 1800.0), ("2h", 7200.0), ("1d", 86400.0)],
)
def test_a_deadline_takes_seconds_or_a_duration_as_the_page_does(
    given: str, seconds: float
) -> None:
    got: list[options.Fork] = []

    @options.fork_options
    def probe(fork: options.Fork) -> None:
        got.append(fork)

    app = typer.Typer()
    app.command()(probe)
    app.command()(lambda: None)
    done = CliRunner().invoke(app, ["probe", "--from-step", "1", "--deadline", given])
    assert done.exit_code == 0, done.output
    assert got[0].client_args()["budgets"] == {"deadline_s": seconds}


@pytest.mark.parametrize(
    "argv",
    [("submit", "repair"), ("dlq", "fork", "k", "--from-step", "1")],
    ids=["submit", "dlq fork"],
)
def test_a_deadline_that_is_no_duration_says_what_to_give(
    argv: tuple[str, ...],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tickwork.cli import main

    monkeypatch.setenv("TICKWORK_STATE_DIR", str(tmp_path / "state"))
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--deadline", "soon"])
    assert exited.value.code == 2
    said = capsys.readouterr().err
    assert said.startswith("error: Invalid value for '--deadline': 'soon' is not a duration: ")
    assert "e.g. --deadline 2h" in said and "valid number" not in said


@pytest.mark.parametrize(
    ("argv", "flag"),
    [(("dlq", "ls"), "--code"), (("dlq", "export"), "--code"), (("ls",), "--error-code")],
)
def test_error_codes_are_listed_upper_case_as_everywhere_and_taken_in_any_case(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: tuple[str, ...],
    flag: str,
) -> None:
    """`dlq ls --code` listed budget_steps where every listing, the API and the docs say
    BUDGET_STEPS."""
    from tickwork.cli import main

    monkeypatch.setenv("TICKWORK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("COLUMNS", "300")
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--help"])
    shown = capsys.readouterr().out
    assert exited.value.code == 0
    assert "BUDGET_STEPS|BUDGET_TOKENS" in shown and "budget_steps" not in shown
    with pytest.raises(SystemExit) as exited:
        main([*argv, flag, "nope"])
    assert exited.value.code == 2
    said = capsys.readouterr().err
    assert "'nope' is no error code; give one of BUDGET_STEPS, BUDGET_TOKENS" in said
    assert options.error_code("loop") is ErrorCode.LOOP
