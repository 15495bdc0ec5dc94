"""The redaction helper and the backoff."""

from __future__ import annotations

import time

from sqlalchemy.engine import make_url

from dbworker import redact
from dbworker.backoff import Backoff


def test_passwords_are_masked_in_urls_and_texts() -> None:
    url = "postgresql+psycopg://app:s3cr%40t@db:5432/prod"
    assert "s3cr" not in redact.safe_url(url)
    text = f'connection to {url} failed; password=hunter2 and "s3cr@t"'
    masked = redact.redact(text, redact.url_secrets(url))
    assert "s3cr" not in masked and "hunter2" not in masked


def test_describe_is_one_line() -> None:
    line = redact.describe(RuntimeError("first\nsecond"))
    assert line == "RuntimeError: first"


def test_backoff_doubles_to_the_ceiling_and_resets() -> None:
    b = Backoff(0.25, 1.0)
    assert [b.next() for _ in range(5)] == [0.25, 0.5, 1.0, 1.0, 1.0]
    b.reset()
    assert b.next() == 0.25
    j = Backoff(1.0, 1.0, jitter=0.5)
    assert all(0.5 <= j.next() <= 1.0 for _ in range(50))


def test_redact_is_linear_and_bounded_on_texts_of_any_size() -> None:
    """Long runs of letters and digits (a hex dump, a token) once took quadratic time (1 MB:
    minutes); every shape a pattern could backtrack on now costs milliseconds, and the result
    is cut to the bound with the cut marked."""
    size = 2_000_000
    for text in ("a" * size, "a://b:c" * (size // 7), "password='" * (size // 10), "x" + "://" * (size // 3),
                 "a:" * (size // 2) + "@", "postgresql://u:" + "p" * size + "@h"):  # fmt: skip
        start = time.perf_counter()
        out = redact.redact(text, ("a-long-secret", "ab"))
        assert time.perf_counter() - start < 2.0, text[:20]
        assert len(out) <= redact.MAX_CHARS and out.endswith(redact.CUT)
    assert redact.redact("short") == "short"
    assert len(redact.describe(RuntimeError("x" * size))) <= redact.MAX_CHARS


def test_a_cut_ending_inside_a_password_or_secret_hides_what_it_kept() -> None:
    assert "hunter" not in redact.redact("to postgresql://u:hunter2hunter2" + "x" * 100, limit=40)
    assert "secr" not in redact.redact("abc secretsecret", ("secretsecret",), limit=25)


def test_an_unencoded_at_in_a_password_is_masked_whole_and_other_words_stay() -> None:
    url = "postgresql://app:P@ss@db:5432/prod"
    assert redact.safe_url(url) == "postgresql://app:***@db:5432/prod"
    assert redact.safe_url(make_url(url)) == "postgresql://app:***@db:5432/prod"
    assert redact.url_secrets(url) == ("P@ss", "P", "ss")  # whole, and the pieces a parser may echo
    assert redact.redact("could not resolve host 'ss@db'", redact.url_secrets(url)) == "could not resolve host '***@db'"
    line = redact.redact(f"OperationalError: cannot reach {url}", redact.url_secrets(url))
    assert line == "OperationalError: cannot reach postgresql://app:***@db:5432/prod"
    # A short password is masked where it stands alone, never inside other words.
    assert (
        redact.redact("OperationalError: password P refused", ("P",))
        == "OperationalError: password *** refused"
    )
    assert redact.url_secrets("postgresql+psycopg://app:s3cr%40t@db/prod") == ("s3cr@t", "s3cr%40t")
    assert (
        redact.redact("see http://host/path?u=a:b@c") == "see http://host/path?u=a:b@c"
    )  # no userinfo


def test_printable_escapes_terminal_control_sequences() -> None:
    assert (
        redact.printable("a\x1b[31mred\x9b1m\r\x07\n\tz") == "a\\x1b[31mred\\x9b1m\\x0d\\x07\n\tz"
    )
    assert redact.printable("plain é ✓") == "plain é ✓"
