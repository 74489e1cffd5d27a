"""PII redaction: what is redacted, what is left alone, and the counts."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from evalfleet.core.sample import parse_sample
from producers.redact import RedactionRules, Redactor, luhn_valid, redact_sample
from tests.producers.builders import sample

DEFAULT = Redactor(RedactionRules())


def redact(text: str, redactor: Redactor = DEFAULT) -> tuple[str, dict[str, int]]:
    counts: Counter[str] = Counter()
    return redactor.redact_text(text, counts), dict(counts)


@pytest.mark.parametrize(("text", "expected", "counts"), [
    ("write to jane.doe+x@example.co.uk today", "write to [EMAIL] today", {"email": 1}),
    ("a@b.io and c.d@e-f.org", "[EMAIL] and [EMAIL]", {"email": 2}),
    ("call +1 415 555 2671", "call [PHONE]", {"phone": 1}),
    ("call (415) 555-2671 or 415.555.2671", "call [PHONE] or [PHONE]", {"phone": 2}),
    ("ring 020 7946 0958 / 06 12 34 56 78", "ring [PHONE] / [PHONE]", {"phone": 2}),
    ("+44 (0)20 7946 0958", "[PHONE]", {"phone": 1}),
    ("card 4111 1111 1111 1111 ok", "card [CARD] ok", {"card": 1}),
    ("card 4111-1111-1111-1111.", "card [CARD].", {"card": 1}),
    ("amex 378282246310005", "amex [CARD]", {"card": 1}),
])
def test_redacted(text: str, expected: str, counts: dict[str, int]) -> None:
    assert redact(text) == (expected, counts)


@pytest.mark.parametrize("text", [
    "You have 14 days to return order #1001.",
    "on 2026-11-21 at 10:00:00Z costs $1,200.50",
    "req-0001 v12 KO-558102 INV-2026-0412 Node 18+",
    "4111 1111 1111 1112",           # fails the Luhn check
    "1234567890123456",              # so does this id
    "12 34 56 78 90",                # plain numbers, no phone shape
    "version 3.14159265",
    "user@localhost",                # no dot in the domain
    # a trace id whose digit run 28131432612530 passes the Luhn check
    "d0be9b28131432612530a9bd99e31289",
    "order_4111111111111111",        # digits glued to a word are an id, not a card
])
def test_left_alone(text: str) -> None:
    assert redact(text) == (text, {})


@pytest.mark.parametrize(("digits", "valid"), [
    ("4111111111111111", True), ("5555555555554444", True), ("378282246310005", True),
    ("4111111111111112", False), ("79927398713", True), ("79927398710", False),
])
def test_luhn(digits: str, valid: bool) -> None:
    assert luhn_valid(digits) is valid


def test_extra_patterns_and_kinds_chosen() -> None:
    redactor = Redactor(RedactionRules(kinds=("email",), patterns={"employee_id": r"EMP-\d{6}"}))
    assert redact("EMP-123456 at a@b.io, +1 415 555 2671", redactor) == (
        "[EMPLOYEE_ID] at [EMAIL], +1 415 555 2671", {"employee_id": 1, "email": 1})


def test_bad_rules_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown redaction kinds"):
        Redactor(RedactionRules(kinds=("ssn",)))
    with pytest.raises(ValueError, match="does not compile"):
        Redactor(RedactionRules(patterns={"x": "("}))


def test_sample_fields_redacted_id_and_attributes_kept() -> None:
    original = sample(
        1, id="a@b.io", input="mail a@b.io", output="call +1 415 555 2671",
        context=["card 4111 1111 1111 1111", "clean"], reference="c@d.io",
        attributes={"app": "x@y.io"},
        fields={"note": "e@f.io", "nested": {"list": ["g@h.io", 3]}, "n": 4},
    )
    redacted, counts = redact_sample(original, redactor=DEFAULT)
    assert redacted.input == "mail [EMAIL]" and redacted.output == "call [PHONE]"
    assert redacted.context == ["card [CARD]", "clean"] and redacted.reference == "[EMAIL]"
    assert redacted.fields == {"note": "[EMAIL]", "nested": {"list": ["[EMAIL]", 3]}, "n": 4}
    assert redacted.id == "a@b.io" and redacted.attributes == {"app": "x@y.io"}
    assert counts == {"email": 4, "phone": 1, "card": 1}
    assert original.input == "mail a@b.io"  # the original is untouched


def test_every_text_of_a_sessions_turns_is_redacted_and_its_ids_kept() -> None:
    original = parse_sample({"id": "conv-1#2-abc", "session": {"id": "conv-1", "turns": [
        {"trace_id": "t1", "input": "I am a@b.io", "output": "ok",
         "context": ["card 4111 1111 1111 1111"]},
        {"trace_id": "t2", "input": "call me", "output": "done",
         "trajectory": {"steps": [{"type": "tool", "name": "mail",
                                   "arguments": {"to": "c@d.io"}, "result": "sent"}]}}]}})
    redacted, counts = redact_sample(original, redactor=DEFAULT)
    assert redacted.session is not None
    first, second = redacted.session.turns
    assert (first.input, first.context) == ("I am [EMAIL]", ["card [CARD]"])
    assert second.trajectory is not None
    assert second.trajectory.model_dump()["steps"][0]["arguments"] == {"to": "[EMAIL]"}
    assert (redacted.session.id, first.trace_id) == ("conv-1", "t1")
    assert counts == {"email": 2, "card": 1}


def test_id_and_attributes_when_configured() -> None:
    redactor = Redactor(RedactionRules(attributes=True, id=True))
    redacted, counts = redact_sample(sample(1, id="a@b.io", attributes={"user": "x@y.io"}),
                                     redactor=redactor)
    assert redacted.id == "[EMAIL]" and redacted.attributes == {"user": "[EMAIL]"}
    assert counts == {"email": 2}


def test_nothing_to_redact_returns_the_same_sample() -> None:
    original = sample(2)
    assert redact_sample(original, redactor=DEFAULT) == (original, {})


# Hostile shapes at 200 KB. The linear patterns take 10 to 100 ms here on a busy
# 2-core machine; the ceiling is 50 times that and more, while the quadratic patterns
# they replaced took 13 s on 100 KB of digits (python -m bench.hostile_inputs).
HOSTILE_CEILING_S = 5.0


@pytest.mark.parametrize("text", [
    "Ab0+" * 50_000, "1" * 200_000, "a." * 100_000, "a@b" * 66_000, "1 " * 100_000,
    "x" * 199_000 + "@example.com", "+1" * 100_000, "(415) " * 33_000,
], ids=["word run", "digit run", "dotted", "many @", "spaced digits", "long local part",
        "plus ones", "area codes"])
def test_hostile_text_is_redacted_in_linear_time(text: str) -> None:
    started = time.perf_counter()
    redact(text)
    assert time.perf_counter() - started < HOSTILE_CEILING_S


def test_an_address_with_an_overlong_local_part_is_not_an_address() -> None:
    assert redact("x" * 65 + "@example.com") == ("x" * 65 + "@example.com", {})
    assert redact("x" * 64 + "@example.com") == ("[EMAIL]", {"email": 1})


def test_text_past_the_limit_is_truncated_never_passed_on() -> None:
    redactor = Redactor(RedactionRules(max_chars=20))
    assert redact("mail a@b.io " + "z" * 30, redactor) == (
        "mail [EMAIL] zzzzzzzz[TRUNCATED]", {"email": 1, "truncated": 1})


def test_custom_patterns_run_with_re2() -> None:
    # Exponential under backtracking; linear with RE2.
    redactor = Redactor(RedactionRules(kinds=(), patterns={"run": r"(a+)+b"}))
    started = time.perf_counter()
    assert redact("a" * 100_000 + "c", redactor) == ("a" * 100_000 + "c", {})
    assert time.perf_counter() - started < HOSTILE_CEILING_S
    with pytest.raises(ValueError, match="no lookaround"):
        Redactor(RedactionRules(patterns={"x": r"(?<=a)b"}))


@pytest.mark.parametrize(("text", "expected", "counts"), [
    ("card " + " ".join(["\uff14\uff11\uff11\uff11"] + 3 * ["\uff11" * 4]) + " ok",  # full width
     "card [CARD] ok", {"card": 1}),
    ("call +\u0669\u0667\u0661 \u0665\u0660 \u0661\u0662\u0663 \u0664\u0665\u0666\u0667 now",
     "call [PHONE] now", {"phone": 1}),
    ("mail x@y.io then 4111 1111 1111 1111 and 415-555-0100",
     "mail [EMAIL] then [CARD] and [PHONE]", {"card": 1, "email": 1, "phone": 1}),
    ("no digits and no at sign", "no digits and no at sign", {}),
    ("[CARD] [EMAIL] [PHONE] already", "[CARD] [EMAIL] [PHONE] already", {}),
])
def test_patterns_skipped_only_on_text_that_cannot_match(
        text: str, expected: str, counts: dict[str, int]) -> None:
    # A card or phone pattern runs only on text with enough digits (of any script, full
    # width and Arabic-Indic above, as the patterns' own \d), the address pattern only on
    # text with an @.
    assert redact(text) == (expected, counts)


@pytest.mark.parametrize(("text", "expected", "counts"), [
    ("ring 555 0100 or 415 555 0100", "ring 555 0100 or [PHONE]", {"phone": 1}),
    ("12 digits 4111 1111 1111 then +1 415 555 2671",
     "12 digits 4111 1111 1111 then [PHONE]", {"phone": 1}),
    ("6 digits: +1 234 56", "6 digits: +1 234 56", {}),
])
def test_few_digits_leave_cards_and_phones_out(
        text: str, expected: str, counts: dict[str, int]) -> None:
    assert redact(text) == (expected, counts)
