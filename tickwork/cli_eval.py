"""`tickwork eval`: run a task set with a model configuration, show and compare stored runs,
export them as Parquet and chart cost against success (docs/EVAL.md).

`tickwork eval TASKS.jsonl ...` is `tickwork eval run TASKS.jsonl ...`, and `tickwork eval
--demo` runs the shipped task set offline with its scripted models.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from tickwork.fsm.errors import InvalidInput, InvalidModelSpec, TickworkError
from tickwork.fsm.wording import counted, usd

from . import options, render
from .cli import PlainGroup
from .context import Context
from .eval.model import Approve

if TYPE_CHECKING:
    from click import Context as ClickContext

    from .eval.model import Run, TaskResult
    from .eval.runs import Runs

#: the demo's pretend price in USD per million tokens: scripted models are free, and a run
#: that costs nothing charts nothing
DEMO_PRICE = (3.0, 15.0)


class _RunByDefault(PlainGroup):
    """`tickwork eval ARGS` runs `tickwork eval run ARGS` unless ARGS start with a command."""

    def parse_args(self, ctx: ClickContext, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            _not_a_typo(ctx, args[0], sorted(self.commands))
            args = ["run", *args]
        return super().parse_args(ctx, args)


def _not_a_typo(ctx: ClickContext, first: str, commands: list[str]) -> None:
    """A UsageError for a bare word that is neither a command nor a file here (`eval shwo`),
    which would otherwise be read as a task set and refused in words that name neither."""
    from .cli import clicks

    if first.startswith("-") or "/" in first or "." in first or Path(first).expanduser().exists():
        return
    raise clicks.UsageError(
        f"no command '{first}' of `tickwork eval`, and no task set file of that name here; "
        f"the commands are {', '.join(commands)}, and `tickwork eval TASKS.jsonl --model SPEC` "
        "runs a task set",
        ctx,
    )


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        cls=_RunByDefault,
        no_args_is_help=True,
        help="Run a task set of repair jobs with a model configuration; show, compare, "
        "export and chart the runs.\n\n`tickwork eval TASKS.jsonl --model SPEC` runs one "
        "(`tickwork eval run`); `tickwork eval --demo` runs the shipped demo set offline.",
    )
    group.command("run")(run)
    group.command("ls")(list_runs)
    group.command()(show)
    group.command()(compare)
    group.command()(chart)
    app.add_typer(group, name="eval")


Parquet = Annotated[
    Path | None,
    typer.Option("--parquet", metavar="FILE", help="Also write the rows as a Parquet file."),
]
RunKey = Annotated[
    str, typer.Argument(metavar="RUN", help="A run id, the start of one, or `last`.")
]


def _runs(ctx: Context) -> Runs:
    from .eval.runs import Runs

    return Runs(ctx.settings.state_dir.absolute() / "evals")


def run(
    tasks: Annotated[
        Path | None,
        typer.Argument(
            metavar="TASKS.jsonl",
            help="The task set, one JSON object a line; see docs/EVAL.md "
            "(`tickwork docs eval task set`).",
            show_default=False,
        ),
    ] = None,
    demo: Annotated[
        bool,
        typer.Option(
            "--demo",
            help="Run the shipped demo task set: tiny buggy projects and scripted models, "
            "offline (tokens priced at a pretend 3,15 unless --price says otherwise).",
        ),
    ] = False,
    model: Annotated[
        str | None,
        typer.Option(
            metavar="SPEC",
            help="openai:MODEL, anthropic:MODEL, scripted:PATH, or `scripted` for each "
            "task's own script.",
            show_default="$TICKWORK_MODEL; scripted with --demo",
        ),
    ] = None,
    price: options.Price = None,
    max_steps: options.MaxSteps = None,
    max_tokens: options.MaxTokens = None,
    max_cost_usd: options.MaxCostUsd = None,
    deadline: options.Deadline = None,
    context_window: options.ContextWindow = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-c", min=1, max=64, help="Sessions at a time.")
    ] = 2,
    approve: Annotated[
        Approve,
        typer.Option(
            case_sensitive=False,
            help="`all`: approve every call that waits, recorded as approver `eval`; `wait`: "
            "leave them to a person (`tickwork approve`) while the run waits.",
        ),
    ] = Approve.ALL,
    timeout: Annotated[
        float,
        typer.Option(
            min=1.0, help="Seconds a task may take from its submit; then it is cancelled."
        ),
    ] = 600.0,
    worker: Annotated[
        bool,
        typer.Option(
            "--worker/--no-worker",
            help="Start a worker for the run and stop it at the end; --no-worker leaves the "
            "sessions to the deployment's own workers.",
        ),
    ] = True,
    label: Annotated[
        str | None,
        typer.Option(help="A name for the run in tables and charts.", show_default="the model"),
    ] = None,
    parquet: Parquet = None,
    any_path: Annotated[
        bool,
        typer.Option(
            "--any-path",
            help="Take the task set's local sources and scripts wherever they are (your own "
            "task set); by default they must lie in its git work tree or folder.",
        ),
    ] = False,
    json_output: options.Json = False,
) -> None:
    """Run a task set: one repair session a task, N at a time; a table of the results.

    Exits 1 when a task says nothing of the model (not submitted, timed out, cancelled,
    failed MODEL_ERROR, INTERNAL, ENV_SETUP or ARTIFACT_CORRUPT, or its expected tests could
    not run); tasks the model did not repair are the run's answer (exit 0)."""
    from .eval.model import SCRIPTED, RunConfig
    from .eval.runner import model_for, run_tasks
    from .eval.runs import new_id
    from .eval.tasks import read_tasks

    if demo == (tasks is not None):
        raise InvalidInput("give a task set (TASKS.jsonl) or --demo, not both or neither")
    mode = Approve(approve)
    if label is not None and (not label.strip() or len(label) > 80):
        raise InvalidInput("--label takes a name of 1 to 80 characters")
    if parquet is not None:
        _check_parquet(parquet)
    if demo:
        from .cli_demo import EXAMPLES

        tasks = EXAMPLES / "eval" / "tasks.jsonl"
    assert tasks is not None
    # the shipped demo set names the shipped example beside it, outside its folder
    task_set = read_tasks(tasks.expanduser().absolute(), any_path=any_path or demo)
    with Context(creates=True) as ctx:
        client = ctx.client
        spec = model or ("scripted" if demo else ctx.settings.model)
        if not spec:
            raise InvalidInput(
                "no model given: pass --model SPEC (or `scripted` for each task's own script) "
                "or set TICKWORK_MODEL"
            )
        if spec != SCRIPTED:
            try:
                spec = client.providers.check(options.model_spec(spec, client.providers) or spec)
            except InvalidModelSpec as exc:
                if model:
                    raise
                raise InvalidModelSpec(f"invalid setting TICKWORK_MODEL: {exc.message}") from None
        given_price = options.price(price)
        if given_price is None and demo and spec == SCRIPTED:
            given_price = DEMO_PRICE
        config = RunConfig(
            model=spec,
            budgets=options.budgets(
                max_steps=max_steps,
                max_tokens=max_tokens,
                max_cost_usd=max_cost_usd,
                deadline=deadline,
            ),
            price=given_price,
            context_window=context_window,
            concurrency=concurrency,
            approve=mode,
            timeout_s=timeout,
            label=(label or "").strip(),
        )
        client.budgets(config.budgets)  # names and values checked before anything runs
        for task in task_set.tasks:  # a task without its script, before the run's header
            model_for(task, config, task_set=task_set.path)
        runs = _runs(ctx)
        run_id = new_id(client.clock())
        own: dict[str, Any] = {}
        if demo and spec == SCRIPTED:
            from tickwork.worker.sandbox.runner import DEMO_UNCONFINED

            own = {DEMO_UNCONFINED: True}  # the shipped projects and scripts, as `tickwork demo`
        say = (lambda *_: None) if json_output else render.show
        say(
            Text.assemble(
                ("tickwork eval", "bold"),
                f": run {run_id}, {counted(len(task_set.tasks), 'task')} of {task_set.path} with "
                f"{config.model}, {concurrency} at a time, approvals: {mode.value}",
            )
        )
        if demo and given_price == DEMO_PRICE:
            say(
                Text(
                    "The models are scripted (replies written in advance, no network); their "
                    f"tokens are priced at a pretend ${DEMO_PRICE[0]:g}/${DEMO_PRICE[1]:g} per "
                    "million so the costs can be compared (--price changes it).",
                    style="dim",
                )
            )
        _sandbox_note(ctx, say, unconfined=bool(own))
        if not worker:
            say(
                Text(
                    "--no-worker: the sessions wait for the deployment's own workers "
                    f"(`tickwork worker`); a task not done in {timeout:g}s is cancelled.",
                    style="dim",
                )
            )

        def stored(so_far: Run, result: TaskResult) -> None:
            runs.save(so_far)
            say(_progress(result))

        started = None
        check = None
        if worker:
            from .cli_demo import start_worker, stop_worker

            logs = runs.folder / "logs"
            logs.mkdir(parents=True, exist_ok=True)
            log = logs / f"{run_id}.worker.log"
            started = start_worker(log, concurrency=concurrency)

            def check() -> None:
                if started is not None and started.poll() is not None:
                    raise TickworkError(
                        f"the eval's worker stopped (exit {started.returncode}); see {log}"
                    )

        try:
            done = run_tasks(
                client,
                task_set,
                config,
                run_id=run_id,
                own_config=own,
                on_result=stored,
                watch=check,
            )
        finally:
            if started is not None:
                stop_worker(started)
        runs.save(done)
    _print_run(done, json_output=json_output, parquet=parquet)
    if done.state == "interrupted":
        render.show(
            Text(
                f"interrupted: the run {done.id} keeps the tasks finished by then; the "
                "sessions in flight were cancelled",
                style="yellow",
            )
        )
        raise typer.Exit(130)
    _fault_if_unmeasured(done)


def _fault_if_unmeasured(done: Run) -> None:
    """Exit 1 (README, "Errors and exit codes": a service refused, a check found a fault)
    when a task's figures say nothing of the model; a task the model did not repair is the
    run's answer, not a fault, so the demo's run exits 0."""
    unmeasured = [r for r in done.results if not r.measured]
    if not unmeasured:
        return
    named = ", ".join(
        f"{r.task} ({r.outcome.value}{f' {r.cause}' if r.cause else ''}"
        f"{', expected tests not run' if r.expected_tests == 'not_run' else ''})"
        for r in unmeasured[:5]
    )
    more = f" and {len(unmeasured) - 5} more" if len(unmeasured) > 5 else ""
    raise TickworkError(
        f"run {done.id}: {len(unmeasured)} of {len(done.results)} tasks say nothing of the "
        f"model: {named}{more}; see their CAUSE (`tickwork eval show {done.id}`), fix what "
        "stopped them and run the task set again"
    )


def _sandbox_note(ctx: Context, say: Any, *, unconfined: bool) -> None:
    """Say when the sandbox cannot run here: the demo's sessions then run unconfined (as
    `tickwork demo`'s), any other's commands are refused."""
    from tickwork.worker.sandbox.runner import BWRAP_INSTALL, check, sandbox_of

    sandbox = sandbox_of(ctx.settings)
    why = None if sandbox.mode == "none" else check(sandbox)
    if why is None:
        return
    if unconfined:
        text = (
            f"NO SANDBOX: {why}. The demo's shipped projects and scripted models run their "
            f"commands UNCONFINED on this machine; install bubblewrap: {BWRAP_INSTALL}."
        )
    else:
        text = (
            f"NO SANDBOX: {why}. The sessions' commands will be refused until you install "
            f"bubblewrap: {BWRAP_INSTALL}."
        )
    say(Text(text, style="bold yellow"))


def _progress(result: TaskResult) -> Text:
    from .eval.tables import OUTCOME_STYLE

    cause = f" · {result.cause}" if result.cause else ""
    return Text.assemble(
        f"  {result.task}: ",
        (result.outcome.value, OUTCOME_STYLE.get(result.outcome, "")),
        f" · {result.steps} steps · {result.tokens:,} tokens · {usd(result.cost_usd)} · "
        f"{result.wall_s:.1f}s{cause}",
    )


def _check_parquet(path: Path) -> None:
    """Refuse --parquet before anything runs if pyarrow is missing or the folder is not."""
    from .exports import Format
    from .exports import check as check_format

    check_format(Format.PARQUET, asked="--parquet")
    options.output_file(path, option="--parquet")


def _print_run(done: Run, *, json_output: bool, parquet: Path | None) -> None:
    from . import views
    from .eval.tables import RUN_COLUMNS, run_json, run_rows, run_table, write_parquet

    if parquet is not None:
        write_parquet(parquet.expanduser(), run_rows(done), RUN_COLUMNS)
    if json_output:
        views.emit(run_json(done))
        return
    render.show(Text(""), render.whole(run_table(done)))
    hints = f"Compare it with another run: `tickwork eval compare {done.id} RUN`"
    if parquet is not None:
        hints = f"Wrote {parquet}. {hints}"
    render.show(Text(f"{hints}; a session's steps: `tickwork show SESSION`.", style="dim"))


def list_runs(json_output: options.Json = False) -> None:
    """List the stored runs, oldest first."""
    from tickwork.fsm.errors import TickworkError

    from . import views
    from .eval.model import totals

    with Context() as ctx:
        runs = _runs(ctx)
        found = []
        for run_id in runs.ids():
            try:
                found.append(runs.load(run_id))
            except TickworkError as exc:  # one damaged file hides none of the others
                render.note(f"{exc.message} (not listed)")
    if json_output:
        views.emit(
            [
                {
                    "id": r.id,
                    "started_at": views.date(r.started_at),
                    "model": r.config.model,
                    "label": r.label,
                    "task_set": r.task_set,
                    "task_set_digest": r.task_set_digest,
                    "state": r.state,
                    "tasks": len(r.results),
                    "repaired": totals(r.results).repaired,
                    "cost_usd": totals(r.results).cost_usd,
                }
                for r in found
            ]
        )
        return
    if not found:
        render.show(Text("no eval runs yet; try `tickwork eval --demo`", style="dim"))
        return
    from rich import box
    from rich.table import Table

    table = Table(title="eval runs", title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("RUN", "STARTED", "MODEL", "TASK SET", "REPAIRED", "COST", "STATE"):
        table.add_column(name, no_wrap=name != "TASK SET", overflow="fold")
    for r in found:
        t = totals(r.results)
        table.add_row(
            r.id,
            r.started_at.strftime("%m-%d %H:%M"),
            r.label,
            f"{Path(r.task_set).name} {r.task_set_digest[:8]}",
            f"{t.repaired}/{t.tasks}",
            usd(t.cost_usd),
            r.state,
        )
    render.show(render.whole(table))


def show(run_key: RunKey, parquet: Parquet = None, json_output: options.Json = False) -> None:
    """Show a stored run: its table per task and its totals."""
    if parquet is not None:
        _check_parquet(parquet)
    with Context() as ctx:
        found = _runs(ctx).load(run_key)
    _print_run(found, json_output=json_output, parquet=parquet)


def compare(
    run_a: Annotated[str, typer.Argument(metavar="RUN_A", help="The run compared against.")],
    run_b: Annotated[str, typer.Argument(metavar="RUN_B", help="The run compared.")],
    parquet: Parquet = None,
    json_output: options.Json = False,
) -> None:
    """Compare two runs task by task: outcomes changed, steps, tokens and cost deltas (B - A)."""
    from . import views
    from .eval.model import compare as compared
    from .eval.tables import (
        COMPARE_COLUMNS,
        compare_json,
        compare_rows,
        compare_table,
        write_parquet,
    )

    if parquet is not None:
        _check_parquet(parquet)
    with Context() as ctx:
        runs = _runs(ctx)
        a, b = runs.load(run_a), runs.load(run_b)
    comparison = compared(a, b)
    if parquet is not None:
        write_parquet(parquet.expanduser(), compare_rows(comparison), COMPARE_COLUMNS)
    if json_output:
        views.emit(compare_json(comparison))
        return
    if not comparison.same_task_set:
        render.show(
            Text(
                f"the runs ran different task sets ({a.task_set_digest[:12]} and "
                f"{b.task_set_digest[:12]}): the totals cover the tasks both ran",
                style="yellow",
            )
        )
    render.show(render.whole(compare_table(comparison)))
    if parquet is not None:
        render.show(Text(f"Wrote {parquet}.", style="dim"))


def chart(
    run_keys: Annotated[
        list[str], typer.Argument(metavar="RUN", help="The runs to chart (ids or `last`).")
    ],
    png: Annotated[
        Path, typer.Option("--png", metavar="FILE", help="Where to write the chart (PNG).")
    ],
) -> None:
    """Chart cost against success, one point a run, as a PNG."""
    from .eval.chart import MAX_RUNS
    from .eval.chart import chart as draw

    if len(run_keys) > MAX_RUNS:
        raise InvalidInput(f"a chart shows at most {MAX_RUNS} runs, got {len(run_keys)}")
    png = options.output_file(png, option="--png")
    with Context() as ctx:
        runs = _runs(ctx)
        found = [runs.load(key) for key in run_keys]
    png.write_bytes(draw(found))
    sys.stdout.write(f"wrote {png} ({len(found)} runs)\n")
