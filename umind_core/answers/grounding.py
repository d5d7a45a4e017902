"""The grounding grammar of UMind-VL (report section 3.2): token vocabulary, primitives, format and parse.

Everything that turns geometry into text (training targets, visual prompts) or text back into geometry
(model replies) goes through this module, so that the model, the server and the Slicer module agree on one
grammar. Coordinates are integers on a 0..GRID grid relative to the image width and height (Qwen3-VL's
convention), x first, origin top-left; the pixel <-> grid conversion lives here and nowhere else.

Parsing is deliberately forgiving: a language model truncates, forgets end tokens, or answers in Qwen3-VL's
native JSON style before it is fine-tuned. `parse` therefore never raises on a str; whatever is malformed
becomes a warning and whatever could be read is returned. `degenerate` says when what was read is not an
answer at all (token soup), so that callers keep none of it.

Binding rules used by `parse`:
  * An object ref starts a new object; every primitive after it, up to the next object ref, belongs to it
    (text in between does not break the binding).
  * Primitives before the first object ref have label None. They are grouped in runs: consecutive
    primitives separated only by whitespace form one object; any other text starts a new object.
  * A run of strictly adjacent <|seg_mask|> tokens is cut into groups of NUM_MASK_TOKENS; a remainder
    (shorter run, or non-multiple) is one more group with n_tokens = its length and an
    "incomplete mask group" warning. MaskRef.index numbers all groups, complete or not, in text order.
  * JSON objects (bbox_2d / point_2d / line_2d) are objects of their own, with their own "label".
  * In an examination (several images in one conversation) a view marker ``View 2:`` (`format_view`; any
    case) says which image the objects after it point into: every object that starts after a marker, up to
    the next marker, gets ``view`` = its number (1-based, the order the images were given). Text without a
    marker parses exactly as before, every object with view None.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from dataclasses import dataclass, field

BOX_START, BOX_END = "<|box_start|>", "<|box_end|>"
POINT_START, POINT_END = "<|point_start|>", "<|point_end|>"
LINE_START, LINE_END = "<|line_start|>", "<|line_end|>"
SEG_MASK = "<|seg_mask|>"
REF_START, REF_END = "<|object_ref_start|>", "<|object_ref_end|>"

GROUNDING_TOKENS: tuple[str, ...] = (
    BOX_START,
    BOX_END,
    POINT_START,
    POINT_END,
    LINE_START,
    LINE_END,
    SEG_MASK,
    REF_START,
    REF_END,
)

NUM_MASK_TOKENS = 16
GRID = 1000


class GroundingError(ValueError):
    """Bad input to a formatting or conversion function (never raised by `parse` for a str)."""


@dataclass(frozen=True)
class Box:
    x1: int
    y1: int
    x2: int
    y2: int


@dataclass(frozen=True)
class Point:
    x: int
    y: int


@dataclass(frozen=True)
class Line:
    x1: int
    y1: int
    x2: int
    y2: int


@dataclass(frozen=True)
class MaskRef:
    """One group of <|seg_mask|> tokens; index is its 0-based order among all mask groups of the text."""

    index: int
    n_tokens: int


@dataclass
class GroundedSpan:
    """One object as read from text: an optional label and the primitives bound to it."""

    label: str | None
    boxes: list[Box] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)
    masks: list[MaskRef] = field(default_factory=list)
    char_span: tuple[int, int] = (0, 0)
    view: int | None = None  # 1-based image of an examination, from the last view marker before it


@dataclass
class ParseResult:
    objects: list[GroundedSpan]
    answer: str
    warnings: list[str]
    mask_groups: int


# ---------------------------------------------------------------------------------------------------------
# Validation and formatting
# ---------------------------------------------------------------------------------------------------------


def _check_coord(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise GroundingError(f"{what} must be an int on the 0..{GRID} grid, got {value!r}")
    v = int(value)
    if not 0 <= v <= GRID:
        raise GroundingError(f"{what}={v} is outside the 0..{GRID} grid")
    return v


def _check_label(label: object) -> str:
    if not isinstance(label, str):
        raise GroundingError(f"label must be a str, got {type(label).__name__} {label!r}")
    clean = label.strip()
    if not clean:
        raise GroundingError(f"label {label!r} is empty")
    for tok in GROUNDING_TOKENS:
        if tok in clean:
            raise GroundingError(f"label {label!r} contains the grounding token {tok}")
    return clean


def _ref_prefix(label: str | None) -> str:
    return "" if label is None else format_ref(label)


def _pair(x: int, y: int) -> str:
    return f"({x},{y})"


def format_ref(label: str) -> str:
    """`<|object_ref_start|>label<|object_ref_end|>`; surrounding whitespace is dropped, as parse drops it."""
    return REF_START + _check_label(label) + REF_END


def format_box(box: Box, label: str | None = None) -> str:
    """A box needs x1 <= x2 and y1 <= y2: parse normalises corners, so anything else would not read back."""
    if not isinstance(box, Box):
        raise GroundingError(f"format_box expects a Box, got {type(box).__name__} {box!r}")
    x1, y1 = _check_coord(box.x1, "box.x1"), _check_coord(box.y1, "box.y1")
    x2, y2 = _check_coord(box.x2, "box.x2"), _check_coord(box.y2, "box.y2")
    if x1 > x2 or y1 > y2:
        raise GroundingError(f"box {box!r} has its corners out of order (need x1 <= x2 and y1 <= y2)")
    return _ref_prefix(label) + BOX_START + _pair(x1, y1) + "," + _pair(x2, y2) + BOX_END


def format_point(point: Point, label: str | None = None) -> str:
    if not isinstance(point, Point):
        raise GroundingError(f"format_point expects a Point, got {type(point).__name__} {point!r}")
    x, y = _check_coord(point.x, "point.x"), _check_coord(point.y, "point.y")
    return _ref_prefix(label) + POINT_START + _pair(x, y) + POINT_END


def format_line(line: Line, label: str | None = None) -> str:
    """Lines keep their direction (a measurement from caliper 1 to caliper 2)."""
    if not isinstance(line, Line):
        raise GroundingError(f"format_line expects a Line, got {type(line).__name__} {line!r}")
    x1, y1 = _check_coord(line.x1, "line.x1"), _check_coord(line.y1, "line.y1")
    x2, y2 = _check_coord(line.x2, "line.x2"), _check_coord(line.y2, "line.y2")
    return _ref_prefix(label) + LINE_START + _pair(x1, y1) + "," + _pair(x2, y2) + LINE_END


def _check_n_tokens(n_tokens: object) -> int:
    if isinstance(n_tokens, bool) or not isinstance(n_tokens, numbers.Integral) or int(n_tokens) < 1:
        raise GroundingError(f"n_tokens must be a positive int, got {n_tokens!r}")
    return int(n_tokens)


def format_mask(label: str | None = None, n_tokens: int = NUM_MASK_TOKENS) -> str:
    return _ref_prefix(label) + SEG_MASK * _check_n_tokens(n_tokens)


def format_view(view: int) -> str:
    """The marker ``View <n>:`` that puts the objects after it into image n (1-based) of an examination.

    Why plain text and not a token: the number is read by the tokenizer as text the model already knows,
    the prompt labels each image the same way (`prompts.exam_prefix`), and a single-image answer never has
    one, so nothing about single-image grounding changes."""
    if isinstance(view, bool) or not isinstance(view, numbers.Integral) or int(view) < 1:
        raise GroundingError(f"view must be a positive int (1 = the first image), got {view!r}")
    return f"View {int(view)}:"


def format_object(span: GroundedSpan) -> str:
    """The ref once, then boxes, points, lines and masks. MaskRef.index is not written (parse renumbers).

    Adjacent mask groups are written back to back, except after a group shorter than NUM_MASK_TOKENS,
    where a space keeps the two runs apart so that they read back as the same groups.
    """
    if not isinstance(span, GroundedSpan):
        raise GroundingError(f"format_object expects a GroundedSpan, got {type(span).__name__}")
    parts = [] if span.view is None else [format_view(span.view) + " "]
    parts.append(_ref_prefix(span.label))
    parts += [format_box(b) for b in span.boxes]
    parts += [format_point(p) for p in span.points]
    parts += [format_line(ln) for ln in span.lines]
    for i, mask in enumerate(span.masks):
        if not isinstance(mask, MaskRef):
            raise GroundingError(f"masks must hold MaskRef, got {type(mask).__name__} {mask!r}")
        n = _check_n_tokens(mask.n_tokens)
        if n > NUM_MASK_TOKENS:
            raise GroundingError(f"mask {mask!r} has more than NUM_MASK_TOKENS={NUM_MASK_TOKENS} tokens")
        if i > 0 and span.masks[i - 1].n_tokens != NUM_MASK_TOKENS:
            parts.append(" ")
        parts.append(SEG_MASK * n)
    return "".join(parts)


def format_objects(spans: list[GroundedSpan], sep: str = " ") -> str:
    """Objects joined by sep. A span without a label reads back merged into the object before it (the
    grammar has no token that ends a ref), so the round trip is exact when only the first lacks a label."""
    if not isinstance(sep, str):
        raise GroundingError(f"sep must be a str, got {type(sep).__name__}")
    return sep.join(format_object(s) for s in spans)


# ---------------------------------------------------------------------------------------------------------
# Pixel <-> grid conversion (the one place where it happens)
# ---------------------------------------------------------------------------------------------------------


def _check_real(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise GroundingError(f"{what} must be a finite number, got {value!r}")
    return float(value)


def _check_size(size_px: object, what: str = "size_px") -> float:
    size = _check_real(size_px, what)
    if size <= 0:
        raise GroundingError(f"{what} must be positive, got {size_px!r}")
    return size


def to_grid(value_px: float, size_px: int) -> int:
    """Pixel coordinate (0 = left/top edge, size_px = right/bottom edge) -> grid int, rounded half up and
    clipped to 0..GRID. Half up rather than Python's banker's rounding, so x.5 always goes the same way."""
    scaled = _check_real(value_px, "value_px") / _check_size(size_px) * GRID
    if scaled <= 0:
        return 0
    if scaled >= GRID:
        return GRID
    return min(GRID, math.floor(scaled + 0.5))


def from_grid(value: int | float, size_px: int) -> float:
    """Grid coordinate -> pixel coordinate (not clipped: callers may pass derived values such as centres)."""
    return _check_real(value, "value") / GRID * _check_size(size_px)


def box_to_grid(x1: float, y1: float, x2: float, y2: float, width: int, height: int) -> Box:
    """Corners may come in any order (e.g. a dragged ROI); the Box is normalised to x1 <= x2, y1 <= y2."""
    gx1, gx2 = sorted((to_grid(x1, width), to_grid(x2, width)))
    gy1, gy2 = sorted((to_grid(y1, height), to_grid(y2, height)))
    return Box(gx1, gy1, gx2, gy2)


def box_from_grid(box: Box, width: int, height: int) -> tuple[float, float, float, float]:
    return (
        from_grid(box.x1, width),
        from_grid(box.y1, height),
        from_grid(box.x2, width),
        from_grid(box.y2, height),
    )


def point_to_grid(x: float, y: float, width: int, height: int) -> Point:
    return Point(to_grid(x, width), to_grid(y, height))


def point_from_grid(point: Point, width: int, height: int) -> tuple[float, float]:
    return from_grid(point.x, width), from_grid(point.y, height)


def line_to_grid(x1: float, y1: float, x2: float, y2: float, width: int, height: int) -> Line:
    """Direction is kept: a line is not a box."""
    return Line(to_grid(x1, width), to_grid(y1, height), to_grid(x2, width), to_grid(y2, height))


def line_from_grid(line: Line, width: int, height: int) -> tuple[float, float, float, float]:
    return (
        from_grid(line.x1, width),
        from_grid(line.y1, height),
        from_grid(line.x2, width),
        from_grid(line.y2, height),
    )


_SPAN_RE = re.compile(
    rf"({re.escape(BOX_START)}|{re.escape(POINT_START)}|{re.escape(LINE_START)})(.*?)"
    rf"({re.escape(BOX_END)}|{re.escape(POINT_END)}|{re.escape(LINE_END)})", re.S)
_PAIR_RE = re.compile(r"\(\s*([-+]?\d+)\s*,\s*([-+]?\d+)\s*\)")


def grid_pairs(text: str) -> list[tuple[int, int]]:
    """Every (x, y) grid pair written inside a box, point or line of well-formed text (a training target or a
    visual prompt); numbers outside those spans (a length in mm) are not coordinates."""
    return [(int(x), int(y)) for span in _SPAN_RE.finditer(text) for x, y in _PAIR_RE.findall(span.group(2))]


def map_grid_pairs(text: str, fn) -> str:
    """`text` with every grid pair of its boxes, points and lines replaced by `fn(x, y)` (rounded half up and
    clipped to 0..GRID), everything else unchanged: how a geometric change of the image (training-time
    augmentation) carries over to the words about it. `fn` must keep x and y order (x1 <= x2 in a box)."""
    def pair(m: re.Match) -> str:
        x, y = fn(int(m.group(1)), int(m.group(2)))
        return _pair(*(min(GRID, max(0, math.floor(float(v) + 0.5))) for v in (x, y)))

    return _SPAN_RE.sub(lambda m: m.group(1) + _PAIR_RE.sub(pair, m.group(2)) + m.group(3), text)


# ---------------------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------------------

_TOKEN_RE = re.compile("|".join(re.escape(t) for t in GROUNDING_TOKENS))
_PRIMITIVES = {
    BOX_START: ("box", BOX_END, 4),
    POINT_START: ("point", POINT_END, 2),
    LINE_START: ("line", LINE_END, 4),
}
_INT = r"\s*([-+]?\d+)\s*"
_PAIR = rf"\s*\({_INT},{_INT}\)\s*"
_STANDARD = {2: re.compile(_PAIR), 4: re.compile(rf"{_PAIR},{_PAIR}")}
_NUMBER_RE = re.compile(r"[-+]?\d+(?:\.\d+)?")
# What an unterminated primitive may still contain: coordinates, never words or line breaks.
_COORDISH_RE = re.compile(r"[ \t\d(),.+\-\[\]]*")
_JSON_KEYS = ("bbox_2d", "point_2d", "line_2d")
_JSON_KEY_RE = re.compile(r'"(?:bbox_2d|point_2d|line_2d)"\s*:')
_JSON_OPEN_RE = re.compile(r"[\[{]")
_FENCE_RE = re.compile(r"```[ \t]*(?:json)?[ \t]*\n?(?P<body>.*?)(?P<close>```|\Z)", re.S | re.I)
_MAX_JSON_ATTEMPTS = 2000
_VIEW_RE = re.compile(r"\bview[ \t]+(\d{1,3})[ \t]*:", re.I)
_MAX_DIGITS = 7  # anything longer is far off the grid and is clipped without converting the digits


def _number_to_grid(text: str) -> tuple[int, bool]:
    """Numeric literal -> (grid int rounded half up and clipped, whether it was clipped)."""
    digits = text.lstrip("+-").split(".")[0].lstrip("0")
    if len(digits) > _MAX_DIGITS:
        return (0 if text.startswith("-") else GRID), True
    return _real_to_grid(float(text))


def _real_to_grid(value: float) -> tuple[int, bool]:
    if value < 0:
        return 0, True
    if value > GRID:
        return GRID, True
    return min(GRID, math.floor(value + 0.5)), False


def _tidy(text: str) -> str:
    """Collapse the gaps that removed markup leaves behind; keep paragraph breaks."""
    lines = []
    for line in text.replace("\r\n", "\n").split("\n"):
        line = re.sub(r"[ \t\f\v]+", " ", line).strip()
        line = re.sub(r" (?=[.,;:!?)\]])", "", line)
        line = re.sub(r"(?<=[(\[]) ", "", line)
        lines.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _strip_tokens(label: str) -> str:
    return _TOKEN_RE.sub(" ", label)


class _Parser:
    """One pass over one text; state lives here so that `parse` stays a thin never-raising wrapper."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.objects: list[GroundedSpan] = []
        self.warnings: list[str] = []
        self.edits: list[tuple[int, int, str]] = []  # (start, end, replacement) for the answer
        self.markup: list[tuple[int, int]] = []  # text that JSON scanning must not look into
        self.current: GroundedSpan | None = None
        self.current_is_ref = False
        self.last_end = 0
        self.mask_index = 0
        self.mask_groups = 0

    # -- markup -------------------------------------------------------------------------------------------

    def run(self) -> ParseResult:
        toks = [(m.start(), m.end(), m.group()) for m in _TOKEN_RE.finditer(self.text)]
        i = 0
        while i < len(toks):
            start, end, tok = toks[i]
            nxt = toks[i + 1] if i + 1 < len(toks) else None
            if tok == REF_START:
                i += self._ref(start, end, nxt)
            elif tok in _PRIMITIVES:
                i += self._primitive(start, end, tok, nxt)
            elif tok == SEG_MASK:
                j = i
                while j + 1 < len(toks) and toks[j + 1][2] == SEG_MASK and toks[j + 1][0] == toks[j][1]:
                    j += 1
                self._masks(start, toks[j][1], j - i + 1)
                i = j + 1
            else:
                self.warnings.append(f"stray {tok} at offset {start}")
                self.edits.append((start, end, " "))
                self.markup.append((start, end))
                i += 1
        self._truncated_token_at_end(toks)
        self._json()
        self.objects.sort(key=lambda o: o.char_span[0])
        self._views()
        return ParseResult(self.objects, self._answer(), self.warnings, self.mask_groups)

    def _ref(self, start: int, end: int, nxt: tuple[int, int, str] | None) -> int:
        if nxt is not None and nxt[2] == REF_END:
            label_end, span_end, used = nxt[0], nxt[1], 2
            self.edits.append((nxt[0], nxt[1], " "))
        else:
            label_end = nxt[0] if nxt is not None else len(self.text)
            newline = self.text.find("\n", end, label_end)
            if newline != -1:
                label_end = newline
            span_end, used = label_end, 1
            self.warnings.append(f"unclosed object ref at offset {start}: {self.text[end:label_end]!r}")
        self.edits.append((start, end, " "))
        self.markup.append((start, span_end))
        label = self.text[end:label_end].strip() or None
        if label is None:
            self.warnings.append(f"empty object ref at offset {start}")
        self.current = GroundedSpan(label, char_span=(start, span_end))
        self.current_is_ref = True
        self.objects.append(self.current)
        self.last_end = span_end
        return used

    def _primitive(self, start: int, end: int, tok: str, nxt: tuple[int, int, str] | None) -> int:
        kind, end_tok, need = _PRIMITIVES[tok]
        if nxt is not None and nxt[2] == end_tok:
            content, span_end, used = self.text[end : nxt[0]], nxt[1], 2
        else:
            stop = nxt[0] if nxt is not None else len(self.text)
            match = _COORDISH_RE.match(self.text, end, stop)
            content_end = end + len(match.group().rstrip(" \t")) if match else end
            content, span_end, used = self.text[end:content_end], content_end, 1
            self.warnings.append(f"truncated {kind} at offset {start} (missing {end_tok}): {content!r}")
        self.edits.append((start, span_end, " "))
        self.markup.append((start, span_end))
        values = self._coordinates(kind, need, content, start)
        if values is None:
            return used
        if kind == "box":
            x1, y1, x2, y2 = values
            if x1 > x2 or y1 > y2:
                self.warnings.append(f"box corners out of order at offset {start}; normalised")
            prim: object = Box(min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2))
        elif kind == "point":
            prim = Point(*values)
        else:
            prim = Line(*values)
        span = self._attach(start, span_end)
        if isinstance(prim, Box):
            span.boxes.append(prim)
        elif isinstance(prim, Point):
            span.points.append(prim)
        else:
            span.lines.append(prim)
        return used

    def _coordinates(self, kind: str, need: int, content: str, offset: int) -> list[int] | None:
        standard = _STANDARD[need].fullmatch(content)
        numbers_ = list(standard.groups()) if standard else _NUMBER_RE.findall(content)
        if len(numbers_) < need:
            self.warnings.append(
                f"truncated {kind} at offset {offset}: {content!r} has {len(numbers_)} of {need} numbers"
            )
            return None
        if not standard:
            self.warnings.append(
                f"malformed {kind} at offset {offset}: {content!r}; read the first {need} numbers"
            )
        values = []
        for literal in numbers_[:need]:
            value, clipped = _number_to_grid(literal)
            if clipped:
                self.warnings.append(f"{kind} coordinate {literal} at offset {offset} clipped to {value}")
            values.append(value)
        return values

    def _masks(self, start: int, end: int, run: int) -> None:
        self.edits.append((start, end, " "))
        self.markup.append((start, end))
        full, rest = divmod(run, NUM_MASK_TOKENS)
        sizes = [NUM_MASK_TOKENS] * full + ([rest] if rest else [])
        if rest:
            self.warnings.append(
                f"incomplete mask group at offset {start}: a run of {run} {SEG_MASK} is not a multiple of "
                f"{NUM_MASK_TOKENS}; the last group has {rest}"
            )
        span = self._attach(start, end)
        for n in sizes:
            span.masks.append(MaskRef(self.mask_index, n))
            self.mask_index += 1
        self.mask_groups += full

    def _attach(self, start: int, end: int) -> GroundedSpan:
        """The object a primitive at [start, end) belongs to, extended to cover it."""
        span = self.current
        if span is None or (not self.current_is_ref and self.text[self.last_end : start].strip()):
            span = GroundedSpan(None, char_span=(start, end))
            self.current, self.current_is_ref = span, False
            self.objects.append(span)
        span.char_span = (span.char_span[0], end)
        self.last_end = end
        return span

    def _truncated_token_at_end(self, toks: list[tuple[int, int, str]]) -> None:
        cut = self.text.rfind("<|")
        if cut == -1 or (toks and cut < toks[-1][1]) or any(cut < e for _, e in self.markup):
            return
        tail = self.text[cut:]
        if any(tok.startswith(tail) and tok != tail for tok in GROUNDING_TOKENS):
            self.warnings.append(f"truncated token {tail!r} at end of text")
            self.edits.append((cut, len(self.text), " "))
            self.markup.append((cut, len(self.text)))

    def _views(self) -> None:
        """Give each object the number of the last view marker before it (outside markup)."""
        markers = [(m.start(), int(m.group(1))) for m in _VIEW_RE.finditer(self.text)
                   if not any(s <= m.start() < e for s, e in self.markup)]
        for at, number in markers:
            if number < 1:
                self.warnings.append(f"view marker at offset {at} names view {number}; views count from 1")
        markers = [(at, n) for at, n in markers if n >= 1]
        for obj in self.objects if markers else []:
            before = [n for at, n in markers if at < obj.char_span[0]]
            obj.view = before[-1] if before else None

    # -- Qwen3-VL JSON --------------------------------------------------------------------------------------

    def _gaps(self) -> list[tuple[int, int]]:
        gaps, pos = [], 0
        for s, e in sorted(self.markup):
            if s > pos:
                gaps.append((pos, s))
            pos = max(pos, e)
        if pos < len(self.text):
            gaps.append((pos, len(self.text)))
        return gaps

    def _json(self) -> None:
        for gap_start, gap_end in self._gaps():
            segment = self.text[gap_start:gap_end]
            if _JSON_KEY_RE.search(segment):
                self._json_segment(segment, gap_start, gap_end)

    def _json_segment(self, segment: str, gap_start: int, gap_end: int) -> None:
        regions, truncated_at = self._json_regions(segment, gap_start)
        self.objects.extend(o for _, _, objs in regions for o in objs)
        # Blocks are what the answer loses: a ```json fence, JSON cut off by the end of the text, or a value.
        blocks: list[tuple[int, int]] = []
        for fence in _FENCE_RE.finditer(segment):
            if not _JSON_KEY_RE.search(fence.group("body")):
                continue
            fs, fe = gap_start + fence.start(), gap_start + fence.end()
            blocks.append((fs, fe))
            if not fence.group("close"):
                self.warnings.append(f"unterminated ```json block at offset {fs}")
            try:
                json.loads(fence.group("body"))
            except Exception as exc:  # noqa: BLE001 - any decoder failure is a warning, never an error
                self.warnings.append(f"invalid JSON in fenced block at offset {fs}: {exc}")
        if truncated_at is not None and not any(fs <= truncated_at < fe for fs, fe in blocks):
            blocks.append((truncated_at, gap_end))
            self.warnings.append(f"invalid JSON at offset {truncated_at}: cut off by the end of the text")
        for rs, re_, _ in regions:
            if not any(bs <= rs and re_ <= be for bs, be in blocks):
                blocks.append((rs, re_))
        for bs, be in blocks:
            inside = [o for rs, re_, objs in regions if bs <= rs and re_ <= be for o in objs]
            labels = [o.label for o in inside if o.label]
            self.edits.append((bs, be, " " + ", ".join(labels) + " "))
        for key in _JSON_KEY_RE.finditer(segment):
            at = gap_start + key.start()
            if not any(bs <= at < be for bs, be in blocks):
                self.warnings.append(f"invalid JSON grounding near offset {at}: could not decode it")
                break

    def _json_regions(
        self, segment: str, offset: int
    ) -> tuple[list[tuple[int, int, list[GroundedSpan]]], int | None]:
        """Top-level JSON values in segment that hold grounding dicts, as (start, end, objects), and where
        an outermost value cut off by the end of the segment begins (None if there is none)."""
        decoder = json.JSONDecoder()
        last_key = max(m.start() for m in _JSON_KEY_RE.finditer(segment))
        tail = len(segment.rstrip())
        regions: list[tuple[int, int, list[GroundedSpan]]] = []
        truncated_at: int | None = None
        pos, attempts = 0, 0
        while True:
            opening = _JSON_OPEN_RE.search(segment, pos)
            if opening is None or opening.start() > last_key:
                break
            attempts += 1
            if attempts > _MAX_JSON_ATTEMPTS:
                self.warnings.append(f"gave up reading JSON after {_MAX_JSON_ATTEMPTS} attempts")
                break
            p = opening.start()
            try:
                _, q = decoder.raw_decode(segment, p)
            except json.JSONDecodeError as exc:
                cut_off = exc.pos >= tail or exc.msg.startswith("Unterminated string")
                if cut_off and truncated_at is None:
                    truncated_at = offset + p
                pos = p + 1
                continue
            except Exception:  # noqa: BLE001 - e.g. RecursionError from absurd nesting
                pos = p + 1
                continue
            objs = self._json_objects(segment, p, q, offset, decoder)
            if objs:
                regions.append((offset + p, offset + q, objs))
            pos = q
        return regions, truncated_at

    def _json_objects(
        self, segment: str, start: int, end: int, offset: int, decoder: json.JSONDecoder
    ) -> list[GroundedSpan]:
        """Grounding dicts inside segment[start:end], each with its own character span."""
        found, pos = [], start
        while True:
            brace = segment.find("{", pos, end)
            if brace == -1:
                return found
            try:
                value, q = decoder.raw_decode(segment[:end], brace)
            except Exception:  # noqa: BLE001
                pos = brace + 1
                continue
            if isinstance(value, dict) and any(k in value for k in _JSON_KEYS):
                found.append(self._json_object(value, (offset + brace, offset + q)))
                pos = q
            else:
                pos = brace + 1

    def _json_object(self, d: dict, span: tuple[int, int]) -> GroundedSpan:
        label = d.get("label")
        if isinstance(label, (int, float)) and not isinstance(label, bool):
            label = str(label)
        if isinstance(label, str):
            label = " ".join(_strip_tokens(label).split()) or None
        elif label is not None:
            self.warnings.append(f"JSON label {label!r} at offset {span[0]} is not a string; ignored")
            label = None
        obj = GroundedSpan(label, char_span=span)
        for values in self._json_groups(d.get("bbox_2d"), 4, "bbox_2d", span[0]):
            x1, y1, x2, y2 = values
            if x1 > x2 or y1 > y2:
                self.warnings.append(f"box corners out of order at offset {span[0]}; normalised")
            obj.boxes.append(Box(min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2)))
        for values in self._json_groups(d.get("point_2d"), 2, "point_2d", span[0]):
            obj.points.append(Point(*values))
        for values in self._json_groups(d.get("line_2d"), 4, "line_2d", span[0]):
            obj.lines.append(Line(*values))
        return obj

    def _json_groups(self, value: object, need: int, key: str, offset: int) -> list[list[int]]:
        """[x, y, ...] or [[x, y], [x, y]] is one primitive; a list of those is several."""
        if value is None:
            return []
        flat = _flatten_numbers(value)
        items = [_flatten_numbers(v) for v in value] if isinstance(value, list) else []
        if flat is not None and len(flat) == need:
            groups = [flat]
        elif items and all(item is not None and len(item) == need for item in items):
            groups = items  # type: ignore[assignment]
        else:
            self.warnings.append(f"invalid JSON {key} at offset {offset}: {value!r}")
            return []
        out = []
        for group in groups:
            ints = []
            for number in group:
                grid, clipped = _real_to_grid(float(number))
                if clipped:
                    self.warnings.append(f"{key} coordinate {number} at offset {offset} clipped to {grid}")
                ints.append(grid)
            out.append(ints)
        return out

    # -- answer ---------------------------------------------------------------------------------------------

    def _answer(self) -> str:
        out, pos = [], 0
        for start, end, repl in sorted(self.edits):
            if start < pos:  # overlapping edits cannot happen by construction; stay safe anyway
                continue
            out.append(self.text[pos:start])
            out.append(repl)
            pos = end
        out.append(self.text[pos:])
        return _tidy("".join(out))


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _flatten_numbers(value: object) -> list[float] | None:
    """A list of finite numbers, or a list of lists of them (flattened); None for anything else."""
    if not isinstance(value, list):
        return None
    if all(_is_number(v) for v in value):
        return list(value)
    if all(isinstance(v, list) and v and all(_is_number(x) for x in v) for v in value):
        return [x for v in value for x in v]
    return None


def parse(text: str) -> ParseResult:
    """Read every grounded object in a model reply; never raises for a str (problems become warnings)."""
    if not isinstance(text, str):
        raise GroundingError(f"parse expects a str, got {type(text).__name__}")
    try:
        return _Parser(text).run()
    except Exception as exc:  # noqa: BLE001 - last resort; the tests assert this branch is never taken
        return ParseResult([], _tidy(_TOKEN_RE.sub(" ", text)), [f"internal parser error: {exc!r}"], 0)


# ---------------------------------------------------------------------------------------------------------
# Degenerate answers
# ---------------------------------------------------------------------------------------------------------

# A word of 4+ letters glued to itself ("thyroidthyroid"), a run of 3+ digits glued to a word ("33773thyroid",
# "thyroid33773"), or a digit, a letter and a run of digits ("6A773"). Ordinary answers have none of these:
# "BI-RADS 4A", "C7", "85 px", "120 ml" and "12.3 x 8.1 mm" pass.
_GARBLE_RES = (
    (re.compile(r"([A-Za-z]{4,})\1", re.I), "a word glued to itself"),
    (re.compile(r"\d{3,}[A-Za-z]{3,}|[A-Za-z]{3,}\d{3,}"), "letters glued to a run of digits"),
    (re.compile(r"\d[A-Za-z]\d{3,}"), "letters glued to a run of digits"),
)


def degenerate(parsed: ParseResult) -> str | None:
    """Why a parsed reply is not an answer (the model produced token soup), or None when it reads as one.

    Why: a degenerate reply ("...33773thyroidthyroid6A773" after its mask tokens) still parses into objects,
    and a mask without a readable label became a label map with a segment named "object 1". Such text is not
    a result, whatever the parser could pull out of it; the Predictor keeps none of its objects. The test is on
    the plain answer and the object labels, the text a reader sees, never on coordinates."""
    for where, text in [("answer", parsed.answer)] + [("label", o.label) for o in parsed.objects if o.label]:
        for pattern, what in _GARBLE_RES:
            m = pattern.search(text)
            if m:
                return f"{what} in the {where} ({m.group(0)!r})"
    return None
