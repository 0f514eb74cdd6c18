"""The task queue's broker (operations/infrastructure/queue_broker.py): one statement per step, same rules."""

from __future__ import annotations

import socket

import pytest
from django.db import connection
from django_q.brokers import get_broker
from django_q.models import OrmQ
from django_q.signing import SignedPackage
from django_q.tasks import async_task

from operations.infrastructure.queue_broker import Broker

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_a_task_is_taken_once_and_gone_once_acknowledged():
    broker = get_broker()
    assert isinstance(broker, Broker)
    async_task("operations.tasks.run_poll", "op_x", 1, broker=broker, task_name="poll-op_x-1")
    (taken,) = broker.dequeue() or []
    assert SignedPackage.loads(taken[1])["args"] == ("op_x", 1)
    assert broker.dequeue() is None  # locked for `retry` seconds: nobody takes it twice
    broker.acknowledge(taken[0])
    assert not OrmQ.objects.exists()


def test_the_broker_comes_back_after_its_connection_breaks():
    broker = get_broker()
    async_task("operations.tasks.run_poll", "op_y", 1, broker=broker, task_name="poll-op_y-1")
    connection.ensure_connection()
    # As after a database restart: the connection Django holds no longer works.
    connection.connection.close()
    assert broker.dequeue() is None  # the failed statement drops the connection
    (taken,) = broker.dequeue() or []  # and the next pickup reconnects
    broker.acknowledge(taken[0])
    assert not OrmQ.objects.exists()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_acknowledgement_the_database_refuses_leaves_the_task_for_redelivery(caplog):
    """During a PostgreSQL restart the acknowledgement fails on both tries: the monitor that calls
    it goes on (issue 30's soak saw it die of the error), and the task is redelivered after retry."""
    broker = get_broker()
    async_task("operations.tasks.run_poll", "op_z", 1, broker=broker, task_name="poll-op_z-1")
    (taken,) = broker.dequeue() or []
    port = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = str(free_port())  # nothing listens: every connection fails
    try:
        broker.acknowledge(taken[0])
    finally:
        connection.close()
        connection.settings_dict["PORT"] = port
    assert f"task {taken[0]} not acknowledged (OperationalError)" in caplog.text
    assert OrmQ.objects.filter(pk=taken[0]).exists()
