"""Synthetic examinations: several views of ONE scene, with an exam-level report whose sizes come from the views.

Sonographers report examinations, not frames: a breast lesion in its radial and anti-radial planes, a thyroid
nodule in its lobe's longitudinal and transverse planes plus the other lobe, a kidney in longitudinal and
transverse section, a fetal biometry set (the transthalamic head for BPD and HC, the femur for FL). Each view is
rendered by the single-image generator (`synthetic.render_scene`, the same probe, speckle and exact masks), from
its own random stream; what ties the views together is the anatomy in millimetres, drawn once per examination:

* a lesion is an ellipsoid with a length, a width (at most its length) and a depth; the first plane cuts it
  along its length, the second across it, both showing the same depth;
* a kidney has a length, a width and a depth; the longitudinal view shows length x depth, the transverse one
  width x depth;
* a fetus has one BPD; the femur length follows from it (FL ~ 0.72 .. 0.82 BPD, as in growth charts).

What each plane shows of a lesion is not always the same: a malignant lesion's suspicious margin (spiculated,
irregular, microlobulated) and its echogenic foci show in each of its two planes with probability
SIGN_VISIBILITY, and in at least one; a plane that misses them shows a benign-looking margin (the tissue's
echogenicity, shadowing and texture are the lesion's own in both). Spiculation and microcalcifications are often
seen in one plane only, which is why a lesion is scanned in two and why the examination, not the frame, is
classified. (What the demo models make of it: benchmarks/results/exam_continuation/NOTES.md.)

The exam report reads its sizes off the views' calipers (what a sonographer does), so it agrees with the masks
even when a view had to shrink a structure to fit the scan. Everything is a pure function of
``(seed, site, n_views, size, appearance)``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from . import synthetic as syn
from .manifest import MIN_EXAM_VIEWS
from .synthetic import SITES, SyntheticError, SyntheticSample, appearance_of, render_scene

__all__ = ["EXAM_VIEWS", "DEFAULT_VIEWS", "ExamSample", "generate_exam", "exam_record",
           "write_exam_dataset"]

#: the views an examination of each site can hold, in the order they are taken; n_views takes the first n.
#: Thyroid names are filled with the side of the nodule's lobe ("{side}") and the other lobe ("{other}").
EXAM_VIEWS: dict[str, tuple[str, ...]] = {
    "breast": ("radial", "anti-radial"),
    "thyroid": ("{side} lobe longitudinal", "{side} lobe transverse", "{other} lobe transverse",
                "{other} lobe longitudinal"),
    "kidney": ("longitudinal", "transverse"),
    "fetal_head": ("transthalamic", "femur"),
}
#: how many views an examination of each site has when n_views is not given
DEFAULT_VIEWS: dict[str, int] = {"breast": 2, "thyroid": 3, "kidney": 2, "fetal_head": 2}


@dataclass
class ExamSample:
    """One examination: its views (single-image samples, each with its own spacing and objects; their
    single-view report is not the exam's) and the exam-level finding, report and measurements."""
    seed: int
    site: str
    views: list[SyntheticSample]
    view_names: list[str]
    diagnosis: str | None
    report: str
    measurements: dict[str, float] = field(default_factory=dict)


@dataclass
class _Plan:
    """The anatomy of one examination in millimetres, shared by its views."""
    kind: str
    lesion: syn._LesionPlan | None = None
    dims_mm: tuple[float, float, float] = (0.0, 0.0, 0.0)  # length, width, depth of the lesion or the kidney
    side: int = 1  # thyroid: +1 = the nodule's lobe is the right one
    #: per lesion plane (first, second): None = the lesion's own margin and foci, else the benign-looking margin
    #: that plane shows instead, without foci (`_plane_margins`)
    plane_margins: tuple[str | None, str | None] = (None, None)


def _check(seed, site, n_views, size) -> None:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise SyntheticError(f"seed must be a non-negative integer, got {seed!r}")
    if site is not None and site not in SITES:
        raise SyntheticError(f"site {site!r} is not one of {SITES}")
    if n_views is not None and (isinstance(n_views, bool) or not isinstance(n_views, (int, np.integer))
                                or n_views < MIN_EXAM_VIEWS):
        raise SyntheticError(f"n_views must be an integer of at least {MIN_EXAM_VIEWS} (an examination has several "
                             f"views), got {n_views!r}")
    syn._check_args(int(seed) if isinstance(seed, (int, np.integer)) else 0, site, size, None, None)


def _plan(rng: np.random.Generator, site: str, kind: str) -> _Plan:
    """The examination's anatomy: a lesion ellipsoid (length >= width), or a kidney's three diameters."""
    if site in ("breast", "thyroid") and kind != "normal":
        lesion = syn._plan_lesion(rng, site, kind)
        lesion.traits["angle"] = float(np.clip(lesion.traits["angle"], -0.2, 0.2))  # depth stays vertical
        length, depth = lesion.extent_mm()
        width = length * float(rng.uniform(0.6, 0.95))
        return _Plan(kind, lesion, (length, width, depth), 1 if rng.random() < 0.5 else -1)
    if site == "kidney":
        length = float(rng.uniform(90.0, 125.0))
        return _Plan(kind, None, (length, length * float(rng.uniform(0.45, 0.6)),
                                  length * float(rng.uniform(0.42, 0.55))))
    return _Plan(kind, None, (0.0, 0.0, 0.0), 1 if rng.random() < 0.5 else -1)


#: the chance that each plane of a malignant lesion shows its suspicious margin and foci (at least one does)
SIGN_VISIBILITY = 0.5


def _plane_margins(rng: np.random.Generator, plan: _Plan) -> tuple[str | None, str | None]:
    """Which of a malignant lesion's two planes miss its signs, and the margin such a plane shows instead."""
    if plan.lesion is None or plan.kind != "malignant":
        return (None, None)
    shows = [bool(rng.random() < SIGN_VISIBILITY) for _ in range(2)]
    if not any(shows):
        shows[int(rng.integers(2))] = True
    return tuple(None if shown else str(rng.choice(["circumscribed", "lobulated"], p=[0.6, 0.4]))
                 for shown in shows)


def _cut(lesion: syn._LesionPlan, across_mm: float, depth_mm: float, margin: str | None = None) -> syn._LesionPlan:
    """The lesion as one plane shows it: `across_mm` wide and `depth_mm` deep; with `margin`, that margin and no
    foci (a plane that misses the lesion's signs), else its own traits."""
    traits = dict(lesion.traits, aspect=depth_mm / across_mm)
    if margin is not None:
        traits.update(margin=margin, calc=0)
    return syn._LesionPlan(lesion.kind, traits, max(across_mm, depth_mm))


def generate_exam(seed: int, site: str | None = None, n_views: int | None = None, size: int = 256,
                  appearance: str | syn.Appearance | None = None) -> ExamSample:
    """One synthetic examination of `n_views` views (the site's usual set when None), a pure function of
    its arguments. The site and finding are drawn as `synthetic.generate` draws them when not given; one
    scanner look (`appearance`) renders every view."""
    _check(seed, site, n_views, size)
    seed, size = int(seed), int(size)
    choice = np.random.default_rng([seed, 11])
    site = site or str(SITES[int(choice.integers(len(SITES)))])
    n = DEFAULT_VIEWS[site] if n_views is None else int(n_views)
    if n > len(EXAM_VIEWS[site]):
        raise SyntheticError(f"a {site} examination has at most {len(EXAM_VIEWS[site])} views, got n_views={n}")
    options = syn.FINDINGS[site]
    weights = np.array([syn._FINDING_WEIGHTS[f] for f in options])
    kind = str(options[int(choice.choice(len(options), p=weights / weights.sum()))])
    plan = _plan(np.random.default_rng([seed, 12]), site, kind)
    plan.plane_margins = _plane_margins(np.random.default_rng([seed, 13]), plan)
    look = appearance_of(appearance, seed)
    geometry = look.geometry_for(site)
    views = []
    for v in range(n):
        scene = _VIEW_SCENES[site](plan, v, views)
        views.append(render_scene(np.random.default_rng([seed, 20 + v]), seed, site, size, geometry, look, scene))
    names = [name.format(side=_side(plan.side), other=_side(-plan.side)) for name in EXAM_VIEWS[site][:n]]
    report, measurements = _REPORTS[site](plan, views, names)
    diagnosis = syn._diagnosis_of(kind)
    return ExamSample(seed, site, views, names, diagnosis, report, measurements)


def _side(side: int) -> str:
    return "right" if side == 1 else "left"


# ------------------------------------------------------------------------------------------------- scenes

def _breast_view(plan: _Plan, v: int, done: list) -> syn.SceneFn:
    """Radial plane (v=0): the lesion's length x depth; anti-radial (v=1): its width x depth."""
    lesion = None if plan.lesion is None else _cut(plan.lesion, plan.dims_mm[v], plan.dims_mm[2],
                                                   plan.plane_margins[v])
    return lambda rng, probe, s, px, inner: syn._breast(rng, probe, s, plan.kind, px, inner, plan=lesion)


def _thyroid_view(plan: _Plan, v: int, done: list) -> syn.SceneFn:
    """0: nodule lobe longitudinal, 1: nodule lobe transverse, 2: other lobe transverse, 3: other longitudinal."""
    own = v < 2
    kind = plan.kind if own else "normal"
    lesion = None
    if plan.lesion is not None and own:
        # v=0 shows the length, v=1 the width
        lesion = _cut(plan.lesion, plan.dims_mm[v], plan.dims_mm[2], plan.plane_margins[v])
    side = plan.side if own else -plan.side
    if v in (1, 2):
        return lambda rng, probe, s, px, inner: syn._thyroid(rng, probe, s, kind, px, inner, plan=lesion, side=side)
    return lambda rng, probe, s, px, inner: _thyroid_longitudinal(rng, probe, s, kind, px, inner, lesion, side)


def _thyroid_longitudinal(rng, probe, s: float, kind: str, pixels, inner, lesion, side: int) -> syn._Scene:
    """A lobe cut along its length (40-55 mm long, no trachea or carotid in this plane), its nodule inside."""
    mm = lambda val: val / s  # noqa: E731
    layers, strap = syn._skin_layers(rng, probe.size, mm, (1.2, 2.0), (2.0, 4.0), (3.0, 6.0))
    layers.append(syn._Layer(syn._Band(strap, None), 0.7, 0.5, texture=syn._Noise.random(rng, probe.size, 16, 10),
                             texture_var=0.4))
    a_l, b_l = mm(syn._u(rng, 20.0, 27.0)), mm(syn._u(rng, 6.5, 9.5))
    if lesion is not None:
        w, h = lesion.extent_mm()
        a_l, b_l = max(a_l, mm(0.65 * w + 2.0)), max(b_l, mm(0.65 * h + 2.0))
    depth = strap.base + b_l + mm(syn._u(rng, 0.5, 1.5))
    lobe = syn._place_organ(rng, pixels, inner, lambda scale: syn._Ellipse(
        *probe.point(depth, 0.5 + syn._u(rng, -0.05, 0.05)), a_l * scale, b_l * scale, syn._u(rng, -0.1, 0.1)))
    layers.append(syn._Layer(lobe, 1.25, 0.7, texture=syn._Noise.random(rng, probe.size, 5, 4), texture_var=0.25))
    lobe_obj = ("thyroid", lobe, [], [], None)
    if lesion is None:
        return syn._Scene(layers, [lobe_obj], "normal", "", {})

    def region(w, h):
        rx, ry = max(lobe.a - w / 2 - mm(1), 0.0), max(lobe.b - h / 2 - mm(1), 0.0)
        return lobe.axis(syn._u(rng, -rx, rx) * 0.6, syn._u(rng, -ry, ry) * 0.6)
    placed, mask = syn._place_lesion(rng, lesion, mm, pixels, inner, region)
    layers += syn._lesion_layers(rng, placed, probe.size, mm)
    label = "cyst" if kind == "cyst" else syn.LESION_LABEL["thyroid"]
    calipers = syn._calipers(mask, s, label)
    return syn._Scene(layers, [(label, placed.shape, [], calipers, syn._diagnosis_of(kind)), lobe_obj],
                      syn._diagnosis_of(kind), "", {})


def _kidney_view(plan: _Plan, v: int, done: list) -> syn.SceneFn:
    length, width, depth = plan.dims_mm
    if v == 0:
        return lambda rng, probe, s, px, inner: syn._kidney(rng, probe, s, "normal", px, inner,
                                                            dims=(length, depth / length))
    return lambda rng, probe, s, px, inner: _kidney_transverse(rng, probe, s, px, inner, width, depth)


def _kidney_transverse(rng, probe, s: float, pixels, inner, width_mm: float, depth_mm: float) -> syn._Scene:
    """The kidney in cross-section: width x depth, the renal sinus opening to the hilum on one side."""
    mm = lambda val: val / s  # noqa: E731
    layers, wall = syn._skin_layers(rng, probe.size, mm, (1.5, 2.5), (4.0, 15.0), (4.0, 10.0))
    layers.append(syn._Layer(syn._Band(wall, None), 0.95, 0.6, texture=syn._Noise.random(rng, probe.size, 8, 8),
                             texture_var=0.3))
    kid = syn._place_organ(rng, pixels, inner, lambda scale: syn._Ellipse(
        *probe.point(probe.depth_px * syn._u(rng, 0.45, 0.6), syn._u(rng, 0.4, 0.6)),
        mm(width_mm * scale) / 2, mm(depth_mm * scale) / 2, syn._u(rng, -0.2, 0.2)))
    fat_pad = mm(syn._u(rng, 3.0, 6.0))
    hilum = 1 if rng.random() < 0.5 else -1
    sx, sy = kid.axis(hilum * 0.3 * kid.a)
    sinus = syn._Ellipse(sx, sy, kid.a * syn._u(rng, 0.4, 0.5), kid.b * syn._u(rng, 0.35, 0.45), kid.angle)
    layers += [
        syn._Layer(kid.scaled(fat_pad, fat_pad), 1.35, 0.7, texture=syn._Noise.random(rng, probe.size, 6, 6),
                   texture_var=0.3),
        syn._Layer(kid, 1.7, 0.9),
        syn._Layer(kid.scaled(-mm(0.8), -mm(0.8)), 0.45, 0.55, texture=syn._Noise.random(rng, probe.size, 6, 6),
                   texture_var=0.2),
        syn._Layer(syn._margin_shape(rng, sinus, "irregular"), 1.55, 0.75,
                   texture=syn._Noise.random(rng, probe.size, 5, 5), texture_var=0.4),
    ]
    lines = [_axis_line(kid, kid.a, 0.0, "kidney width", s), _axis_line(kid, 0.0, kid.b, "kidney AP", s)]
    return syn._Scene(layers, [("kidney", kid, [], lines, "normal")], "normal", "", {})


def _axis_line(ell, da: float, db: float, name: str, s: float):
    """A caliper across an ellipse through its centre along (da, db) in its own frame, left end first."""
    p, q = ell.axis(da, db), ell.axis(-da, -db)
    p, q = (p, q) if (p[0], p[1]) <= (q[0], q[1]) else (q, p)
    coords = (round(p[0], 2), round(p[1], 2), round(q[0], 2), round(q[1], 2))
    return name, coords, syn._length_mm(*coords, s)


def _fetal_view(plan: _Plan, v: int, done: list) -> syn.SceneFn:
    if v == 0:
        return lambda rng, probe, s, px, inner: syn._fetal_head(rng, probe, s, "normal", px, inner)
    bpd = done[0].measurements["BPD mm"]
    return lambda rng, probe, s, px, inner: _femur(rng, probe, s, px, inner, bpd)


def _femur(rng, probe, s: float, pixels, inner, bpd_mm: float) -> syn._Scene:
    """The femur in amniotic fluid: a bright bone shaft that shadows, in the soft tissue of the thigh; FL is
    measured end to end along the shaft (0.72 .. 0.82 of the BPD)."""
    mm = lambda val: val / s  # noqa: E731
    layers, wall = syn._skin_layers(rng, probe.size, mm, (1.5, 2.5), (3.0, 12.0), (4.0, 8.0))
    uterus = syn._Wave.random(rng, wall.base + mm(syn._u(rng, 4.0, 10.0)), mm(1.0), mm(50))
    layers += [
        syn._Layer(syn._Band(wall, uterus), 0.8, 0.6, texture=syn._Noise.random(rng, probe.size, 10, 6),
                   texture_var=0.3),
        syn._Layer(syn._Band(uterus, None), 0.03, 0.25, atten_db=-0.8 * 30.0 / (2 * probe.depth_px)),
    ]
    fl_mm = bpd_mm * syn._u(rng, 0.72, 0.82)
    half, tilt = mm(fl_mm) / 2, syn._u(rng, -0.25, 0.25)
    thigh = syn._place_organ(rng, pixels, inner, lambda scale: syn._Ellipse(
        *probe.point(syn._u(rng, uterus.base + mm(15), max(uterus.base + mm(15), probe.depth_px * 0.7)),
                     syn._u(rng, 0.4, 0.6)), half * scale + mm(6), mm(syn._u(rng, 7.0, 10.0)), tilt))
    a = thigh.a - mm(6)
    (x1, y1), (x2, y2) = thigh.axis(-a), thigh.axis(a)
    t = max(mm(syn._u(rng, 1.2, 2.0)), 0.8)
    bone = syn._Segment(x1, y1, x2, y2, t)
    layers += [syn._Layer(thigh, 0.55, 0.6, texture=syn._Noise.random(rng, probe.size, 6, 6), texture_var=0.3),
               syn._Layer(bone, 3.5, 1.0, atten_db=syn._u(rng, 8.0, 12.0) / (2 * t))]
    p, q = ((x1, y1), (x2, y2)) if (x1, y1) <= (x2, y2) else ((x2, y2), (x1, y1))
    coords = (round(p[0], 2), round(p[1], 2), round(q[0], 2), round(q[1], 2))
    fl = syn._length_mm(*coords, s)
    obj = ("fetal femur", bone, [("femur end 1", coords[:2]), ("femur end 2", coords[2:])],
           [("FL", coords, fl)], "normal")
    return syn._Scene(layers, [obj], "normal", "", {"FL mm": fl})


_VIEW_SCENES = {"breast": _breast_view, "thyroid": _thyroid_view, "kidney": _kidney_view, "fetal_head": _fetal_view}


# ------------------------------------------------------------------------------------------------ reports

_FINDING_RE = re.compile(r"Finding: (.+?)\. (?:Size|Impression|Length|BPD)")
_IMPRESSION_RE = re.compile(r"Impression: (.+?)\.$")


def _split(axes) -> tuple[float, float]:
    """(across, depth) of a view's two calipers: the more horizontal one is across, the other the depth."""
    def flat(line):
        x1, y1, x2, y2 = line[1]
        return abs(x2 - x1) >= abs(y2 - y1)
    across = next((ln for ln in axes if flat(ln)), axes[0])
    depth = next((ln for ln in axes if ln is not across), axes[-1])
    return across[2], depth[2]


def _lesion_of(view: SyntheticSample):
    return next((o for o in view.objects if o.lines and o.label != "thyroid"), None)


def _lesion_report(plan: _Plan, views: list[SyntheticSample], names: list[str]) -> tuple[str, dict[str, float]]:
    """Breast and thyroid: finding and impression of the first plane, size as length x width x depth from the
    two planes (the across caliper of each, the depth of the first)."""
    site = views[0].site
    listed = "; ".join(f"{i + 1} {n}" for i, n in enumerate(names))
    if plan.lesion is None:
        where = "either lobe" if site == "thyroid" else "either plane"
        impression = "normal thyroid" if site == "thyroid" else "negative (BI-RADS 1)"
        return (f"Site: {site}. Views: {listed}. Finding: no focal lesion in {where}. "
                f"Impression: {impression}.", {})
    first, second = _lesion_of(views[0]), _lesion_of(views[1])
    length, depth = _split(first.lines)
    width, _ = _split(second.lines)
    worded = 1 if site == "thyroid" else 0  # the transverse thyroid view has words
    finding = _exam_signs(_finding_words(site, plan, views[worded].report), plan, plan.plane_margins[worded])
    impression = _impression(site, plan.kind)
    report = (f"Site: {site}. Views: {listed}. Finding: {finding}. Size: {length:.1f} x {width:.1f} x "
              f"{depth:.1f} mm (length x width x depth). Impression: {impression}.")
    return report, {"lesion length mm": length, "lesion width mm": width, "lesion depth mm": depth}


def _finding_words(site: str, plan: _Plan, report: str) -> str:
    m = _FINDING_RE.search(report)
    if m:
        return m.group(1)
    noun = "cyst" if plan.kind == "cyst" else ("mass" if site == "breast" else "nodule")
    return f"{noun} in the {_side(plan.side)} lobe" if site == "thyroid" else noun


def _exam_signs(finding: str, plan: _Plan, shown_margin: str | None) -> str:
    """The finding as the examination reports it: the lesion's own margin and foci, where the worded plane
    showed a benign-looking margin (`shown_margin`) instead (a report names the worst sign any plane shows)."""
    if shown_margin is None:
        return finding
    traits = plan.lesion.traits
    finding = finding.replace(syn.MARGIN_WORDS[shown_margin], syn.MARGIN_WORDS[traits["margin"]])
    if traits["margin"] in ("irregular", "spiculated"):
        finding = re.sub(r"\b(oval|round)\b", "irregular", finding, count=1)
    if traits["calc"] and "punctate echogenic foci" not in finding:
        finding += ", punctate echogenic foci"
    return finding


def _impression(site: str, kind: str) -> str:
    if kind == "cyst":
        return "simple cyst, benign (BI-RADS 2)" if site == "breast" else "purely cystic nodule, benign (TI-RADS 1)"
    scale = "BI-RADS" if site == "breast" else "TI-RADS"
    if kind == "malignant":
        return f"suspicious for malignancy ({scale} 4-5)"
    return "probably benign (BI-RADS 3)" if site == "breast" else "likely benign (TI-RADS 2-3)"


def _kidney_report(plan: _Plan, views: list[SyntheticSample], names: list[str]) -> tuple[str, dict[str, float]]:
    length = views[0].measurements["kidney length mm"]
    lines = {ln[0]: ln[2] for ln in views[1].objects[0].lines}
    width, ap = lines["kidney width"], lines["kidney AP"]
    listed = "; ".join(f"{i + 1} {n}" for i, n in enumerate(names))
    report = (f"Site: kidney. Views: {listed}. Finding: cortex hypoechoic to liver, corticomedullary "
              f"differentiation preserved, echogenic renal sinus, no hydronephrosis. Size: {length:.1f} x "
              f"{width:.1f} x {ap:.1f} mm (length x width x depth). Impression: normal kidney.")
    return report, {"kidney length mm": length, "kidney width mm": width, "kidney AP mm": ap}


def _fetal_report(plan: _Plan, views: list[SyntheticSample], names: list[str]) -> tuple[str, dict[str, float]]:
    head = views[0].measurements
    fl = views[1].measurements["FL mm"]
    listed = "; ".join(f"{i + 1} {n}" for i, n in enumerate(names))
    report = (f"Site: fetal head. Views: {listed}. Finding: intact elliptical skull with central midline echo; "
              f"femur diaphysis straight and ossified. BPD: {head['BPD mm']:.1f} mm. HC: {head['HC mm']:.1f} mm. "
              f"FL: {fl:.1f} mm. FL/BPD: {fl / head['BPD mm']:.2f}. Impression: fetal biometry recorded.")
    return report, {"BPD mm": head["BPD mm"], "HC mm": head["HC mm"], "OFD mm": head["OFD mm"], "FL mm": fl}


_REPORTS = {"breast": _lesion_report, "thyroid": _lesion_report, "kidney": _kidney_report,
            "fetal_head": _fetal_report}


# ------------------------------------------------------------------------------------------------ writing

def exam_record(exam: ExamSample, out: Path, size: int, appearance: str | None = None):
    """Write the examination's views like single images (``images/exam-<seed>_v<k>.png`` and their masks) and
    return its Record of views (paths relative to ``out``), conversations left for the conversation builder."""
    from .manifest import Annotations, Record, View, save_synthetic_view

    eid = f"exam-{exam.seed:06d}"
    views = []
    for k, (view, name) in enumerate(zip(exam.views, exam.view_names), start=1):
        image_rel, scan_rel, objects = save_synthetic_view(view, out, f"{eid}_v{k}")
        views.append(View(image=image_rel, spacing=tuple(float(v) for v in view.spacing), site=exam.site,
                          scan_mask=scan_rel, name=name, annotations=Annotations(objects),
                          extra={"geometry": view.geometry}))
    return Record(id=eid, views=views, site=exam.site,
                  annotations=Annotations([], exam.diagnosis, exam.report, dict(exam.measurements)),
                  extra={"source": {"generator": "umind synthetic exam", "seed": exam.seed, "size": size,
                                    "appearance": appearance or "default"}}, root=out)


def write_exam_dataset(out_dir: str | os.PathLike, n: int, seed0: int = 0, sites: Sequence[str] | None = None,
                       size: int = 256, appearance: str | None = None) -> Path:
    """Write `n` synthetic examinations (seeds ``seed0..``) as images/, masks/ and manifest.jsonl; returns the
    manifest path. Sites cycle through `sites`; each examination has its site's usual views (DEFAULT_VIEWS)."""
    from .manifest import write_manifest

    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    (out / "masks").mkdir(parents=True, exist_ok=True)
    sites = tuple(SITES if sites is None else sites)
    if not sites or any(s not in SITES for s in sites):
        raise SyntheticError(f"sites must be a non-empty selection of {SITES}, got {sites!r}")
    records = [exam_record(generate_exam(seed0 + i, sites[i % len(sites)], size=size, appearance=appearance),
                           out, size, appearance) for i in range(int(n))]
    return write_manifest(records, out / "manifest.jsonl")
