"""Slow or hung: was the process a timeout gave up on still working, and what deadline would
have fitted the work the log measured?

The latest evidence before the timeout decides the verdict: progress as the last word means
the process was working when it was declared dead (slow); stall signals after the last progress,
or silence for the whole window, mean it had stopped (hung). Progress the same process logged
after the deadline is the strongest proof of "slow". The deadline to set is derived from what
the log measured (start-up phases, a progress bar's remaining time, the largest prompt at the
best throughput of the window before the timeout), with a stated margin; when the log lacks what
is needed, it says what to collect next time.
"""

from __future__ import annotations

import math
import re

from vcrash.classify.signals import BAR, Signal, bar_seconds

MARGIN = 1.5  # the recommended deadline is the measured need plus half of it
WINDOW_MARGIN_S = 120  # the window before a timeout: the rule's deadline and this much more


def window_seconds(rule) -> float:
    """How far before a timeout its evidence is read, and after it what followed (the bulk
    scan re-reads those windows for the metrics lines it skips)."""
    return (rule.default_timeout_s or 300) + WINDOW_MARGIN_S


def _before_window(diag, observer, signals: list[Signal], when) -> list[Signal]:
    """The signals up to the timeout line; of the metrics lines' (one every few seconds), only
    those of the window before it: what the bulk scan reads back, since it skips them."""
    t_line = observer.seconds(diag.time, diag.line)
    start = None if t_line is None else t_line - window_seconds(diag.rule)
    return [s for s in signals if s.line <= diag.line and (
        "throughput:" not in s.text or start is not None and (t := when(s)) is not None and t >= start)]


def _after_window(diag, observer, after: list[Signal], when) -> list[Signal]:
    """The signals after the timeout line in its server run, up to a window after its time
    (none past it: the bulk scan reads that far back)."""
    t_line = observer.seconds(diag.time, diag.line)
    end = None if t_line is None else t_line + window_seconds(diag.rule)
    return [s for s in after if s.line > diag.line and observer.epoch_at(s.line) == diag.epoch
            and (end is None or (when(s) is not None and when(s) <= end))]
_TIMEOUT_IN_MESSAGE = [
    (re.compile(r"Waited (\d+(?:\.\d+)?)\s*s"), 1.0),
    (re.compile(r"within (\d+) ?ms"), 0.001),
    (re.compile(r"Timeout\(ms\)=(\d+)"), 0.001),
    (re.compile(r"after (\d+(?:\.\d+)?) seconds"), 1.0),
    (re.compile(r"within (\d+)s\b"), 1.0),
    (re.compile(r"for too long: (\d+(?:\.\d+)?) seconds"), 1.0),  # Modal's start-up limit
    (re.compile(r"after (\d+(?:\.\d+)?)s, marking it unhealthy"), 1.0),  # Ray Serve's health check
]
_FINISHED = re.compile(r"Loading weights took|Model loading took|init engine .*took|Graph capturing finished|"
                       r"torch\.compile takes|Application startup complete|100%")


def timeout_seconds_stated(text: str) -> float | None:
    for pattern, scale in _TIMEOUT_IN_MESSAGE:
        m = pattern.search(text)
        if m:
            return float(m.group(1)) * scale
    return None


def assess_liveness(diag, signals: list[Signal], observer, after: list[Signal] = ()) -> dict:
    """`signals`: the signals up to the timeout; `after`: the ones the log went on to show;
    `observer`: the input's LineObserver (timestamps with the year, measured durations)."""
    text = diag.exception.message if diag.exception else (diag.event.text if diag.event else "")
    stated = timeout_seconds_stated(text)
    limit = stated or diag.rule.default_timeout_s
    when = _Clock(observer)
    before = _before_window(diag, observer, signals, when)
    t_fire = observer.seconds(diag.time, diag.line)
    bar_times = [when(s) for s in before if s.dated == "bar" and when(s) is not None]
    if bar_times and (t_fire is None or max(bar_times) > t_fire):
        t_fire = max(bar_times)  # the timeout line comes after bar frames the log dated by themselves
    first = observer.epoch_start.get(diag.epoch)
    t0 = observer.seconds(first[0], first[1]) if first else None
    if stated and diag.rule.deadline_covers == "startup" and t0 is not None:
        # A raw traceback carries no time of its own: the wait began with the start-up.
        t_fire = max(t_fire or t0, t0 + stated)
    progress = [s for s in before if s.kind == "progress"]
    stalled = _stalled_stream(diag, signals)
    result: dict = {"verdict": "unknown", "stalled": stalled, "last_progress": None, "evidence": [],
                    "timeout_s": limit, "timeout_source": "message" if stated else "default",
                    "timeout_env": diag.rule.timeout_env}
    last = progress[-1] if progress else None
    if progress and t_fire is not None:
        last = next((s for s in reversed(progress) if when(s) is not None), last)
    gap = (t_fire - when(last)) if (t_fire is not None and last is not None and when(last) is not None) else None
    if last is not None:
        result["last_progress"] = {"line": last.line, "text": last.text, "seconds_before_timeout": gap,
                                   "dated": last.dated}
    stalls_after = [s for s in before if s.kind == "stall" and (last is None or s.line > last.line)]
    if last is None:
        if stalls_after:
            result["verdict"] = "hung"
            result["reason"] = f"{len(stalls_after)} stall signal(s) and no progress signal before the timeout"
        else:
            result["reason"] = "no progress or stall signals in the log"
        result["evidence"] = _evidence(stalls_after[-3:])
    elif stalls_after:
        result["verdict"] = "hung"
        result["reason"] = (f"stalled after the last progress (line {last.line}"
                            + (f", {gap:.0f}s before the timeout" if gap is not None else "")
                            + f"): {len(stalls_after)} stall signal(s) and no progress since")
        result["evidence"] = _evidence([last] + stalls_after[-3:])
    elif gap is not None and limit is not None and gap >= limit:
        result["verdict"] = "hung"
        result["reason"] = f"silent for {gap:.0f}s before the timeout, longer than the {limit:.0f}s window"
        result["evidence"] = _evidence([last])
    elif gap is not None and (pace := _pace(progress, last, when)) is not None and gap > max(MIN_SILENCE_S, 20 * pace):
        result["verdict"] = "hung"
        result["reason"] = (f"silent for {gap:.0f}s before the timeout, while its progress had come every "
                            f"{pace:.0f}s until line {last.line}")
        result["evidence"] = _evidence(progress[-3:])
    else:
        result["verdict"] = "slow"
        result["reason"] = ("progress kept coming until "
                            + (f"{gap:.0f}s before the timeout" if gap is not None else "the timeout")
                            + ": the process was working when it was declared dead")
        result["evidence"] = _evidence(progress[-3:])
    after = _after_window(diag, observer, after, when)
    later = _progress_after(diag, after, observer, stalled)
    if later is not None:
        late_gap = (when(later) - t_fire) if (when(later) is not None and t_fire is not None) else None
        what = "finished" if _FINISHED.search(later.text) else "made progress"
        at = f"{late_gap:.0f}s after the deadline" if late_gap is not None else "after the deadline"
        result["progress_after_deadline"] = {"line": later.line, "text": later.text, "seconds_after": late_gap}
        result["evidence"] = result["evidence"] + _evidence([later])
        if result["verdict"] != "slow":
            result["verdict"] = "slow"
            result["reason"] = f"the same process {what} {at} (line {later.line}): it was alive"
        else:
            result["reason"] += f"; it {what} {at} (line {later.line})"
    _size_deadline(diag, result, observer, before, after, t_fire, when)
    result["advice"] = _advice(diag, result)
    return result


_FILE_OF = re.compile(r"(?P<n>\d+)-of-(?P<of>\d+)")
MIN_SILENCE_S = 120  # shorter silences are ordinary pauses between phases


def _pace(progress: list[Signal], last: Signal, when) -> float | None:
    """The usual interval between the stalled process' progress lines (the median), when the log
    shows at least three."""
    times = [when(s) for s in progress if s.stream_id == last.stream_id and when(s) is not None]
    gaps = sorted(b - a for a, b in zip(times, times[1:]) if b >= a)
    if len(gaps) < 2:
        return None
    return gaps[len(gaps) // 2]


def _progress_after(diag, after: list[Signal], observer, stalled: str) -> Signal | None:
    """The last progress of the stalled process after the timeout, in the same server run."""
    found = None
    for s in after:
        if s.line <= diag.line or s.kind != "progress" or observer.epoch_at(s.line) != diag.epoch:
            continue
        if s.stream_id == stalled or s.role == diag.rule.stalled_role:
            found = s
    return found


# -- the deadline to set ---------------------------------------------------------------------
def _size_deadline(diag, result: dict, observer, before: list[Signal], after: list[Signal],
                   t_fire: float | None, when) -> None:
    """`recommended_deadline_s` and its `basis`: the largest need the log measured, plus MARGIN;
    `missing`: what the log lacked and how to get it next time."""
    limit = result.get("timeout_s")
    result["recommended_deadline_s"] = None
    result["basis"] = None
    result["missing"] = _missing(diag, observer, before, best_prompt_throughput(diag, observer, before, when))
    if result["verdict"] == "hung":
        result["basis"] = "the process had stopped: a longer deadline would not have helped"
        return
    if diag.rule.deadline_covers == "startup":
        needs = _startup_needs(diag, observer, before, after, t_fire, when)
    else:
        needs = _step_needs(diag, observer, before, when)
    if result["verdict"] == "slow" and limit:
        needs.append((limit, f"it was still working when the {limit:.0f}s deadline fired"
                             + (" (stated in the message)" if result.get("timeout_source") == "message" else
                                " (its default; the log does not state it)")))
    if needs:
        needs.sort(key=lambda n: -n[0])
        need, why = needs[0]
        value = need * MARGIN
        result["basis"] = f"{why}, plus {round((MARGIN - 1) * 100)}%"
        if len(needs) > 1:
            result["basis"] += " (also measured: " + "; ".join(w for _, w in needs[1:]) + ")"
    elif limit:
        value = 2 * limit
        result["basis"] = "nothing in the log measured the work: twice the current deadline"
    else:
        return
    result["recommended_deadline_s"] = int(math.ceil(value / 60.0) * 60)


def _startup_needs(diag, observer, before, after, t_fire, when) -> list[tuple[float, str]]:
    needs: list[tuple[float, str]] = []
    epoch = diag.epoch
    # The slowest of each phase in this run (every rank logs its own).
    longest = {what: slowest for (run, what), slowest in observer.durations.items() if run == epoch}
    if longest:
        # "init engine … took" already covers profiling, compile and graph capture.
        parts = ["weight loading", "engine init"] if "engine init" in longest else list(longest)
        parts = [p for p in parts if p in longest]
        total = sum(longest[p][0] for p in parts)
        needs.append((total, "start-up phases the log measured: "
                      + " + ".join(f"{p} {longest[p][0]:.0f}s (line {longest[p][1]})" for p in parts)))
    first = observer.epoch_start.get(epoch)
    t0 = observer.seconds(first[0], first[1]) if first else None
    late = [s for s in list(before) + list(after)
            if s.kind == "progress" and when(s) is not None and observer.epoch_at(s.line) == epoch]
    if t0 is not None and late:
        last = max(late, key=when)
        needs.append((when(last) - t0, f"start-up ran {when(last) - t0:.0f}s from its first line to its last "
                                       f"progress (line {last.line})"))
    bars = [s for s in before if s.kind == "progress" and "%" in s.text and BAR.search(s.text)]
    if bars and t0 is not None and t_fire is not None:
        m = BAR.search(bars[-1].text)
        if m.group("rem") != "?":
            remaining = bar_seconds(m.group("rem"))
            why = (f"at the deadline ({t_fire - t0:.0f}s into start-up) the bar on line {bars[-1].line} "
                   f"still showed {remaining:.0f}s to go")
            files = _FILE_OF.search(m.group("label"))
            if files and int(files.group("n")) < int(files.group("of")):
                # One file of a multi-file download: the files after it take as long again each.
                per_file = bar_seconds(m.group("el")) + remaining
                later = int(files.group("of")) - int(files.group("n"))
                remaining += later * per_file
                why += (f" for file {int(files.group('n'))} of {int(files.group('of'))}, and ~{per_file:.0f}s for "
                        f"each of the {later} after it (pre-downloading the weights avoids this wait)")
            needs.append((t_fire - t0 + remaining, why))
    return needs


def _step_needs(diag, observer, before: list[Signal], when) -> list[tuple[float, str]]:
    sizes = [(n, line) for n, line in observer.prompt_sizes
             if line <= diag.line and observer.epoch_at(line) == diag.epoch]
    best = best_prompt_throughput(diag, observer, before, when)
    if not sizes or best is None:
        return []
    tokens, line = max(sizes)
    rate, rate_line = best
    seconds = tokens / rate
    return [(seconds, f"the largest prompt in flight ({tokens} tokens, line {line}) at the best prompt "
                      f"throughput of the {window_seconds(diag.rule):.0f}s before the timeout ({rate:.0f} tokens/s, "
                      f"line {rate_line}) takes about {seconds:.0f}s")]


def best_prompt_throughput(diag, observer, before: list[Signal], when) -> tuple[float, int] | None:
    """The highest prompt throughput (tokens/s, line) of the metrics lines in the window before
    the timeout line, in its server run: the capacity the engine had just before. The window is
    the one the bulk scan reads back (it skips metrics lines), from the line's own time."""
    best = None
    t_fire = observer.seconds(diag.time, diag.line)
    if t_fire is None:
        return None  # an undated timeout has no window
    start = t_fire - window_seconds(diag.rule)
    for s in before:
        rate = s.prompt_rate  # METRICS.search(s.text)'s "pt", parsed when the signal was made
        if rate is None or rate <= 0 or best is not None and rate <= best[0] or s.kind != "progress":
            continue  # not a metrics line's, or no better than the best so far
        if observer.epoch_at(s.line) != diag.epoch or (t := when(s)) is None or not start <= t <= t_fire:
            continue
        best = (rate, s.line)
    return best


def _missing(diag, observer, before: list[Signal], throughput) -> list[str]:
    missing = []
    if not observer.timestamped:
        missing.append("no timestamps: keep vLLM's log header, or add the runtime's "
                       "(`docker logs -t`, `kubectl logs --timestamps`)")
    if not any(s.kind == "progress" for s in before):
        missing.append("no progress lines: keep vLLM's INFO logs (`VLLM_LOGGING_LEVEL=INFO`), its progress bars "
                       "on stderr, and the periodic stats (no `--disable-log-stats`)")
    if diag.rule.deadline_covers != "startup":
        if not observer.prompt_sizes:
            missing.append("no request sizes: start the server with `--enable-log-requests` (or keep the "
                           "scheduler dump that vLLM writes when a step fails)")
        if throughput is None:
            missing.append(f"no prompt throughput in the {window_seconds(diag.rule):.0f}s before the timeout: keep the "
                           "periodic stats line (no `--disable-log-stats`)")
    return missing


def _advice(diag, live: dict) -> str:
    """What to do, following the verdict: the deadline to set when the process was slow, the
    stuck process to inspect when it was hung."""
    env = diag.rule.timeout_env
    if live["verdict"] == "hung":
        stream = live.get("stalled") or diag.stream_id
        pid = stream.rsplit(":", 1)[-1].split("@")[0]
        target = f"py-spy dump --pid {pid}" if pid.isdigit() else "py-spy dump on each VLLM::Worker / EngineCore process"
        return (f"the process had stopped making progress: a longer deadline will not help; find the stuck "
                f"process while it hangs ({target}), and check NCCL (NCCL_DEBUG=INFO) and /dev/shm")
    value = live.get("recommended_deadline_s")
    if value is None:
        return "not enough timestamps or signals to tell; " + "; ".join(live.get("missing") or ["collect the full log"])
    prefix = "the process was still working: " if live["verdict"] == "slow" else "if the process was only slow: "
    if env is None:
        return f"{prefix}raise the deadline of the component that printed the timeout to {value}s ({live['basis']})"
    setting = f"{env}={value * 1000} (milliseconds)" if diag.rule.timeout_env_unit == "ms" else f"{env}={value}"
    return f"{prefix}set {setting} ({live['basis']})"


class _Clock:
    """Signal -> seconds, computed once per signal (the year of the log is known by now)."""

    def __init__(self, observer):
        self.observer = observer
        self.cache: dict[int, float | None] = {}

    def __call__(self, s: Signal) -> float | None:
        key = id(s)
        if key not in self.cache:
            self.cache[key] = self.observer.signal_seconds(s)
        return self.cache[key]


def _evidence(signals: list[Signal]) -> list[dict]:
    # time and stream place each signal on the HTML report's swim lanes.
    return [{"line": s.line, "text": s.text, "kind": s.kind, "time": s.time, "stream": s.stream_id} for s in signals]


def _stalled_stream(diag, signals: list[Signal]) -> str:
    """The process the timeout gave up on: a process of the rule's `stalled_role`; among
    several, the one that went quiet first when the log tells them apart."""
    role = diag.rule.stalled_role
    if role:
        last_seen: dict[str, int] = {}
        for s in signals:
            if s.role == role and s.line <= diag.line:
                last_seen[s.stream_id] = s.line
        if len(last_seen) == 1:
            return next(iter(last_seen))
        if last_seen:
            ordered = sorted(last_seen.items(), key=lambda kv: kv[1])
            if ordered[1][1] - ordered[0][1] > 1:
                return ordered[0][0]
        if diag.role == role:
            return diag.stream_id
        if last_seen:
            return ordered[-1][0]
    return diag.stream_id
