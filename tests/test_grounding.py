"""Tests of the grounding grammar: exact formats, round trips, a parser that never raises, and conversions."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from umind_core.answers import grounding as g
from umind_core.answers.grounding import (
    BOX_END,
    BOX_START,
    GRID,
    GROUNDING_TOKENS,
    LINE_END,
    LINE_START,
    NUM_MASK_TOKENS,
    POINT_END,
    POINT_START,
    REF_END,
    REF_START,
    SEG_MASK,
    Box,
    GroundedSpan,
    GroundingError,
    Line,
    MaskRef,
    ParseResult,
    Point,
    format_box,
    format_line,
    format_mask,
    format_object,
    format_objects,
    format_point,
    format_ref,
    from_grid,
    parse,
    to_grid,
)

SETTINGS = settings(max_examples=200, deadline=None)


def has_warning(result: ParseResult, fragment: str) -> bool:
    return any(fragment in w for w in result.warnings)


def geometry(span: GroundedSpan) -> tuple:
    return (span.label, span.boxes, span.points, span.lines, span.masks)


# ------------------------------------------------------------------------------------------------ vocabulary


def test_token_vocabulary_and_order():
    assert GROUNDING_TOKENS == (
        "<|box_start|>",
        "<|box_end|>",
        "<|point_start|>",
        "<|point_end|>",
        "<|line_start|>",
        "<|line_end|>",
        "<|seg_mask|>",
        "<|object_ref_start|>",
        "<|object_ref_end|>",
    )
    assert NUM_MASK_TOKENS == 16 and GRID == 1000
    assert issubclass(GroundingError, ValueError)


# ------------------------------------------------------------------------------------------------ formatting


def test_exact_formats():
    assert format_ref("thyroid nodule") == f"{REF_START}thyroid nodule{REF_END}"
    assert format_ref("  cyst \n") == f"{REF_START}cyst{REF_END}"
    assert format_box(Box(1, 2, 3, 4)) == f"{BOX_START}(1,2),(3,4){BOX_END}"
    assert format_box(Box(0, 0, 1000, 1000), "nodule") == (
        f"{REF_START}nodule{REF_END}{BOX_START}(0,0),(1000,1000){BOX_END}"
    )
    assert format_point(Point(5, 6), "apex") == f"{REF_START}apex{REF_END}{POINT_START}(5,6){POINT_END}"
    assert format_line(Line(9, 8, 7, 6)) == f"{LINE_START}(9,8),(7,6){LINE_END}"
    assert format_mask() == SEG_MASK * NUM_MASK_TOKENS
    assert format_mask("liver", n_tokens=3) == f"{REF_START}liver{REF_END}" + SEG_MASK * 3


def test_format_object_writes_ref_once_then_primitives_in_order():
    span = GroundedSpan(
        "kidney",
        boxes=[Box(1, 1, 2, 2)],
        points=[Point(3, 3)],
        lines=[Line(4, 4, 5, 5)],
        masks=[MaskRef(0, NUM_MASK_TOKENS)],
    )
    text = format_object(span)
    assert text.count(REF_START) == 1
    assert text == (
        format_ref("kidney")
        + format_box(Box(1, 1, 2, 2))
        + format_point(Point(3, 3))
        + format_line(Line(4, 4, 5, 5))
        + format_mask()
    )
    assert format_objects([span, GroundedSpan("a")], sep="\n") == text + "\n" + format_ref("a")


@pytest.mark.parametrize(
    "call",
    [
        lambda: format_box(Box(-1, 0, 5, 5)),
        lambda: format_box(Box(0, 0, 1001, 5)),
        lambda: format_box(Box(0, 0, 5.0, 5)),  # type: ignore[arg-type]
        lambda: format_box(Box(0, True, 5, 5)),  # type: ignore[arg-type]
        lambda: format_box(Box(10, 0, 5, 5)),  # corners out of order
        lambda: format_box((0, 0, 5, 5)),  # type: ignore[arg-type]
        lambda: format_point(Point(0, 2000)),
        lambda: format_point(Point("1", 2)),  # type: ignore[arg-type]
        lambda: format_line(Line(0, 0, 0, -3)),
        lambda: format_ref(""),
        lambda: format_ref("   "),
        lambda: format_ref(3),  # type: ignore[arg-type]
        lambda: format_ref(f"bad{BOX_START}label"),
        lambda: format_box(Box(1, 1, 2, 2), label=f"x{REF_END}"),
        lambda: format_mask(n_tokens=0),
        lambda: format_mask(n_tokens=2.5),  # type: ignore[arg-type]
        lambda: format_object(GroundedSpan("a", masks=[MaskRef(0, NUM_MASK_TOKENS + 1)])),
        lambda: format_object("not a span"),  # type: ignore[arg-type]
        lambda: format_objects([GroundedSpan("a")], sep=None),  # type: ignore[arg-type]
    ],
)
def test_format_rejects_bad_input(call):
    with pytest.raises(GroundingError):
        call()


def test_format_error_names_the_input():
    with pytest.raises(GroundingError, match=r"box\.x2=1001"):
        format_box(Box(0, 0, 1001, 5))


def test_format_accepts_numpy_integers():
    np = pytest.importorskip("numpy")
    assert format_point(Point(np.int64(3), np.int32(4))) == f"{POINT_START}(3,4){POINT_END}"


# ------------------------------------------------------------------------------------------------ round trips

coord = st.integers(0, GRID)
boxes = st.tuples(coord, coord, coord, coord).map(
    lambda t: Box(min(t[0], t[2]), min(t[1], t[3]), max(t[0], t[2]), max(t[1], t[3]))
)
points = st.builds(Point, coord, coord)
lines = st.builds(Line, coord, coord, coord, coord)
labels = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC0123456789 -_/", min_size=1, max_size=20).filter(
    lambda s: s.strip() != ""
)


@st.composite
def spans(draw, label=labels, mask_sizes=st.just(NUM_MASK_TOKENS)):
    n_masks = draw(st.integers(0, 3))
    return GroundedSpan(
        draw(label),
        boxes=draw(st.lists(boxes, max_size=3)),
        points=draw(st.lists(points, max_size=3)),
        lines=draw(st.lists(lines, max_size=3)),
        masks=[MaskRef(0, draw(mask_sizes)) for _ in range(n_masks)],
    )


def renumbered(objs: list[GroundedSpan]) -> list[tuple]:
    """Expected geometry: labels stripped, mask indices counted through the whole text."""
    out, index = [], 0
    for o in objs:
        masks = []
        for m in o.masks:
            masks.append(MaskRef(index, m.n_tokens))
            index += 1
        out.append((o.label.strip() if o.label else o.label, o.boxes, o.points, o.lines, masks))
    return out


@SETTINGS
@given(spans())
@example(GroundedSpan("0  0"))  # found by CI: a run of spaces inside a label
def test_round_trip_one_object(span):
    text = format_object(span)
    result = parse(text)
    assert result.warnings == []
    assert [geometry(o) for o in result.objects] == renumbered([span])
    assert result.mask_groups == len(span.masks)
    assert result.objects[0].char_span == (0, len(text))
    assert result.answer == " ".join(span.label.split())  # the readable answer collapses runs of spaces


@SETTINGS
@given(st.lists(spans(), min_size=1, max_size=4), st.sampled_from([" ", "", "\n", " and then "]))
def test_round_trip_many_objects(objs, sep):
    result = parse(format_objects(objs, sep=sep))
    assert result.warnings == []
    assert [geometry(o) for o in result.objects] == renumbered(objs)
    assert result.mask_groups == sum(len(o.masks) for o in objs)


@SETTINGS
@given(spans(label=st.none()), st.lists(spans(), max_size=3))
def test_round_trip_unlabelled_object_first(first, rest):
    if not (first.boxes or first.points or first.lines or first.masks):
        first.boxes.append(Box(0, 0, 1, 1))
    result = parse(format_objects([first, *rest]))
    assert [geometry(o) for o in result.objects] == renumbered([first, *rest])


@SETTINGS
@given(spans(mask_sizes=st.integers(1, NUM_MASK_TOKENS)))
def test_round_trip_keeps_incomplete_mask_groups_apart(span):
    result = parse(format_object(span))
    assert [geometry(o) for o in result.objects] == renumbered([span])
    short = sum(m.n_tokens < NUM_MASK_TOKENS for m in span.masks)
    assert result.mask_groups == len(span.masks) - short
    assert has_warning(result, "incomplete mask group") == (short > 0)


# ------------------------------------------------------------------------------------------------ never raises

fragments = st.sampled_from(
    list(GROUNDING_TOKENS)
    + ["(", ")", ",", " ", "\n", "1", "23", "1000", "-5", "99999999999", "3.7", "a", "nodule"]
    + ["{", "}", "[", "]", ":", '"', '"bbox_2d"', '"point_2d"', '"line_2d"', '"label"', "```json", "```"]
    + ["<|", "<|box_sta", "\\u003c|box_start|>", "NaN", "Infinity"]
)
token_soup = st.lists(fragments, max_size=60).map("".join)


def check_invariants(text: str, result: ParseResult) -> None:
    assert isinstance(result, ParseResult)
    assert not has_warning(result, "internal parser error"), result.warnings
    assert not any(tok in result.answer for tok in GROUNDING_TOKENS)
    assert result.mask_groups == sum(m.n_tokens == NUM_MASK_TOKENS for o in result.objects for m in o.masks)
    indices = [m.index for o in result.objects for m in o.masks]
    assert sorted(indices) == list(range(len(indices)))
    starts = [o.char_span[0] for o in result.objects]
    assert starts == sorted(starts)
    for o in result.objects:
        assert 0 <= o.char_span[0] <= o.char_span[1] <= len(text)
        for b in o.boxes:
            assert 0 <= b.x1 <= b.x2 <= GRID and 0 <= b.y1 <= b.y2 <= GRID
        for p in o.points:
            assert 0 <= p.x <= GRID and 0 <= p.y <= GRID
        for ln in o.lines:
            assert all(0 <= v <= GRID for v in (ln.x1, ln.y1, ln.x2, ln.y2))
        assert all(1 <= m.n_tokens <= NUM_MASK_TOKENS for m in o.masks)
        assert o.label is None or (o.label == o.label.strip() and o.label)


@SETTINGS
@given(st.text())
def test_parse_never_raises_on_any_text(text):
    check_invariants(text, parse(text))


@SETTINGS
@given(token_soup)
def test_parse_never_raises_on_token_soup(text):
    check_invariants(text, parse(text))


@SETTINGS
@given(st.lists(spans(), max_size=3), st.integers(0, 400))
def test_parse_never_raises_on_truncated_output(objs, cut):
    text = "Findings: " + format_objects(objs)
    text = text[: min(cut, len(text))]
    check_invariants(text, parse(text))


def test_parse_rejects_non_str():
    with pytest.raises(GroundingError, match="str"):
        parse(b"<|box_start|>")  # type: ignore[arg-type]


def test_parse_survives_absurd_input():
    for text in ["[" * 5000 + '"bbox_2d": 1', "9" * 6000, f"{BOX_START}({'9' * 6000},1),(2,3){BOX_END}"]:
        check_invariants(text, parse(text))
    result = parse(f"{BOX_START}({'9' * 6000},1),(2,3){BOX_END}")
    assert result.objects[0].boxes == [Box(2, 1, 1000, 3)]


# ------------------------------------------------------------------------------------------------ specific rules


def test_answer_keeps_labels_as_plain_words():
    text = f"Found {REF_START}thyroid nodule{REF_END}{BOX_START}(1,2),(3,4){BOX_END}."
    result = parse(text)
    assert result.answer == "Found thyroid nodule."
    assert result.objects == [GroundedSpan("thyroid nodule", boxes=[Box(1, 2, 3, 4)], char_span=(6, len(text) - 1))]
    assert text[slice(*result.objects[0].char_span)].endswith(BOX_END)


def test_answer_tidies_whitespace_but_keeps_paragraphs():
    text = f"A  {POINT_START}(1,1){POINT_END} , b\n\n\n\n({REF_START} c {REF_END})  d"
    assert parse(text).answer == "A, b\n\n(c) d"


def test_label_binds_until_next_ref_even_across_text():
    text = (
        f"The {format_ref('nodule')} lies at {format_box(Box(1, 2, 3, 4))} with its centre "
        f"{format_point(Point(2, 3))}; the {format_ref('gland')}{format_mask()}"
    )
    result = parse(text)
    assert [geometry(o) for o in result.objects] == [
        ("nodule", [Box(1, 2, 3, 4)], [Point(2, 3)], [], []),
        ("gland", [], [], [], [MaskRef(0, NUM_MASK_TOKENS)]),
    ]
    assert result.answer == "The nodule lies at with its centre; the gland"


def test_unlabelled_primitives_group_in_runs_split_by_text():
    text = f"{format_box(Box(1, 1, 2, 2))} {format_point(Point(5, 5))} then {format_box(Box(3, 3, 4, 4))}"
    result = parse(text)
    assert [geometry(o) for o in result.objects] == [
        (None, [Box(1, 1, 2, 2)], [Point(5, 5)], [], []),
        (None, [Box(3, 3, 4, 4)], [], [], []),
    ]
    assert result.answer == "then"


def test_ref_without_primitives_is_still_an_object():
    result = parse(f"The {format_ref('liver')} looks normal.")
    assert [geometry(o) for o in result.objects] == [("liver", [], [], [], [])]
    assert result.answer == "The liver looks normal."


def test_coordinates_tolerate_spaces():
    result = parse(f"{BOX_START}( 12 , 40 ) , (300,  400 ){BOX_END}{POINT_START} (7,8) {POINT_END}")
    assert result.warnings == []
    assert result.objects[0].boxes == [Box(12, 40, 300, 400)]
    assert result.objects[0].points == [Point(7, 8)]


def test_box_corners_are_normalised_and_lines_keep_direction():
    result = parse(f"{BOX_START}(300,400),(12,40){BOX_END}{LINE_START}(300,400),(12,40){LINE_END}")
    assert result.objects[0].boxes == [Box(12, 40, 300, 400)]
    assert result.objects[0].lines == [Line(300, 400, 12, 40)]
    assert has_warning(result, "out of order")


def test_out_of_range_values_are_clipped_with_a_warning():
    result = parse(f"{POINT_START}(-5,1200){POINT_END}{LINE_START}(0,1000),(1001,3){LINE_END}")
    assert result.objects[0].points == [Point(0, 1000)]
    assert result.objects[0].lines == [Line(0, 1000, 1000, 3)]
    assert sum("clipped" in w for w in result.warnings) == 3


def test_malformed_but_readable_content_warns_and_reads():
    result = parse(f"{BOX_START}[10, 20, 30.6, 40]{BOX_END}{POINT_START}(1,2),(3,4){POINT_END}")
    assert result.objects[0].boxes == [Box(10, 20, 31, 40)]
    assert result.objects[0].points == [Point(1, 2)]
    assert sum("malformed" in w for w in result.warnings) == 2


@pytest.mark.parametrize(
    "text, expected, fragment",
    [
        (f"{BOX_START}(1,2),(3", [], "truncated box"),
        (f"{format_ref('n')}{BOX_START}(1,2),(3,4)", [("n", [Box(1, 2, 3, 4)], [], [], [])], "missing <|box_end|>"),
        (f"{BOX_START}(1,2),(3,4){POINT_END} x", [(None, [Box(1, 2, 3, 4)], [], [], [])], "stray <|point_end|>"),
        (f"{POINT_START}(5,6) is the apex", [(None, [], [Point(5, 6)], [], [])], "truncated point"),
        (f"{LINE_START}{format_ref('a')}", [("a", [], [], [], [])], "truncated line"),
        (f"Found {REF_START}thyroid nod", [("thyroid nod", [], [], [], [])], "unclosed object ref"),
        (f"{REF_START}cyst\nmore text", [("cyst", [], [], [], [])], "unclosed object ref"),
        (f"{REF_START}  {REF_END}{format_point(Point(1, 1))}", [(None, [], [Point(1, 1)], [], [])], "empty object ref"),
        (f"see {format_point(Point(1, 1))}<|box_sta", [(None, [], [Point(1, 1)], [], [])], "truncated token"),
        (f"a {REF_END} b", [], "stray <|object_ref_end|>"),
    ],
)
def test_truncated_and_malformed_spans(text, expected, fragment):
    result = parse(text)
    assert [geometry(o) for o in result.objects] == expected
    assert has_warning(result, fragment), result.warnings
    assert not any(tok in result.answer for tok in GROUNDING_TOKENS)


def test_truncated_primitive_keeps_the_words_after_it():
    result = parse(f"{POINT_START}(5,6) is the apex\nnext line")
    assert result.answer == "is the apex\nnext line"
    assert result.objects[0].char_span == (0, len(POINT_START) + len("(5,6)"))


# ------------------------------------------------------------------------------------------------ masks


@pytest.mark.parametrize(
    "run, sizes, complete, warns",
    [
        (16, [16], 1, False),
        (32, [16, 16], 2, False),
        (48, [16, 16, 16], 3, False),
        (5, [5], 0, True),
        (1, [1], 0, True),
        (20, [16, 4], 1, True),
    ],
)
def test_mask_group_counting(run, sizes, complete, warns):
    result = parse(f"{format_ref('lesion')}{SEG_MASK * run}")
    assert result.objects[0].masks == [MaskRef(i, n) for i, n in enumerate(sizes)]
    assert result.mask_groups == complete
    assert has_warning(result, "incomplete mask group") == warns


def test_mask_runs_are_split_by_anything_between_and_indexed_through_the_text():
    text = f"{format_mask('a')}{format_mask('b', n_tokens=3)} {format_mask()}x{format_mask('c')}"
    result = parse(text)
    assert [(o.label, o.masks) for o in result.objects] == [
        ("a", [MaskRef(0, 16)]),
        ("b", [MaskRef(1, 3), MaskRef(2, 16)]),
        ("c", [MaskRef(3, 16)]),
    ]
    assert result.mask_groups == 3


# ------------------------------------------------------------------------------------------------ JSON


def test_json_fenced_list():
    text = (
        "Detections:\n```json\n"
        '[{"bbox_2d": [10, 20, 300, 400], "label": "nodule"}, {"point_2d": [50, 60], "label": "apex"}]\n```'
    )
    result = parse(text)
    assert result.warnings == []
    assert [geometry(o) for o in result.objects] == [
        ("nodule", [Box(10, 20, 300, 400)], [], [], []),
        ("apex", [], [Point(50, 60)], [], []),
    ]
    assert text[slice(*result.objects[0].char_span)] == '{"bbox_2d": [10, 20, 300, 400], "label": "nodule"}'
    assert result.answer == "Detections:\nnodule, apex"


def test_json_unfenced_single_dict_and_line():
    result = parse('The diameter is {"line_2d": [100, 200, 300, 400], "label": "AP diameter"} long.')
    assert [geometry(o) for o in result.objects] == [("AP diameter", [], [], [Line(100, 200, 300, 400)], [])]
    assert result.answer == "The diameter is AP diameter long."


@pytest.mark.parametrize(
    "value, key, expected",
    [
        ("[[1, 2], [3, 4]]", "line_2d", [Line(1, 2, 3, 4)]),
        ("[[1, 2, 3, 4], [5, 6, 7, 8]]", "line_2d", [Line(1, 2, 3, 4), Line(5, 6, 7, 8)]),
        ("[[1, 2], [3, 4]]", "point_2d", [Point(1, 2), Point(3, 4)]),
        ("[[1, 2, 3, 4], [5, 6, 7, 8]]", "bbox_2d", [Box(1, 2, 3, 4), Box(5, 6, 7, 8)]),
        ("[30.4, 20.5, 10, 2000]", "bbox_2d", [Box(10, 21, 30, 1000)]),
    ],
)
def test_json_coordinate_shapes(value, key, expected):
    result = parse(f'{{"{key}": {value}}}')
    obj = result.objects[0]
    assert obj.label is None
    assert {"bbox_2d": obj.boxes, "point_2d": obj.points, "line_2d": obj.lines}[key] == expected


def test_json_clipping_and_reversed_box_warn():
    result = parse('{"bbox_2d": [30, 40, 10, 2000], "label": "x"}')
    assert result.objects[0].boxes == [Box(10, 40, 30, 1000)]
    assert has_warning(result, "clipped") and has_warning(result, "out of order")


def test_json_several_objects_mixed_with_markup_keep_text_order():
    text = f'{format_box(Box(1, 1, 2, 2), "first")} then [{{"point_2d": [5, 5], "label": "second"}}]'
    result = parse(text)
    assert [o.label for o in result.objects] == ["first", "second"]
    assert result.answer == "first then second"


@pytest.mark.parametrize(
    "text, fragment",
    [
        ('```json\n[{"bbox_2d": [1, 2, 3, 4] "label": "a"}]\n```', "invalid JSON in fenced block"),
        ('{"bbox_2d": [1, 2, 3, 4] "label": "a"}', "invalid JSON grounding"),
        ('{"bbox_2d": "here", "label": "a"}', "invalid JSON bbox_2d"),
        ('{"point_2d": [1, true], "label": "a"}', "invalid JSON point_2d"),
        ('```json\n{"bbox_2d": [1, 2, 3', "unterminated ```json block"),
    ],
)
def test_invalid_json_is_a_warning(text, fragment):
    result = parse(text)
    assert has_warning(result, fragment), result.warnings
    assert all(o.boxes == [] and o.points == [] for o in result.objects)


def test_truncated_json_list_salvages_complete_objects():
    text = 'Here: [{"bbox_2d": [10, 20, 300, 400], "label": "nodule"}, {"bbox_2d": [5,'
    result = parse(text)
    assert [geometry(o) for o in result.objects] == [("nodule", [Box(10, 20, 300, 400)], [], [], [])]
    assert has_warning(result, "invalid JSON")
    assert result.answer == "Here: nodule"


def test_json_without_grounding_keys_is_left_alone():
    text = 'Config: {"a": [1, 2]} and ```python\nprint(1)\n```'
    result = parse(text)
    assert result.objects == [] and result.warnings == []
    assert result.answer == text


def test_json_labels_cannot_smuggle_tokens_into_the_answer():
    result = parse('{"bbox_2d": [1, 2, 3, 4], "label": "a\\u003c|box_start|>b"}')
    assert result.objects[0].label == "a b"
    assert BOX_START not in result.answer


# ------------------------------------------------------------------------------------------------ conversion


def test_to_grid_edges_and_rounding():
    assert to_grid(0, 640) == 0
    assert to_grid(640, 640) == GRID
    assert to_grid(320, 640) == 500
    assert to_grid(-3, 640) == 0 and to_grid(10_000, 640) == GRID
    assert to_grid(1, 3) == 333 and to_grid(2, 3) == 667
    assert to_grid(1, 2000) == 1  # exactly 0.5 rounds half up, not to even
    assert to_grid(3, 2000) == 2  # 1.5 -> 2
    assert to_grid(0.9999, 2000) == 0  # 0.49995 -> 0
    assert to_grid(1e308, 1) == GRID


def test_from_grid_edges():
    assert from_grid(0, 640) == 0.0
    assert from_grid(GRID, 640) == 640.0
    assert from_grid(500, 333) == pytest.approx(166.5)
    assert from_grid(250.5, 1000) == pytest.approx(250.5)


@pytest.mark.parametrize(
    "call",
    [
        lambda: to_grid(1, 0),
        lambda: to_grid(1, -5),
        lambda: to_grid(float("nan"), 10),
        lambda: to_grid(1, float("inf")),
        lambda: to_grid(True, 10),
        lambda: to_grid("3", 10),  # type: ignore[arg-type]
        lambda: from_grid(10, 0),
        lambda: from_grid(float("inf"), 10),
        lambda: g.box_to_grid(0, 0, 1, 1, 0, 10),
    ],
)
def test_conversion_rejects_bad_input(call):
    with pytest.raises(GroundingError):
        call()


def test_shape_conversions():
    assert g.box_to_grid(320, 240, 0, 480, 640, 480) == Box(0, 500, 500, 1000)
    assert g.box_from_grid(Box(0, 500, 500, 1000), 640, 480) == (0.0, 240.0, 320.0, 480.0)
    assert g.point_to_grid(64, 48, 640, 480) == Point(100, 100)
    assert g.point_from_grid(Point(100, 100), 640, 480) == pytest.approx((64.0, 48.0))
    assert g.line_to_grid(640, 480, 0, 0, 640, 480) == Line(1000, 1000, 0, 0)
    assert g.line_from_grid(Line(1000, 1000, 0, 0), 640, 480) == (640.0, 480.0, 0.0, 0.0)


@SETTINGS
@given(st.floats(0, 4096, allow_nan=False), st.integers(1, 4096))
def test_grid_round_trip_is_within_half_a_cell(value, size):
    value = min(value, size)
    back = from_grid(to_grid(value, size), size)
    assert math.isclose(back, value, abs_tol=size / GRID / 2 + 1e-9)


# ------------------------------------------------------------------------------------------------ view markers

def test_each_object_takes_the_last_view_marker_before_it_in_any_case():
    text = (f"View 1: {format_box(Box(1, 2, 30, 40), 'nodule')} VIEW 2: {format_box(Box(5, 6, 50, 60), 'cyst')} "
            f"view 3 : {format_point(Point(7, 8), 'isthmus')}")
    assert [(o.label, o.view) for o in parse(text).objects] == [("nodule", 1), ("cyst", 2), ("isthmus", 3)]


def test_a_view_zero_marker_is_warned_about_and_assigns_no_view():
    res = parse(f"View 0: {format_box(Box(1, 2, 30, 40), 'nodule')}")
    assert [o.view for o in res.objects] == [None]
    assert any("views count from 1" in w for w in res.warnings)


def test_a_view_marker_inside_a_label_is_not_a_marker():
    text = f"View 1: {format_box(Box(1, 2, 30, 40), 'view 2: nodule')} {format_box(Box(5, 6, 50, 60), 'cyst')}"
    assert [o.view for o in parse(text).objects] == [1, 1]


# ------------------------------------------------------------------------------------------------ numbers

def test_a_number_too_long_to_convert_clips_to_its_own_side_of_the_grid():
    text = f"{BOX_START}(-123456789,5),(123456789,7){BOX_END}"
    (obj,) = parse(text).objects
    assert (obj.boxes[0].x1, obj.boxes[0].x2) == (0, GRID)


def test_format_box_refuses_corners_out_of_order_on_either_axis():
    for box in (Box(9, 1, 5, 4), Box(1, 9, 5, 4)):
        with pytest.raises(GroundingError, match="out of order"):
            format_box(box)


# ------------------------------------------------------------------------------------------------ token soup

@pytest.mark.parametrize("answer", ["size 6A773 mm", "6a7731"])
def test_a_digit_a_letter_and_three_digits_is_token_soup(answer):
    assert g.degenerate(parse(answer)) is not None

