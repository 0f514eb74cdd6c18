"""django-q2's ORM broker with fewer round trips per task (`Q_CLUSTER["broker_class"]`).

Same table, same rows, same redelivery rule (a taken task is locked for `retry` seconds); what
changes is the cost. The stock broker spends, per task: a health-check `SELECT 1` before each
of its queries (it drops the connection's state at every call, to notice a restarted database),
a SELECT then an UPDATE per task to take it, the ORM's model save to enqueue, and a DELETE in its
own transaction (with another health check) to acknowledge. On PostgreSQL this one takes tasks
with one `UPDATE ... SKIP LOCKED RETURNING` (clusters never wait on each other's rows), enqueues
and acknowledges with one plain statement, and notices a restarted database by the failing
statement itself: the connection is dropped then, and the next call reconnects.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from time import sleep
from typing import Any

from django.db import Error as DatabaseError
from django.db import connections, transaction
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.conf import Conf

from operations.infrastructure import fastsql

logger = logging.getLogger(__name__)

_TAKE = (
    "UPDATE django_q_ormq SET lock = %s WHERE id IN ("
    "SELECT id FROM django_q_ormq WHERE key = %s AND lock < %s ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED"
    ") RETURNING id, payload"
)


class Broker(ORM):
    def enqueue(self, task: str) -> Any:
        if connections[Conf.ORM].vendor != "postgresql":
            return super().enqueue(task)
        # Inside the dispatcher's claim transaction: it commits with the claims or not at all.
        return self._run(
            "INSERT INTO django_q_ormq (key, payload, lock) VALUES (%s, %s, %s) RETURNING id",
            [self.list_key or Conf.CLUSTER_NAME, task, timezone.now()],
        )[0][0]

    def dequeue(self) -> list[tuple[int, str]] | None:
        if connections[Conf.ORM].vendor != "postgresql":
            return super().dequeue()
        now = timezone.now()
        try:
            taken = self._run(_TAKE, [now + timedelta(seconds=Conf.RETRY), self.list_key, now, Conf.BULK])
        except DatabaseError as exc:
            # The database restarted or went away: drop the connection, the next call reconnects.
            logger.warning("task queue unreachable (%s); retrying", type(exc).__name__)
            connections[Conf.ORM].close()
            taken = []
        if taken:
            return [(pk, payload) for pk, payload in taken]
        # An empty queue: spare the CPU, as the stock broker does.
        sleep(Conf.POLL)
        return None

    def acknowledge(self, task_id: int) -> None:
        if connections[Conf.ORM].vendor != "postgresql":
            super().acknowledge(task_id)
            return
        for attempt in (1, 2):
            try:
                self._run("DELETE FROM django_q_ormq WHERE id = %s", [task_id])
                return
            except DatabaseError as exc:
                # Once more on a fresh connection. Should that fail too, the task is redelivered
                # after `retry`, where the poll's fence makes it a no-op; raising would kill
                # django-q2's monitor with the results it holds (it died so in a soak's
                # PostgreSQL restart, issue 30, and was reincarnated).
                connections[Conf.ORM].close()
                if attempt == 2:
                    logger.warning(
                        "task %s not acknowledged (%s); it is redelivered after %s s",
                        task_id,
                        type(exc).__name__,
                        Conf.RETRY,
                    )

    def _run(self, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        connection = connections[Conf.ORM]
        if transaction.get_autocommit(using=Conf.ORM) and connection.connection is not None:
            # Between tasks: a connection past CONN_MAX_AGE, or one that failed, is replaced, as
            # the stock broker does, but without a health-check query before every statement.
            connection.close_if_unusable_or_obsolete()
            # Typing: Django's own attribute (since 4.1), missing from the stubs.
            connection.health_check_done = True  # type: ignore[attr-defined]
        with fastsql.bound_cursor(Conf.ORM) as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description else []
