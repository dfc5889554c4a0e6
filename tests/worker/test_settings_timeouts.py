"""Every tick ends before the broker gives its message to another worker (issue 12)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from tickwork.worker.config.settings import DELIVERY_MARGIN_S, Settings
from tickwork.worker.jobs.repair.toolkit import MAX_COMMAND_S, run_command, run_tests


def test_the_tools_longest_calls_fit_rabbitmqs_default_delivery_timeout() -> None:
    rabbitmq_default_s = 1800.0
    settings = Settings()

    assert settings.delivery_timeout_s == rabbitmq_default_s
    assert rabbitmq_default_s - DELIVERY_MARGIN_S >= MAX_COMMAND_S
    assert run_command.timeout_s <= settings.longest_call_s
    assert run_tests.timeout_s <= settings.longest_call_s


def test_a_model_timeout_past_the_delivery_timeout_is_refused() -> None:
    with pytest.raises(ValidationError, match="model_timeout_s"):
        Settings(model_timeout_s=1600)
    assert Settings(delivery_timeout_s=3600, model_timeout_s=1600).longest_call_s == 3300


def test_a_redis_visibility_timeout_below_the_delivery_timeout_is_refused() -> None:
    redis = "redis://127.0.0.1:6379/0"
    with pytest.raises(ValidationError, match="visibility_timeout_s"):
        Settings(broker_url=redis, redis_ack_emulation=True, visibility_timeout_s=600)
    assert Settings(broker_url="amqp://127.0.0.1//", visibility_timeout_s=600)
    # without ack emulation (the default) Redis redelivers nothing: the timeout is unused
    assert Settings(broker_url=redis, visibility_timeout_s=600).broker() == (
        redis,
        {"ack_emulation": False},
    )
    emulated = Settings(broker_url=redis, redis_ack_emulation=True)
    assert emulated.broker() == (redis, {"visibility_timeout": 7200.0})
