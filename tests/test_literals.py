"""The literal gates of the per-line path: Hyperscan on long texts, `re` on short ones and where
there is no Hyperscan; both must give the same answer, and the observer's fact gate must never
close on a line its chain of tests would open on."""

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from vcrash import literals
from vcrash.classify import signals
from vcrash.literals import LiteralGate

ROOT = Path(__file__).resolve().parents[1]
TOKENS = ("took", "SIG", "Finished request", "%", "prompt tokens", "version")
PIECES = st.sampled_from([*TOKENS, "too", "SI", "Finished", "request", "ü", "\udcff", "日本", " ", "x" * 50,
                          "prompt", "tokens", "\x1b[0m", "\n"])


def _by_re(text: str) -> bool:
    return any(t in text for t in TOKENS)


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=40))
def test_gate_answers_like_a_substring_test_on_short_and_long_texts(pieces):
    gate = LiteralGate(TOKENS)
    text = "".join(pieces)
    assert gate(text) == _by_re(text)
    padded = "y" * literals.SCAN_MIN + text  # loads Hyperscan, where it is installed
    assert gate(padded) == _by_re(padded)
    assert gate(text) == _by_re(text)  # short texts too, once it is loaded


def test_many_medium_texts_load_hyperscan_and_answer_alike():
    """A log of lines too short to load Hyperscan alone loads it after WARM_CALLS of them."""
    gate = LiteralGate(TOKENS)
    lines = [("a" * 45) + (" took 3 s" if i % 7 == 0 else "") for i in range(literals.WARM_CALLS + 50)]
    assert [gate(line) for line in lines] == [_by_re(line) for line in lines]
    try:
        import hyperscan  # noqa: F401
    except ImportError:
        return
    assert gate._local.scan is not None  # loaded


def test_gate_without_hyperscan(monkeypatch):
    monkeypatch.setenv("VCRASH_SCANNER", "find")
    gate = LiteralGate(TOKENS)
    long_line = "z" * 1000 + " prompt tokens: 12"
    assert gate(long_line) and not gate("z" * 1000)


def _fact_chain(text: str) -> bool:
    """observe()'s gates one by one, as they open on a line."""
    return bool("version" in text or "LLM engine (v" in text or signals.STARTUP_MARKERS.search(text)
                or signals._lifecycle_gate(text) or signals._port_gate(text)
                or "shutdown" in text or "SIG" in text or "signal" in text or "KeyboardInterrupt" in text
                or "took" in text or "takes" in text or "finished in" in text
                or signals._prompt_size_gate(text) or "throughput:" in text or "block found in" in text
                or signals._progress_gate(text) or ("%" in text and "<" in text))


def test_fact_gate_opens_wherever_the_chain_does():
    lines = [line.rstrip("\n") for path in sorted((ROOT / "samples").rglob("*.log"))
             for line in path.read_text(errors="replace").splitlines()]
    # Long lines too, with the literal far from the start.
    lines += ["x" * 300 + line for line in lines[:2000]]
    assert lines
    for line in lines:
        if _fact_chain(line):
            assert signals._may_hold_a_fact(line), line
