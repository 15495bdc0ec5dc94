"""Unit tests of dbworker.messages: the pipe protocol and outcome names, shared by both sides."""

from __future__ import annotations

import pickle

from dbworker import messages, observe


def test_messages_are_plain_tuples_that_cross_a_pipe() -> None:
    assert messages.run(7, "t") == ("run", 7, "t", None)
    header = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert pickle.loads(pickle.dumps(messages.run(7, "t", header))) == ("run", 7, "t", header)
    assert messages.cancel("t") == ("cancel", "t")
    report = messages.Report(7, "t", messages.FINISHED, 0.5)
    assert pickle.loads(pickle.dumps((messages.DONE, report))) == ("done", report)


def test_outcome_names_are_the_metric_label_values() -> None:
    assert observe.OUTCOMES == (
        "finished", "unfinished", "failed", "crashed", "lost", "aborted", "retried", "timed_out", "deleted"
    )
    # What a handler reports maps onto what observers see, except "retry" (given back: lost).
    assert set(messages.REPORTED) - set(messages.OUTCOMES) == {messages.RETRY}
