"""The example refund graph from the command line, on both deployments: submitted, its
interrupt approved with `tickwork approve`, shown node by node, forked with a state patch."""

from __future__ import annotations

import json

from tickwork.fsm.values import Status

from tests.e2e.conftest import Cli, Deployment

KIND = "tests.graphs:REFUND"
NOTE = [{"content": "Dear customer, your refund is on its way."}]


def test_the_refund_graph_is_approved_and_shown_from_the_cli(
    deployment: Deployment, cli: Cli
) -> None:
    state = {"order_id": "C-7", "amount": 12.0, "ledger": str(deployment.tmp / "ledger.jsonl")}
    with deployment.worker():
        submitted = cli.inline(
            "submit",
            KIND,
            "--input",
            json.dumps(state),
            "--model",
            deployment.script(NOTE),
            "--json",
        ).json()
        session_id = submitted["id"]
        head = deployment.client.wait(session_id, timeout=60)
        assert head.status is Status.WAITING_APPROVAL and head.awaiting == ("s3c0",)
        shown = cli.inline("show", session_id).stdout
        assert "graph" in shown and "refund version 1" in shown
        assert "NODE" in shown and "draft" in shown and "check" in shown
        assert "tickwork approve|edit|reject" in shown
        cli("approve", session_id, "s3c0", "--as", "alice", "--comment", "fine")
        head = deployment.client.wait(session_id, timeout=60)
        assert head.status is Status.COMPLETED, head
        shown = cli.inline("show", session_id).stdout
        assert "final state:" in shown and "refunded $12.00 for order C-7" in shown
        # a step's time is its node's run (a graph step has no model reply to time)
        assert " ms node run" in shown
        forked = cli.inline(
            "fork", session_id, "--from-step", "1", "--state", '{"amount": 700}', "--json"
        ).json()
        done = deployment.client.wait(forked["id"], timeout=60)
    assert done.status is Status.COMPLETED, done
    assert "over the $500 limit" in done.result["state"]["report"]
    refused = cli.inline("fork", session_id, "--from-step", "1", "--state", '{"x": 1}', ok=False)
    refused.error(2, "gives x, which the state Refund does not have")
    # what only an agent session reads is refused, not recorded and ignored (or, a node
    # run's hand-written output, left to break the state)
    for patch, named in (
        (("--tool-output", "s1c0=x"), "--tool-output"),
        (("--system-prompt", "hi"), "--system-prompt"),
        (("--append-instruction", "be brief"), "--append-instruction"),
    ):
        agent = cli.inline("fork", session_id, "--from-step", "2", *patch, ok=False)
        agent.error(2, "is a graph session: a fork patches its state (--state", named)
