"""Where `dlq retry` (requeue.sql: the CLI, POST /v1/messages/<id>/retry and the ops page alike) puts a message: at
the back of its priority's queue, a batch in id order; in its recipient's line, at its original place, never
overtaking a later send of that line in flight."""

from __future__ import annotations

from tests.db import test_recipient_order
from tests.db.test_recipient_order import claim, record, state, text
from wa_outbox import outbox
from wa_outbox.enqueue import enqueue
from wa_outbox.worker._reconciler import release_stalled_lines

auto = test_recipient_order.auto  # the fixture: an autocommit engine

A, B, C = "+5511987650001", "+5511987650002", "+5511987650003"


def dead(db, *ids: int) -> None:
    db.execute("UPDATE wa_outbox.notifications SET status = 'dead', attempts = 3, last_error = '{\"code\": 131000}' "
               "WHERE id = ANY(%s)", (list(ids),))


def test_a_retried_message_goes_to_the_back_of_its_priority_queue(auto, db, sender):
    old = enqueue(db, to=A, message=text("old"))
    dead(db, old)
    waiting = [enqueue(db, to=B, message=text("b")), enqueue(db, to=C, message=text("c"))]
    assert outbox.requeue(auto, ids=[old], actor="cli") == [old]
    assert [claim(auto, limit=1) for _ in range(3)] == [[waiting[0]], [waiting[1]], [old]]


def test_a_batch_retried_at_once_keeps_its_order(auto, db, sender, run):
    ids = [enqueue(db, to=f"+55119000000{i:02d}", message=text(str(i))) for i in range(6)]
    dead(db, *reversed(ids))
    assert run("dlq", "retry", "--all").output.strip() == "requeued 6"
    due = db.execute("SELECT id, next_attempt_at FROM wa_outbox.notifications ORDER BY next_attempt_at").fetchall()
    assert [row[0] for row in due] == ids
    assert len({row[1] for row in due}) == len(ids)  # no ties for the claim to break at random
    assert [claim(auto, limit=1) for _ in ids] == [[i] for i in ids]


def test_a_retried_message_takes_back_its_place_in_its_recipients_line(auto, db, sender):
    old = enqueue(db, to=A, message=text("1"))
    dead(db, old)
    later = enqueue(db, to=A, message=text("2"))
    outbox.requeue(auto, ids=[old], actor="cli")
    assert claim(auto, pair_burst=10) == [old]
    assert state(db, later) == ("queued", True)  # parked behind it
    record(auto, old)
    assert claim(auto, pair_burst=10) == [later]


def test_a_retried_message_waits_for_a_later_send_of_its_line_in_flight(auto, db, sender):
    old = enqueue(db, to=A, message=text("1"))
    dead(db, old)
    going = enqueue(db, to=A, message=text("2"))
    assert claim(auto, pair_burst=10) == [going]
    outbox.requeue(auto, ids=[old], actor="cli")
    assert state(db, old) == ("queued", True)
    assert claim(auto, pair_burst=10) == []  # never two sends in flight to one recipient
    assert release_stalled_lines(auto) == []  # nor does the sweep let it go while that send is out
    record(auto, going)  # the statement finishing it releases the retried one
    assert state(db, old) == ("queued", False)
    assert claim(auto, pair_burst=10) == [old]
