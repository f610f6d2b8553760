"""The crash as a picture: one swim lane per process stream, the report's timeline placed on it
by time (by log line when the log has no timestamps), drawn as inline SVG.

Built only from the redacted report dict (`Report.to_dict(redactor)`), so the picture quotes
nothing the JSON would not. The root is marked, the symptoms it explains are linked to it,
restarts cross every lane, and for the timeout family the progress and stall signals and the
deadline sit on the lane of the process the timeout gave up on. A long log is zoomed to the
crash window, and the picture says what it left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from html import escape

from vcrash.classify.signals import parse_time

ROLE_ORDER = {"api-server": 0, "engine-core": 1, "worker": 2, "ray": 3, "main": 4, "other": 5}
MAIN_ROLES = ("api-server", "engine-core", "worker")  # drawn even when quiet: the cascade's cast
MAX_LANES = 16
# Beyond these a log counts as long and the picture zooms to the crash window.
MAX_MARKS = 60
MAX_SPAN = {"time": 2 * 3600.0, "line": 5000.0}
MIN_PAD = {"time": 60.0, "line": 30.0}
YEAR_S = 365 * 86400.0

# Geometry of the SVG (user units; the page scales it).
WIDTH = 960
PLOT_X0, PLOT_X1 = 210, 940
TOP = 40
LANE_H = 48
BOTTOM = 12


@dataclass
class Mark:
    key: str  # the id of its row in the page's events table
    input: str
    stream: str
    line: int
    time: str | None
    kind: str  # root | symptom | crash | traceback | event | progress | stall | a lifecycle kind
    text: str
    rule: str | None = None
    restart: bool = False
    last_progress: bool = False
    seconds: float | None = None
    pos: float = 0.0
    shown: bool = True


@dataclass
class Lane:
    stream: str
    name: str
    detail: str
    role: str
    root: bool = False


@dataclass
class Picture:
    marks: list[Mark]  # every mark, in log order; `shown` says which are drawn
    lanes: list[Lane] = field(default_factory=list)
    axis: str = "line"  # time | line
    lo: float = 0.0
    hi: float = 1.0
    deadline: dict | None = None  # {"stream", "start", "end", "label"} in axis units
    left_out: list[str] = field(default_factory=list)  # sentences for the caption
    zoomed: bool = False
    primary_kind: str = "root"  # the primary finding's rule kind (a lone symptom can head a report)

    @property
    def drawn(self) -> list[Mark]:
        lanes = {lane.stream for lane in self.lanes}
        return [m for m in self.marks if m.shown and m.stream in lanes]


# --------------------------------------------------------------------------- the model


def build_picture(data: dict) -> Picture:
    diagnoses = data.get("diagnoses") or []
    primary = diagnoses[0] if diagnoses else None
    marks = _timeline_marks(data, diagnoses)
    if primary is not None:
        _add_missing_diagnosis_marks(marks, primary)
        _add_liveness_marks(marks, primary)
    marks.sort(key=lambda m: (_input_order(data).get(m.input, 0), m.line, m.kind != "root"))
    for i, m in enumerate(marks, 1):
        m.key = f"ev-{i}"
    pic = Picture(marks=marks, primary_kind=primary["kind"] if primary else "root")
    _place(pic)
    if primary is not None:
        pic.deadline = _deadline(pic, primary)
    _window(pic, data)
    pic.lanes = _lanes(data, pic, primary)
    return pic


def _input_order(data: dict) -> dict[str, int]:
    return {inp["path"]: i for i, inp in enumerate(data.get("inputs") or [])}


def _timeline_marks(data: dict, diagnoses: list[dict]) -> list[Mark]:
    primary = diagnoses[0] if diagnoses else None
    root_tbs = {d["traceback"] for d in diagnoses[1:] if d["kind"] == "root" and d.get("traceback")}
    symptoms = primary["explains"] if primary else []
    seen_start: set[str] = set()
    marks = []
    for item in data.get("timeline") or []:
        kind = item["kind"]
        if kind in ("traceback", "event"):
            if primary is not None and _same_evidence(item, primary):
                kind = "root"
            elif any(_same_evidence(item, s) for s in symptoms):
                kind = "symptom"
            elif item.get("traceback") in root_tbs:
                kind = "crash"
        text = item.get("text") or ""
        if item.get("context") and item["kind"] == "traceback":
            text = f"{item['context']} → {text}"
        m = Mark("", item["input"], item["stream"], item["line"], item.get("time"), kind, text, item.get("rule"))
        if kind == "server-start":
            m.restart = item["input"] in seen_start
            seen_start.add(item["input"])
        marks.append(m)
    return marks


def _same_evidence(item: dict, finding: dict) -> bool:
    """A timeline item is the finding's evidence: the same traceback, or the same event line."""
    if item.get("input") != finding.get("input", item.get("input")):
        return False
    if item["kind"] == "traceback":
        return bool(finding.get("traceback")) and item.get("traceback") == finding["traceback"]
    return item["line"] == finding["line"] and item["stream"] == finding["stream"]


def _add_missing_diagnosis_marks(marks: list[Mark], primary: dict) -> None:
    """The root and its symptoms are drawn even when the capped timeline lost them."""
    if not any(m.kind == "root" for m in marks):
        exc = primary.get("exception") or {}
        text = primary.get("evidence") or f"{exc.get('type', '')}: {exc.get('message', '')}"
        marks.append(Mark("", primary["input"], primary["stream"], primary["line"], primary.get("time"), "root",
                          text, primary["rule"]))
    found = {(m.input, m.stream, m.rule) for m in marks if m.kind == "symptom"}
    for s in primary["explains"]:
        inp = s.get("input") or primary["input"]
        if (inp, s["stream"], s["rule"]) not in found:
            marks.append(Mark("", inp, s["stream"], s["line"], None, "symptom", s["rule"], s["rule"]))


def _add_liveness_marks(marks: list[Mark], primary: dict) -> None:
    live = primary.get("liveness") or {}
    if not live:
        return
    stalled = live.get("stalled") or primary["stream"]
    have = {(m.line, m.kind) for m in marks}
    last = live.get("last_progress") or {}
    for ev in live.get("evidence") or []:
        if (ev["line"], ev["kind"]) in have:
            continue
        have.add((ev["line"], ev["kind"]))
        marks.append(Mark("", primary["input"], ev.get("stream") or stalled, ev["line"], ev.get("time"), ev["kind"],
                          ev["text"], last_progress=ev["line"] == last.get("line")))
    if last and (last["line"], "progress") not in have:
        marks.append(Mark("", primary["input"], stalled, last["line"], None, "progress", last["text"],
                          last_progress=True))
    late = live.get("progress_after_deadline")
    if late and (late["line"], "progress") not in have:
        marks.append(Mark("", primary["input"], stalled, late["line"], None, "progress",
                          f"after the deadline: {late['text']}"))


def _place(pic: Picture) -> None:
    """Seconds for every mark (a mark without a timestamp takes its input's previous one, else
    the next); the time axis when every mark has one, else log lines."""
    by_input: dict[str, list[Mark]] = {}
    for m in pic.marks:
        by_input.setdefault(m.input, []).append(m)
    for ms in by_input.values():
        ms.sort(key=lambda m: m.line)
        # vLLM's MM-DD stamps take the year of the input's dated stamps (docker, k8s, ISO), if any.
        year = next((int(m.time[:4]) for m in ms if m.time and len(m.time) > 14 and m.time[:4].isdigit()), None)
        offset, prev = 0.0, None
        for m in ms:
            t = parse_time(m.time, year) if m.time else None
            if t is not None:
                t += offset
                if prev is not None and t < prev - YEAR_S / 2 and len(m.time or "") == 14:
                    offset += YEAR_S  # the year-less MM-DD stamp crossed 12-31 -> 01-01
                    t += YEAR_S
                prev = t
            m.seconds = t
        known = [m.seconds for m in ms]
        for i, m in enumerate(ms):
            if m.seconds is None:
                before = next((t for t in reversed(known[:i]) if t is not None), None)
                m.seconds = before if before is not None else next((t for t in known[i:] if t is not None), None)
    pic.axis = "time" if pic.marks and all(m.seconds is not None for m in pic.marks) else "line"
    for m in pic.marks:
        m.pos = m.seconds if pic.axis == "time" else float(m.line)


def _deadline(pic: Picture, primary: dict) -> dict | None:
    live = primary.get("liveness") or {}
    limit = live.get("timeout_s")
    root = next((m for m in pic.marks if m.kind == "root"), None)
    if not limit or root is None:
        return None
    source = "stated in the message" if live.get("timeout_source") == "message" else "default"
    env = f" {live['timeout_env']}" if live.get("timeout_env") else ""
    label = f"deadline {limit:.0f}s ({source}{env})"
    stream = live.get("stalled") or primary["stream"]
    if pic.axis != "time":  # no clock: the deadline is only named at the root
        return {"stream": stream, "start": root.pos, "end": root.pos, "label": label}
    return {"stream": stream, "start": root.pos - float(limit), "end": root.pos, "label": label}


def _window(pic: Picture, data: dict) -> None:
    """Everything when the log is short; else the crash window with a margin, and what is left out."""
    positions = [m.pos for m in pic.marks]
    if pic.deadline:
        positions.append(pic.deadline["start"])
    if not positions:
        return
    lo, hi = min(positions), max(positions)
    anchors = [m.pos for m in pic.marks if m.kind in ("root", "symptom", "progress", "stall")]
    if pic.deadline:
        anchors.append(pic.deadline["start"])
    root = next((m for m in pic.marks if m.kind == "root"), None)
    if root is not None:  # the start of the root's server run and the restart after it, when near
        starts = [m for m in pic.marks if m.kind in ("server-start", "engine-init") and m.input == root.input]
        run_start = next((m for m in reversed(starts) if m.line <= root.line), None)
        restart = next((m for m in starts if m.restart and m.line > root.line), None)
        anchors += [m.pos for m in (run_start, restart) if m is not None and abs(m.pos - root.pos) <= MAX_SPAN[pic.axis]]
    long_log = len(pic.marks) > MAX_MARKS or hi - lo > MAX_SPAN[pic.axis]
    if anchors and long_log:
        a_lo, a_hi = min(anchors), max(anchors)
        pad = max((a_hi - a_lo) * 0.25, MIN_PAD[pic.axis])
        lo, hi = max(lo, a_lo - pad), min(hi, a_hi + pad)
        before = [m for m in pic.marks if m.pos < lo]
        after = [m for m in pic.marks if m.pos > hi]
        for m in before + after:
            m.shown = False
        pic.zoomed = bool(before or after)
    pic.lo, pic.hi = lo, hi
    if pic.zoomed:
        if before:
            pic.left_out.append(f"{_count(len(before), 'earlier mark')} ({_span(before)})")
        if after:
            pic.left_out.append(f"{_count(len(after), 'later mark')} ({_span(after)})")
    timeline = data.get("timeline") or []
    if len(timeline) >= 200:
        pic.left_out.append("the report keeps the first 200 timeline items")


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _span(marks: list[Mark]) -> str:
    first, last = marks[0], marks[-1]
    lines = f"line {first.line}" if first.line == last.line else f"lines {first.line}–{last.line}"
    times = [m.time for m in (first, last) if m.time]
    return lines + (f", {times[0]}" + (f" to {times[-1]}" if times[-1] != times[0] else "") if times else "")


def _lanes(data: dict, pic: Picture, primary: dict | None) -> list[Lane]:
    marked = {m.stream for m in pic.marks}
    # The report's streams may be an iterator over 100 K processes: every marked one is kept,
    # the other candidates only while they could all be drawn (past MAX_LANES only marked
    # streams in the window are), and all of them counted.
    streams: dict[str, dict] = {}
    candidates = 0
    for s in data.get("streams") or []:
        if s["id"] in marked:
            streams[s["id"]] = s
        elif s.get("role") in MAIN_ROLES:
            candidates += 1
            if candidates <= MAX_LANES:
                streams[s["id"]] = s
    for sid in marked - set(streams):
        streams[sid] = {"id": sid, "name": sid.rsplit(":", 2)[-2] if sid.count(":") >= 2 else sid, "pid": None,
                        "role": "other"}
    order = _input_order(data)
    wanted = list(streams.values())
    total = len(marked) + candidates
    in_window = {m.stream for m in pic.marks if m.shown}
    wanted.sort(key=lambda s: (_input_of(s["id"], order), ROLE_ORDER.get(s.get("role"), 9), s.get("name") or "",
                               s.get("pid") or 0))
    if total > MAX_LANES:
        keep = [s for s in wanted if s["id"] in in_window][:MAX_LANES]
        dropped = total - len(keep)
        wanted = [s for s in wanted if s in keep]
        pic.left_out.append(f"{_count(dropped, 'process stream')} with nothing in the window")
    several = len(order) > 1
    root_stream = primary["stream"] if primary else None
    lanes = []
    for s in wanted:
        name = s.get("name") or "?"
        if name in ("-", ""):
            name = "untagged lines"
        bits = [s.get("role") or "other"] + ([f"pid {s['pid']}"] if s.get("pid") else [])
        if several:
            bits.insert(0, _input_of_name(s["id"], order))
        lanes.append(Lane(s["id"], name, " · ".join(bits), s.get("role") or "other", s["id"] == root_stream))
    return lanes


def _input_of(stream_id: str, order: dict[str, int]) -> int:
    return next((i for path, i in order.items() if stream_id.startswith(path + ":")), 0)


def _input_of_name(stream_id: str, order: dict[str, int]) -> str:
    path = next((p for p in sorted(order, key=len, reverse=True) if stream_id.startswith(p + ":")), "")
    return path.replace("\\", "/").rsplit("/", 1)[-1]


# --------------------------------------------------------------------------- the drawing


def picture_svg(pic: Picture) -> str:
    lanes = pic.lanes
    height = TOP + LANE_H * max(len(lanes), 1) + BOTTOM
    row = {lane.stream: i for i, lane in enumerate(lanes)}
    span = (pic.hi - pic.lo) or 1.0
    lo, hi = pic.lo - span * 0.03, pic.hi + span * 0.03

    def x(pos: float) -> float:
        return round(PLOT_X0 + (pos - lo) / (hi - lo) * (PLOT_X1 - PLOT_X0), 1)

    def y(stream: str) -> float:
        return TOP + LANE_H * row[stream] + LANE_H / 2

    title = "Crash timeline: one lane per process"
    out = [f'<svg class="lanes" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
           f'role="img" aria-labelledby="lanes-title lanes-desc">',
           f'<title id="lanes-title">{title}</title>',
           f'<desc id="lanes-desc">{escape(_description(pic))}</desc>',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" class="arrowhead"/></marker></defs>']
    for i, lane in enumerate(lanes):
        top = TOP + LANE_H * i
        cls = "lane root-lane" if lane.root else "lane"
        out.append(f'<g class="{cls}" id="lane-{i + 1}" data-stream="{escape(lane.stream)}">'
                   f'<rect class="lane-bg{" odd" if i % 2 else ""}" x="0" y="{top}" width="{WIDTH}" height="{LANE_H}"/>'
                   f'<text class="lane-name" x="10" y="{top + 21}">{escape(_clip(lane.name, 26))}</text>'
                   f'<text class="lane-detail" x="10" y="{top + 36}">{escape(_clip(lane.detail, 34))}</text></g>')
    out.append(_axis(pic, lo, hi, x, height))
    drawn = pic.drawn
    for m in drawn:
        if m.restart:
            xm = x(m.pos)
            out.append(f'<g class="restart"><line x1="{xm}" y1="{TOP - 6}" x2="{xm}" y2="{height - BOTTOM}"/>'
                       f'<text x="{xm + 3}" y="{TOP - 8}">restart</text></g>')
    if pic.deadline and pic.deadline["stream"] in row:
        out.append(_deadline_svg(pic.deadline, x, y(pic.deadline["stream"]), lo, hi))
    root = next((m for m in drawn if m.kind == "root"), None)
    if root is not None:
        for m in drawn:
            if m.kind == "symptom":
                out.append(_link(x(root.pos), y(root.stream), x(m.pos), y(m.stream)))
    for m in sorted(drawn, key=lambda m: m.kind == "root"):  # the root on top
        out.append(_mark_svg(m, x(m.pos), y(m.stream)))
    if root is not None:
        xr, yr = x(root.pos), y(root.stream)
        anchor = "end" if xr > (PLOT_X0 + PLOT_X1) / 2 else "start"
        dx = -14 if anchor == "end" else 14
        out.append(f'<text class="root-label" x="{xr + dx}" y="{yr + 20}" text-anchor="{anchor}">'
                   f'{"root" if pic.primary_kind == "root" else "primary"}: {escape(_clip(root.rule or "", 40))}</text>')
    out.append("</svg>")
    return "".join(out)


def _description(pic: Picture) -> str:
    root = next((m for m in pic.marks if m.kind == "root"), None)
    bits = [f"{len(pic.lanes)} process lanes, {len(pic.drawn)} marks"]
    if root is not None:
        bits.append(f"root {root.rule} in {root.stream} at line {root.line}")
    symptoms = sum(1 for m in pic.drawn if m.kind == "symptom")
    if symptoms:
        bits.append(f"{symptoms} linked symptoms")
    return "; ".join(bits)


def _axis(pic: Picture, lo: float, hi: float, x, height: int) -> str:
    out = ['<g class="axis">']
    for v in _ticks(lo, hi, pic.axis):
        xv = x(v)
        out.append(f'<line x1="{xv}" y1="{TOP - 4}" x2="{xv}" y2="{height - BOTTOM}"/>'
                   f'<text x="{xv}" y="{TOP - 22}" text-anchor="middle">{escape(_tick_label(v, pic.axis, hi - lo))}</text>')
    unit = "time" if pic.axis == "time" else "log line"
    out.append(f'<text class="axis-unit" x="10" y="{TOP - 22}">{unit}</text></g>')
    return "".join(out)


def _ticks(lo: float, hi: float, axis: str) -> list[float]:
    steps = ([1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400]
             if axis == "time" else [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000,
                                     100000, 200000, 500000, 1000000])
    span = max(hi - lo, 1e-9)
    step = next((s for s in steps if span / s <= 6), steps[-1] * (int(span / steps[-1] / 6) + 1))
    first = (int(lo // step) + 1) * step
    ticks, v = [], first
    while v < hi and len(ticks) < 12:
        ticks.append(float(v))
        v += step
    return ticks


def _tick_label(v: float, axis: str, span: float) -> str:
    if axis != "time":
        return str(int(v))
    when = datetime.fromtimestamp(v)
    return when.strftime("%m-%d %H:%M" if span > 86400 else "%H:%M:%S")


def _deadline_svg(d: dict, x, yc: float, lo: float, hi: float) -> str:
    x0, x1 = x(max(d["start"], lo)), x(min(d["end"], hi))
    label = escape(d["label"])
    band = ""
    if x1 - x0 >= 1:
        band = (f'<rect class="deadline-band" x="{x0}" y="{yc - LANE_H / 2 + 3}" width="{round(x1 - x0, 1)}" '
                f'height="{LANE_H - 6}"/>')
    tx = x1 - 4 if x1 - PLOT_X0 > 240 else x1 + 4
    anchor = "end" if x1 - PLOT_X0 > 240 else "start"
    return (f'<g class="deadline">{band}<line x1="{x1}" y1="{yc - LANE_H / 2}" x2="{x1}" y2="{yc + LANE_H / 2}"/>'
            f'<text x="{tx}" y="{yc + LANE_H / 2 - 5}" text-anchor="{anchor}">{label}</text></g>')


def _link(x1: float, y1: float, x2: float, y2: float) -> str:
    bend = 40 if abs(x2 - x1) < 20 else (x2 - x1) / 2
    return (f'<path class="link" d="M{x1},{y1} C{round(x1 + bend, 1)},{y1} {round(x2 - bend / 4, 1)},{y2} '
            f'{x2},{y2}" marker-end="url(#arrow)"/>')


def _mark_svg(m: Mark, xm: float, yc: float) -> str:
    tip = escape(f"line {m.line}" + (f" · {m.time}" if m.time else "") + f" · {m.kind}"
                 + (f" · {m.rule}" if m.rule else "") + f"\n{_clip(m.text, 300)}")
    label = (f'<text class="mark-label" x="{xm + 5}" y="{yc - 11}">last progress</text>' if m.last_progress else "")
    extra = " last-progress" if m.last_progress else ""
    return (f'<a href="#{m.key}"><g class="mark mark-{escape(m.kind)}{extra}" data-line="{m.line}">'
            f"<title>{tip}</title>{_shape(m.kind, xm, yc)}{label}</g></a>")


def _shape(kind: str, xm: float, yc: float) -> str:
    if kind == "root":
        return f'<circle class="root-ring" cx="{xm}" cy="{yc}" r="12"/><circle cx="{xm}" cy="{yc}" r="7"/>'
    if kind == "symptom":
        return f'<path d="M{xm},{yc - 8} L{xm + 8},{yc} L{xm},{yc + 8} L{xm - 8},{yc} z"/>'
    if kind in ("crash", "traceback"):
        return f'<rect x="{xm - 6}" y="{yc - 6}" width="12" height="12"/>'
    if kind == "event":
        return f'<path d="M{xm},{yc - 7} L{xm + 7},{yc + 6} L{xm - 7},{yc + 6} z"/>'
    if kind == "progress":  # above the lane's middle: signals and crashes share a moment
        return f'<rect x="{xm - 2}" y="{yc - 21}" width="4" height="12"/>'
    if kind == "stall":
        return f'<path d="M{xm - 5},{yc - 20} L{xm + 5},{yc - 10} M{xm + 5},{yc - 20} L{xm - 5},{yc - 10}"/>'
    return f'<circle cx="{xm}" cy="{yc}" r="4"/>'  # server lifecycle: start, init, ready, HTTP 500, shutdown


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


LEGEND = [
    ("root", "root cause"),
    ("symptom", "symptom it explains (linked)"),
    ("crash", "other traceback"),
    ("event", "evidence line"),
    ("progress", "progress signal"),
    ("stall", "stall signal"),
    ("server-start", "server lifecycle"),
]


def legend_svg(kind: str) -> str:
    """A small swatch of one mark kind for the legend under the picture."""
    return (f'<svg class="swatch" viewBox="-13 -22 26 35" width="20" height="26" aria-hidden="true">'
            f'<g class="mark mark-{kind}">{_shape(kind, 0, 0)}</g></svg>')
