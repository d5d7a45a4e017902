"""Synthetic B-mode ultrasound with exact annotations.

No public registry offers labelled ultrasound, so the demo model, the tests and the benchmarks train on
images made here. They are physically plausible rather than pretty: what matters is that the cues a
sonographer uses (shape, orientation, margin, echogenicity, posterior acoustic features, anatomy sizes)
are present, overlap between classes the way they do in practice, and are annotated exactly.

Pipeline for one image (all numpy, one core):

1. A probe: ``linear`` (rectangular footprint, beams are image columns) or ``sector`` (curvilinear fan,
   beams on a polar grid from a virtual apex above the image).
2. A scene: tissue layers that follow the skin line and compact structures (lesions, organs), each with a
   scatterer amplitude, a scatterer density and an extra attenuation. The scene is analytic, so it is
   evaluated on the beam grid for simulation and on the pixel grid for the masks: masks are exact.
3. Random point scatterers on the beam grid, weighted by two-way cumulative attenuation along each beam
   (this is what casts shadows behind solid lesions, the skull and air, and enhancement behind fluid).
4. Convolution with a point-spread function (Gaussian-modulated cosine axially, Gaussian laterally) and
   the Hilbert transform along depth in one pass: both are products in the 2-D FFT domain.
5. Electronic noise, time-gain compensation (nominal attenuation times an operator factor, plus slider
   wiggles), log compression over a dynamic range to 8 bits, and for the fan a bilinear scan conversion.

Coordinates: ``x`` is the column and ``y`` the row, pixel centres on integers (numpy index order swapped).
Boxes are inclusive pixel indices ``(x1, y1, x2, y2)``: first and last column and row of the mask.
Spacing is isotropic, ``(sx, sy)`` in mm per pixel. Every sample is a pure function of
``(seed, site, size, geometry, finding)``; ``generate(seed)`` equals ``generate(seed, site=<the site it
picked>)`` because site, geometry and finding are drawn from their own stream.
"""

from __future__ import annotations

import dataclasses
import abc
import math
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import numpy as np

from ..answers.calipers import AXES, lesion_axes
from ..imageio import line_length
from ..answers.landmarks import ORGANS, ramanujan_perimeter
from ..masks import mask_box

SITES: tuple[str, ...] = ("breast", "thyroid", "kidney", "fetal_head")
GEOMETRIES: tuple[str, ...] = ("linear", "sector")
FINDINGS: dict[str, tuple[str, ...]] = {
    "breast": ("benign", "malignant", "cyst", "normal"),
    "thyroid": ("benign", "malignant", "cyst", "normal"),
    "kidney": ("normal",),
    "fetal_head": ("normal",),
}
DEFAULT_GEOMETRY: dict[str, str] = {
    "breast": "linear", "thyroid": "linear", "kidney": "sector", "fetal_head": "sector"}
LESION_LABEL: dict[str, str] = {"breast": "breast lesion", "thyroid": "thyroid nodule"}

_FINDING_WEIGHTS = {"benign": 0.38, "malignant": 0.38, "cyst": 0.14, "normal": 0.10}
_DEPTH_MM = {"breast": (35.0, 55.0), "thyroid": (35.0, 50.0), "kidney": (150.0, 190.0),
             "fetal_head": (120.0, 160.0)}
_MIN_SIZE, _MAX_SIZE = 64, 2048


class SyntheticError(ValueError):
    """Bad arguments to the generator (unknown site, geometry or finding, bad seed or size)."""


@dataclass
class SyntheticObject:
    label: str
    mask: np.ndarray
    box: tuple[int, int, int, int]
    keypoints: list[tuple[str, tuple[float, float]]] = field(default_factory=list)
    lines: list[tuple[str, tuple[float, float, float, float], float]] = field(default_factory=list)
    diagnosis: str | None = None


@dataclass
class SyntheticSample:
    image: np.ndarray
    scan_mask: np.ndarray
    spacing: tuple[float, float]
    site: str
    objects: list[SyntheticObject]
    diagnosis: str | None
    report: str
    measurements: dict[str, float]
    seed: int
    geometry: str = "linear"


@dataclass(frozen=True)
class Appearance:
    """How the simulated scanner renders a scene, apart from the scene itself.

    The default is the look the demo model was trained on, and every default factor is a no-op (x1.0,
    +0 dB), so samples of the default appearance are bit-identical to those made before this existed.
    Another appearance is a held-out domain: the same anatomy and annotations seen through another
    probe, beamformer and operator, for measuring what a model learned beyond one generator's texture.
    """

    name: str = "default"
    #: site -> probe geometry, replacing DEFAULT_GEOMETRY (e.g. breast on a curvilinear probe)
    geometry: tuple[tuple[str, str], ...] = ()
    psf_axial: float = 1.0       # factor on the pulse length (speckle grain along depth)
    psf_lateral: float = 1.0     # factor on the beam width (speckle grain across)
    density: float = 1.0         # factor on scatterer density (below ~0.3 speckle turns into dots)
    dynamic_range_db: float = 0.0  # added to the log-compression range (more = flatter, greyer image)
    gain_db: float = 0.0         # overall gain
    tgc_error_db: float = 0.0    # uncompensated loss at full depth (positive = deep tissue darker)
    lesion_amp: float = 1.0      # factor on lesion and organ scatterer amplitude (echogenicity)
    noise_db: float = 0.0        # added to the electronic noise level
    apex_radius: float = 1.0     # factor on a curvilinear probe's radius (smaller = tighter fan)
    fan_deg: float = 0.0         # added to a curvilinear probe's half-angle
    linear_margin: float = 1.0   # factor on the unscanned margin of a linear probe

    def geometry_for(self, site: str) -> str:
        return dict(self.geometry).get(site, DEFAULT_GEOMETRY[site])


APPEARANCES: dict[str, Appearance] = {
    "default": Appearance(),
    # A second scanner: the same probe type per site but another footprint (a fan from a half-size apex
    # radius opened 6 degrees wider, linear margins up to twice as wide); speckle half as long and 2.6x as
    # wide, 40% of the scatterer density, a log curve 20 dB flatter with +6 dB gain, a TGC that
    # under-compensates depth by 10 dB, structures 1.8x brighter (lesions less hypoechoic), 10 dB more noise.
    # The demo model's segmentation mIoU falls from 0.80 to 0.58 on it (16 images), about what another
    # simulator's images gave (0.59).
    "scanner_b": Appearance(
        name="scanner_b", apex_radius=0.5, fan_deg=6.0, linear_margin=2.0,
        psf_axial=0.5, psf_lateral=2.6, density=0.4, dynamic_range_db=20.0, gain_db=6.0, tgc_error_db=10.0,
        lesion_amp=1.8, noise_db=10.0),
}


#: the appearance name that draws a scanner per sample (`varied_appearance`): training-time augmentation
VARIED = "varied"

#: (low, high) of each factor `varied_appearance` draws uniformly. They bracket the default look (x1.0, +0 dB) on
#: both sides, and on every axis where scanner_b departs from the default they stop short of it (its speckle
#: 0.5x long and 2.6x wide, 40% density, +20 dB range, +10 dB TGC error and noise, 1.8x lesion amplitude, half the
#: apex radius, 2x linear margins): the held-out scanner stays a look no training sample had.
VARIED_RANGES: dict[str, tuple[float, float]] = {
    "psf_axial": (0.7, 1.5), "psf_lateral": (0.7, 1.8), "density": (0.6, 1.0), "dynamic_range_db": (-10.0, 12.0),
    "gain_db": (-6.0, 5.0), "tgc_error_db": (-6.0, 7.0), "lesion_amp": (0.8, 1.4), "noise_db": (0.0, 7.0),
    "apex_radius": (0.7, 1.4), "fan_deg": (-5.0, 4.0), "linear_margin": (0.5, 1.6),
}


def appearance_names() -> tuple[str, ...]:
    """What `appearance` accepts by name: the fixed scanners and VARIED."""
    return (*APPEARANCES, VARIED)


def varied_appearance(seed: int) -> Appearance:
    """The scanner sample `seed` is seen through under VARIED: every factor drawn from VARIED_RANGES.

    Why: a model trained on one look keys on its texture (the demo model refused in-scope questions on another
    simulator's images); a look drawn per sample makes texture useless as a cue. It comes from its own random
    stream, so a seed keeps its site and finding; the probe's footprint is part of the look, so the scene is
    laid out anew inside it (annotations stay exact).
    """
    rng = np.random.default_rng([int(seed), 3])
    return Appearance(name=VARIED, **{k: float(rng.uniform(lo, hi)) for k, (lo, hi) in VARIED_RANGES.items()})


def appearance_of(name: str | Appearance | None, seed: int | None = None) -> Appearance:
    """An Appearance by name ("default", "scanner_b"; VARIED needs the sample's seed) or as given."""
    if name is None:
        return APPEARANCES["default"]
    if isinstance(name, Appearance):
        return name
    if name == VARIED:
        if seed is None:
            raise SyntheticError(f"appearance {VARIED!r} is drawn per sample: it needs the sample's seed")
        return varied_appearance(seed)
    if name not in APPEARANCES:
        raise SyntheticError(f"appearance {name!r} is not one of {appearance_names()}")
    return APPEARANCES[name]


# --------------------------------------------------------------------------------------------- geometry

@dataclass
class _Coords:
    """Points where the scene is evaluated, in image pixels and in probe (depth, lateral) terms."""
    x: np.ndarray
    y: np.ndarray
    d: np.ndarray
    u: np.ndarray


@dataclass(frozen=True)
class _Probe:
    geometry: str
    size: int
    x0: float = 0.0          # linear: first and last scanned column
    x1: float = 0.0
    cx: float = 0.0          # sector: apex column and row, skin radius, far radius, half angle (rad)
    y_apex: float = 0.0
    r0: float = 0.0
    r_max: float = 0.0
    half: float = 0.0

    @property
    def depth_px(self) -> float:
        return float(self.size) if self.geometry == "linear" else self.r_max - self.r0

    def depth_lateral(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.geometry == "linear":
            return y, x
        dx, dy = x - self.cx, y - self.y_apex
        r = np.hypot(dx, dy)
        theta = np.arctan2(dx, dy)
        return r - self.r0, self.cx + theta * 0.5 * (self.r0 + self.r_max)

    def coords(self, x: np.ndarray, y: np.ndarray) -> _Coords:
        d, u = self.depth_lateral(x, y)
        return _Coords(x, y, d, u)

    def pixel_coords(self) -> _Coords:
        y, x = np.mgrid[0:self.size, 0:self.size].astype(np.float64)
        return self.coords(x, y)

    def beam_coords(self) -> _Coords:
        if self.geometry == "linear":
            return self.pixel_coords()
        n_r = int(math.ceil(self.r_max - self.r0)) + 1
        n_l = int(math.ceil(2 * self.half * self.r_max)) + 1
        r = self.r0 + np.arange(n_r, dtype=np.float64)
        theta = np.linspace(-self.half, self.half, n_l)
        x = self.cx + r[:, None] * np.sin(theta)[None, :]
        y = self.y_apex + r[:, None] * np.cos(theta)[None, :]
        return _Coords(x, y, np.broadcast_to(r[:, None] - self.r0, x.shape),
                       np.broadcast_to(self.cx + theta[None, :] * 0.5 * (self.r0 + self.r_max), x.shape))

    def scan_mask(self, margin: float = 0.0) -> np.ndarray:
        s = self.size
        if self.geometry == "linear":
            y, x = np.mgrid[0:s, 0:s]
            return ((x >= self.x0 + margin) & (x <= self.x1 - margin)
                    & (y >= margin) & (y <= s - 1 - margin))
        y, x = np.mgrid[0:s, 0:s].astype(np.float64)
        dx, dy = x - self.cx, y - self.y_apex
        r = np.hypot(dx, dy)
        theta = np.abs(np.arctan2(dx, dy))
        return ((r >= self.r0 + margin) & (r <= self.r_max - margin)
                & (theta * r <= self.half * r - margin))

    def point(self, depth: float, lateral_frac: float) -> tuple[float, float]:
        """Image position at a depth below the skin along the beam at a fraction of the aperture."""
        if self.geometry == "linear":
            return self.x0 + lateral_frac * (self.x1 - self.x0), depth
        theta = (2 * lateral_frac - 1) * self.half
        r = self.r0 + depth
        return self.cx + r * math.sin(theta), self.y_apex + r * math.cos(theta)

    def to_image(self, beam_img: np.ndarray) -> np.ndarray:
        """Scan conversion: beam grid -> pixel grid (identity for linear), zero outside the scan."""
        mask = self.scan_mask()
        if self.geometry == "linear":
            return np.where(mask, beam_img, 0.0)
        n_r, n_l = beam_img.shape
        y, x = np.nonzero(mask)
        dx, dy = x - self.cx, y - self.y_apex
        fr = np.clip(np.hypot(dx, dy) - self.r0, 0, n_r - 1)
        ft = np.clip((np.arctan2(dx, dy) + self.half) / (2 * self.half) * (n_l - 1), 0, n_l - 1)
        i0 = np.minimum(fr.astype(np.int64), n_r - 2)
        j0 = np.minimum(ft.astype(np.int64), n_l - 2)
        wr, wt = fr - i0, ft - j0
        v = ((1 - wr) * (1 - wt) * beam_img[i0, j0] + (1 - wr) * wt * beam_img[i0, j0 + 1]
             + wr * (1 - wt) * beam_img[i0 + 1, j0] + wr * wt * beam_img[i0 + 1, j0 + 1])
        out = np.zeros((self.size, self.size))
        out[y, x] = v
        return out


def _make_probe(geometry: str, size: int, rng: np.random.Generator, look: "Appearance | None" = None) -> _Probe:
    look = look or Appearance()
    if geometry == "linear":
        m = int(rng.integers(0, int(0.06 * look.linear_margin * size) + 1))
        return _Probe("linear", size, x0=float(m), x1=float(size - 1 - m))
    r0 = rng.uniform(0.12, 0.3) * size * look.apex_radius
    half = math.radians(rng.uniform(30.0, 37.0) + look.fan_deg)
    while True:  # widest fan that fits the image and still reaches 80% of its height
        y_apex = -r0 * math.cos(half)
        r_max = min(size - 1 - y_apex, (size / 2 - 1) / math.sin(half))
        if y_apex + r_max >= 0.8 * (size - 1) or half < math.radians(15):
            break
        half -= math.radians(0.5)
    return _Probe("sector", size, cx=(size - 1) / 2, y_apex=y_apex, r0=r0, r_max=r_max, half=half)


# ----------------------------------------------------------------------------------------------- shapes

@dataclass(frozen=True)
class _Wave:
    """A wavy boundary depth(lateral) in pixels, for layers that follow the skin."""
    base: float
    amps: tuple[float, ...] = ()
    periods: tuple[float, ...] = ()
    phases: tuple[float, ...] = ()

    def __call__(self, u: np.ndarray) -> np.ndarray:
        out = np.full(np.shape(u), self.base)
        for a, p, ph in zip(self.amps, self.periods, self.phases):
            out = out + a * np.sin(2 * math.pi * u / p + ph)
        return out

    @staticmethod
    def random(rng: np.random.Generator, base: float, amp: float, period: float) -> "_Wave":
        amps = tuple(amp * f for f in (1.0, 0.5, 0.25))
        periods = tuple(period * f for f in rng.uniform(0.6, 1.6, 3) * (1.0, 0.5, 0.25))
        return _Wave(base, amps, periods, tuple(rng.uniform(0, 2 * math.pi, 3)))


class _Shape(abc.ABC):
    @abc.abstractmethod
    def inside(self, c: _Coords) -> np.ndarray:
        """Boolean mask of the pixels of `c` that lie inside the shape."""


@dataclass(frozen=True)
class _Band(_Shape):
    top: _Wave | None
    bottom: _Wave | None

    def inside(self, c: _Coords) -> np.ndarray:
        m = np.ones(c.x.shape, dtype=bool)
        if self.top is not None:
            m &= c.d >= self.top(c.u)
        if self.bottom is not None:
            m &= c.d < self.bottom(c.u)
        return m


@dataclass(frozen=True)
class _Ellipse(_Shape):
    cx: float
    cy: float
    a: float
    b: float
    angle: float = 0.0  # rad, the ``a`` axis measured from +x towards +y

    def local(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dx, dy = x - self.cx, y - self.cy
        ca, sa = math.cos(self.angle), math.sin(self.angle)
        return dx * ca + dy * sa, -dx * sa + dy * ca

    def inside(self, c: _Coords) -> np.ndarray:
        p, q = self.local(c.x, c.y)
        return (p / self.a) ** 2 + (q / self.b) ** 2 <= 1.0

    def axis(self, along: float, across: float = 0.0) -> tuple[float, float]:
        """Image point at ``along`` on the a axis and ``across`` on the b axis from the centre."""
        ca, sa = math.cos(self.angle), math.sin(self.angle)
        return self.cx + along * ca - across * sa, self.cy + along * sa + across * ca

    def scaled(self, da: float, db: float) -> "_Ellipse":
        return _Ellipse(self.cx, self.cy, self.a + da, self.b + db, self.angle)


@dataclass(frozen=True)
class _Star(_Shape):
    """An ellipse whose polar radius carries harmonics (lobulation) and triangular spikes (spicules)."""
    base: _Ellipse
    harmonics: tuple[tuple[int, float, float], ...] = ()   # (k, relative amplitude, phase)
    spicules: tuple[tuple[float, float, float], ...] = ()  # (angle, relative length, angular half width)

    def radius(self, phi: np.ndarray) -> np.ndarray:
        a, b = self.base.a, self.base.b
        r_ell = a * b / np.sqrt((b * np.cos(phi)) ** 2 + (a * np.sin(phi)) ** 2)
        mod = np.ones_like(phi)
        for k, amp, ph in self.harmonics:
            mod += amp * np.cos(k * phi + ph)
        r = r_ell * mod
        for ang, length, width in self.spicules:
            dphi = np.abs((phi - ang + math.pi) % (2 * math.pi) - math.pi)
            r = r + length * math.sqrt(a * b) * np.clip(1 - dphi / width, 0, None)
        return r

    def extent(self) -> float:
        a, b = self.base.a, self.base.b
        grow = 1 + sum(abs(h[1]) for h in self.harmonics)
        spike = max((s[1] for s in self.spicules), default=0.0) * math.sqrt(a * b)
        return max(a, b) * grow + spike + 1

    def inside(self, c: _Coords) -> np.ndarray:
        e = self.extent()
        m = (np.abs(c.x - self.base.cx) <= e) & (np.abs(c.y - self.base.cy) <= e)
        out = np.zeros(c.x.shape, dtype=bool)
        if not m.any():
            return out
        p, q = self.base.local(c.x[m], c.y[m])
        out[m] = np.hypot(p, q) <= self.radius(np.arctan2(q, p))
        return out


@dataclass(frozen=True)
class _Minus(_Shape):
    keep: _Shape
    cut: _Shape

    def inside(self, c: _Coords) -> np.ndarray:
        return self.keep.inside(c) & ~self.cut.inside(c)


@dataclass(frozen=True)
class _Segment(_Shape):
    x1: float
    y1: float
    x2: float
    y2: float
    half_width: float

    def inside(self, c: _Coords) -> np.ndarray:
        vx, vy = self.x2 - self.x1, self.y2 - self.y1
        t = np.clip(((c.x - self.x1) * vx + (c.y - self.y1) * vy) / max(vx * vx + vy * vy, 1e-9), 0, 1)
        return np.hypot(c.x - self.x1 - t * vx, c.y - self.y1 - t * vy) <= self.half_width


@dataclass(frozen=True)
class _Dots(_Shape):
    points: tuple[tuple[float, float], ...]
    radius: float

    def inside(self, c: _Coords) -> np.ndarray:
        out = np.zeros(c.x.shape, dtype=bool)
        for px, py in self.points:
            out |= (c.x - px) ** 2 + (c.y - py) ** 2 <= self.radius ** 2
        return out


@dataclass(frozen=True)
class _Noise:
    """Smooth value noise (bilinear over a random lattice) for tissue texture; anisotropic cells
    give muscle striations."""
    grid: np.ndarray
    cell_x: float
    cell_y: float
    origin: float

    @staticmethod
    def random(rng: np.random.Generator, size: int, cell_x: float, cell_y: float) -> "_Noise":
        origin = -0.5 * size
        n_x = int(2 * size / cell_x) + 3
        n_y = int(2 * size / cell_y) + 3
        return _Noise(rng.standard_normal((n_y, n_x)), cell_x, cell_y, origin)

    def __call__(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        gx = np.clip((x - self.origin) / self.cell_x, 0, self.grid.shape[1] - 1.001)
        gy = np.clip((y - self.origin) / self.cell_y, 0, self.grid.shape[0] - 1.001)
        i, j = gy.astype(np.int64), gx.astype(np.int64)
        fy, fx = gy - i, gx - j
        fy, fx = fy * fy * (3 - 2 * fy), fx * fx * (3 - 2 * fx)
        g = self.grid
        return ((1 - fy) * ((1 - fx) * g[i, j] + fx * g[i, j + 1])
                + fy * ((1 - fx) * g[i + 1, j] + fx * g[i + 1, j + 1]))


@dataclass(frozen=True)
class _Layer:
    """A region's scattering: amplitude (1 = reference soft tissue), density (scatterers per beam
    sample) and extra one-way attenuation in dB per pixel (negative for fluid)."""
    shape: _Shape
    amp: float
    density: float
    atten_db: float = 0.0
    texture: _Noise | None = None
    texture_var: float = 0.0


@dataclass
class _Maps:
    amp: np.ndarray
    density: np.ndarray
    atten: np.ndarray


def _paint(layers: Sequence[_Layer], c: _Coords) -> _Maps:
    maps = _Maps(np.ones(c.x.shape), np.full(c.x.shape, 0.6), np.zeros(c.x.shape))
    for layer in layers:
        m = layer.shape.inside(c)
        if not m.any():
            continue
        amp: np.ndarray | float = layer.amp
        if layer.texture is not None and layer.texture_var > 0:
            amp = layer.amp * np.clip(1 + layer.texture_var * layer.texture(c.x[m], c.y[m]), 0.05, None)
        maps.amp[m] = amp
        maps.density[m] = layer.density
        maps.atten[m] = layer.atten_db
    return maps


# ------------------------------------------------------------------------------------------- simulation

def _next_fast_len(n: int) -> int:
    best = 1 << (n - 1).bit_length()
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            p = p35
            while p < n:
                p *= 2
            best = min(best, p)
            p35 *= 3
        p5 *= 5
    return best


def _simulate(layers: Sequence[_Layer], probe: _Probe, rng: np.random.Generator,
              look: Appearance = Appearance()) -> np.ndarray:
    """B-mode image in [0, 1] on the pixel grid."""
    c = probe.beam_coords()
    maps = _paint(layers, c)
    if look.density != 1.0:
        maps.density = np.clip(maps.density * look.density, 0.0, 1.0)
    n_r, n_l = c.x.shape

    # Point-spread function, in beam samples.
    # Carrier near a quarter of the sampling rate and an envelope >= 0.6 periods wide keep the pulse
    # spectrum (centre 1/period, width 1/(2 pi sig_ax)) within (0, Nyquist): energy at DC or aliased
    # past Nyquist turns into streaks along the beams after the Hilbert transform.
    period = rng.uniform(3.6, 4.4)
    sig_ax = rng.uniform(0.6, 0.72) * period * look.psf_axial
    sig_lat = rng.uniform(2.0, 3.2) * look.psf_lateral
    if probe.geometry == "sector":
        sig_lat *= (n_l - 1) / (2 * probe.half * 0.5 * (probe.r0 + probe.r_max))
    k_ax, k_lat = int(math.ceil(3 * sig_ax)), int(math.ceil(3 * sig_lat))

    # Scatterers, weighted by two-way attenuation accumulated along each beam.
    alpha0 = rng.uniform(25.0, 35.0) / (2 * n_r)
    one_way = np.cumsum(alpha0 + maps.atten, axis=0) - 0.5 * (alpha0 + maps.atten)
    hit = rng.random((n_r, n_l)) < maps.density
    scat = np.where(hit, rng.standard_normal((n_r, n_l)), 0.0) * maps.amp * 10 ** (-one_way / 10)

    # PSF convolution and Hilbert transform along depth, both in the FFT domain.
    n0, n1 = _next_fast_len(n_r + 2 * k_ax), _next_fast_len(n_l + 2 * k_lat)
    z = np.arange(-k_ax, k_ax + 1)
    h_ax = np.zeros(n0)
    h_ax[z % n0] = np.exp(-0.5 * (z / sig_ax) ** 2) * np.cos(2 * math.pi * z / period)
    xl = np.arange(-k_lat, k_lat + 1)
    h_lat = np.zeros(n1)
    h_lat[xl % n1] = np.exp(-0.5 * (xl / sig_lat) ** 2)
    hilbert = np.zeros(n0)
    hilbert[1:(n0 + 1) // 2] = 2.0
    if n0 % 2 == 0:
        hilbert[n0 // 2] = 1.0
    spec = np.fft.fft2(scat, s=(n0, n1))
    spec *= (np.fft.fft(h_ax) * hilbert)[:, None] * np.fft.fft(h_lat)[None, :]
    analytic = np.fft.ifft2(spec)[:n_r, :n_l]

    # Reference: the rms envelope of unattenuated unit tissue (amp 1, density 0.6).
    env_ax = np.exp(-0.5 * (z / sig_ax) ** 2)
    unit_rms = math.sqrt(0.6 * np.sum(env_ax ** 2) * np.sum(np.exp(-(xl / sig_lat) ** 2)))
    noise = unit_rms * 10 ** ((look.noise_db - rng.uniform(40.0, 50.0)) / 20) / math.sqrt(2)
    analytic = analytic + noise * (rng.standard_normal((n_r, n_l)) + 1j * rng.standard_normal((n_r, n_l)))

    # Time-gain compensation: the nominal attenuation times an operator factor, plus slider wiggle.
    depth = np.arange(n_r, dtype=np.float64)
    sliders = rng.uniform(-2.0, 2.0, 8)
    wiggle = np.interp(depth, np.linspace(0, n_r - 1, 8), sliders)
    tgc_db = 2 * alpha0 * depth * rng.uniform(0.92, 1.04) + wiggle + look.gain_db \
        - look.tgc_error_db * depth / max(n_r - 1, 1)
    env = np.abs(analytic) * 10 ** (tgc_db / 20)[:, None]

    dyn_range = rng.uniform(50.0, 65.0) + look.dynamic_range_db
    tissue_grey = rng.uniform(100.0, 140.0) / 255
    ref = unit_rms * 10 ** (dyn_range * (1 - tissue_grey) / 20)
    grey = np.clip(1 + 20 * np.log10(env / ref + 1e-12) / dyn_range, 0.0, 1.0)
    return probe.to_image(grey)


# ------------------------------------------------------------------------------------------------ scenes

@dataclass
class _Scene:
    layers: list[_Layer]
    objects: list[tuple[str, _Shape, list, list, str | None]]  # label, shape, keypoints, lines, diagnosis
    diagnosis: str | None
    report: str
    measurements: dict[str, float]


def _u(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(rng.uniform(lo, hi))


def _skin_layers(rng, size, mm, skin_mm, fat_mm, muscle_mm=None):
    """Skin, subcutaneous fat and optionally a muscle band; returns layers and the deepest boundary."""
    skin = _Wave.random(rng, mm(_u(rng, *skin_mm)), mm(0.15), mm(25))
    fat = _Wave.random(rng, skin.base + mm(_u(rng, *fat_mm)), mm(_u(rng, 0.4, 1.5)), mm(30))
    layers = [
        _Layer(_Band(None, skin), 1.9, 0.95, texture=_Noise.random(rng, size, 6, 2), texture_var=0.2),
        _Layer(_Band(skin, fat), 0.45, 0.35, texture=_Noise.random(rng, size, 14, 8), texture_var=0.5),
    ]
    bottom = fat
    if muscle_mm is not None:
        muscle = _Wave.random(rng, fat.base + mm(_u(rng, *muscle_mm)), mm(0.8), mm(40))
        layers.append(_Layer(_Band(fat, muscle), 0.65, 0.6, texture=_Noise.random(rng, size, 30, 2.5),
                             texture_var=0.7))
        bottom = muscle
    return layers, bottom


def _fits(shape: _Shape, inner: np.ndarray, pixels: _Coords) -> np.ndarray | None:
    m = shape.inside(pixels)
    if not m.any() or (m & ~inner).any():
        return None
    return m


@dataclass
class _Lesion:
    shape: _Star
    amp: float
    shadow_db: float
    heterogeneity: float
    calcifications: tuple[tuple[float, float], ...]
    words: dict[str, str]


def _lesion_traits(rng: np.random.Generator, kind: str, site: str) -> dict:
    """Latent cues. Each overlaps between classes; together they separate benign from malignant."""
    if kind == "cyst":
        return dict(aspect=float(np.clip(rng.normal(0.75, 0.15), 0.45, 1.1)), angle=rng.normal(0, 0.25),
                    margin="circumscribed", amp=0.02, shadow_db=-_u(rng, 4, 9), heterogeneity=0.0,
                    calc=0)
    if kind == "benign":
        margin = rng.choice(["circumscribed", "lobulated", "irregular"], p=[0.7, 0.15, 0.15])
        r = rng.random()
        shadow = _u(rng, 3, 7) if r < 0.1 else (-_u(rng, 2, 4) if r < 0.4 else _u(rng, -1, 1))
        return dict(aspect=float(np.clip(rng.normal(0.66, 0.16), 0.35, 1.15)), angle=rng.normal(0, 0.17),
                    margin=str(margin), amp=float(np.clip(rng.normal(0.52, 0.12), 0.25, 0.85)),
                    shadow_db=shadow, heterogeneity=0.15,
                    calc=int(rng.integers(2, 5)) if site == "thyroid" and rng.random() < 0.05 else 0)
    margin = rng.choice(["spiculated", "irregular", "microlobulated"], p=[0.45, 0.4, 0.15])
    shadow = _u(rng, 6, 16) if rng.random() < 0.75 else _u(rng, 0, 3)
    return dict(aspect=float(np.clip(rng.normal(1.06, 0.25), 0.55, 1.7)), angle=rng.normal(0, 0.3),
                margin=str(margin), amp=float(np.clip(rng.normal(0.28, 0.09), 0.1, 0.55)),
                shadow_db=shadow, heterogeneity=0.4,
                calc=int(rng.integers(3, 9)) if site == "thyroid" and rng.random() < 0.5 else 0)


def _margin_shape(rng: np.random.Generator, ellipse: _Ellipse, margin: str) -> _Star:
    def harmonics(ks, lo, hi):
        return tuple((int(k), _u(rng, lo, hi) * rng.choice([-1, 1]), _u(rng, 0, 2 * math.pi))
                     for k in ks)
    if margin == "circumscribed":
        return _Star(ellipse, harmonics((3, 4), 0.0, 0.02))
    if margin == "lobulated":
        return _Star(ellipse, harmonics((int(rng.integers(2, 4)) + 1,), 0.06, 0.1))
    if margin == "microlobulated":
        return _Star(ellipse, harmonics(rng.choice(np.arange(6, 12), 3, replace=False), 0.03, 0.05))
    if margin == "irregular":
        return _Star(ellipse, harmonics(rng.choice(np.arange(3, 11), 4, replace=False), 0.05, 0.1))
    n = int(rng.integers(6, 15))
    spikes = tuple((_u(rng, -math.pi, math.pi), _u(rng, 0.3, 0.7), _u(rng, 0.05, 0.1)) for _ in range(n))
    return _Star(ellipse, harmonics(rng.choice(np.arange(3, 9), 3, replace=False), 0.03, 0.07), spikes)


@dataclass
class _LesionPlan:
    kind: str
    traits: dict
    size_mm: float

    def extent_mm(self) -> tuple[float, float]:
        """Nominal width and height before margin irregularities."""
        aspect = self.traits["aspect"]
        return (self.size_mm, self.size_mm * aspect) if aspect <= 1 else (self.size_mm / aspect, self.size_mm)


def _plan_lesion(rng: np.random.Generator, site: str, kind: str) -> _LesionPlan:
    t = _lesion_traits(rng, kind, site)
    lo, hi = {"breast": (6.0, 20.0), "thyroid": (5.0, 15.0)}[site]
    return _LesionPlan(kind, t, _u(rng, lo, hi) if kind != "cyst" else _u(rng, 4.0, 0.9 * hi))


#: how a report words each margin (the single-image reports and an examination's, which may take the margin another
#: plane shows)
MARGIN_WORDS = {"circumscribed": "circumscribed margin", "lobulated": "gently lobulated margin",
                "microlobulated": "microlobulated margin", "irregular": "irregular margin",
                "spiculated": "spiculated margin"}


def _place_lesion(rng, plan: _LesionPlan, mm, pixels, inner, region: Callable[[float, float], tuple]):
    """Draw a margin and a position (``region(w, h)`` gives a centre) until it lies inside the scan."""
    t, kind = plan.traits, plan.kind
    w0, h0 = plan.extent_mm()
    for attempt in range(40):
        w, h = mm(w0) * 0.97 ** attempt, mm(h0) * 0.97 ** attempt
        cx, cy = region(w, h)
        ell = _Ellipse(cx, cy, w / 2, h / 2, float(t["angle"]))
        shape = _margin_shape(rng, ell, t["margin"])
        mask = _fits(shape, inner, pixels)
        if mask is not None:
            break
    else:
        raise RuntimeError("synthetic lesion does not fit the scan")
    calc = []
    for _ in range(t["calc"]):
        rr, aa = 0.7 * math.sqrt(rng.random()), _u(rng, 0, 2 * math.pi)
        calc.append(ell.axis(rr * ell.a * math.cos(aa), rr * ell.b * math.sin(aa)))
    ys, xs = np.nonzero(mask)
    box_w, box_h = xs.max() - xs.min() + 1, ys.max() - ys.min() + 1
    words = {
        "shape": ("irregular" if t["margin"] in ("irregular", "spiculated") else
                  "round" if 0.85 <= box_h / box_w <= 1.15 else "oval"),
        "margin": MARGIN_WORDS[t["margin"]],
        "orientation": "taller than wide" if box_h > box_w else "wider than tall",
        "echo": ("anechoic" if kind == "cyst" else "mildly hypoechoic" if t["amp"] >= 0.4
                 else "markedly hypoechoic"),
        "posterior": ("posterior acoustic shadowing" if t["shadow_db"] >= 4 else
                      "posterior acoustic enhancement" if t["shadow_db"] <= -2 else
                      "no posterior acoustic features"),
    }
    return _Lesion(shape, t["amp"], t["shadow_db"], t["heterogeneity"], tuple(calc), words), mask


def _lesion_layers(rng, lesion: _Lesion, size: int, mm) -> list[_Layer]:
    h_px = max(2 * lesion.shape.base.b, 2.0)
    density = 0.2 if lesion.amp < 0.05 else 0.55
    layers = [_Layer(lesion.shape, lesion.amp, density, atten_db=lesion.shadow_db / (2 * h_px),
                     texture=_Noise.random(rng, size, 5, 4), texture_var=lesion.heterogeneity)]
    if lesion.calcifications:
        layers.append(_Layer(_Dots(lesion.calcifications, max(mm(0.3), 0.8)), 5.0, 1.0))
    return layers


def _box_size_mm(mask: np.ndarray, s: float) -> tuple[float, float]:
    ys, xs = np.nonzero(mask)
    return (xs.max() - xs.min() + 1) * s, (ys.max() - ys.min() + 1) * s


def _calipers(mask: np.ndarray, s: float, label: str) -> list[tuple[str, tuple[float, float, float, float], float]]:
    """The two lines a sonographer draws on a lesion (BI-RADS / TI-RADS size), by `calipers.lesion_axes`, the
    rule the Predictor measures the model's masks with; lengths in mm."""
    long_axis, short_axis = lesion_axes(mask)
    return [(f"{label} {name}", coords, _length_mm(*coords, s))
            for name, coords in zip(AXES, (long_axis, short_axis))]


def _lesion_report(site: str, kind: str, lesion: _Lesion, mask: np.ndarray, s: float,
                   where: str, calipers) -> tuple[str, dict[str, float]]:
    w, h = _box_size_mm(mask, s)
    long_mm, short_mm = calipers[0][2], calipers[1][2]
    wd = lesion.words
    if kind == "cyst":
        finding = (f"anechoic {wd['shape']} {'cyst' if site == 'breast' else 'cystic nodule'}{where}, "
                   f"{wd['margin']}, {wd['orientation']}, {wd['posterior']}")
        impression = ("simple cyst, benign (BI-RADS 2)" if site == "breast"
                      else "purely cystic nodule, benign (TI-RADS 1)")
    else:
        noun = "mass" if site == "breast" else "solid nodule"
        finding = (f"{wd['echo']} {wd['shape']} {noun}{where}, {wd['margin']}, {wd['orientation']}, "
                   f"{wd['posterior']}")
        if lesion.calcifications:
            finding += ", punctate echogenic foci"
        if site == "breast":
            impression = ("suspicious for malignancy (BI-RADS 4-5)" if kind == "malignant"
                          else "probably benign (BI-RADS 3)")
        else:
            impression = ("suspicious for malignancy (TI-RADS 4-5)" if kind == "malignant"
                          else "likely benign (TI-RADS 2-3)")
    report = (f"Site: {site}. Finding: {finding}. Size: {long_mm:.1f} x {short_mm:.1f} mm (long x short axis). "
              f"Impression: {impression}.")
    return report, {"lesion width mm": round(w, 2), "lesion height mm": round(h, 2),
                    "lesion long axis mm": long_mm, "lesion short axis mm": short_mm}


def _diagnosis_of(kind: str) -> str:
    return {"benign": "benign", "cyst": "benign", "malignant": "malignant", "normal": "normal"}[kind]


def _breast(rng, probe: _Probe, s: float, kind: str, pixels: _Coords, inner: np.ndarray,
            plan: _LesionPlan | None = None) -> _Scene:
    size = probe.size
    mm = lambda v: v / s  # noqa: E731 - millimetres to pixels
    layers, fat = _skin_layers(rng, size, mm, (1.2, 2.2), (3.0, 9.0))
    gland = _Wave.random(rng, probe.depth_px * _u(rng, 0.62, 0.78), mm(_u(rng, 0.5, 2.0)), mm(35))
    retro = _Wave(gland.base + mm(_u(rng, 1.5, 3.0)), gland.amps, gland.periods, gland.phases)
    layers += [
        _Layer(_Band(fat, gland), 1.05, 0.6, texture=_Noise.random(rng, size, 10, 6), texture_var=0.55),
        _Layer(_Band(gland, retro), 0.45, 0.35, texture=_Noise.random(rng, size, 12, 6), texture_var=0.4),
        _Layer(_Band(retro, None), 0.75, 0.6, texture=_Noise.random(rng, size, 30, 2.5), texture_var=0.7),
    ]
    if kind == "normal":
        return _Scene(layers, [], "normal", "Site: breast. Finding: normal skin, subcutaneous fat and "
                      "fibroglandular tissue; no focal mass. Impression: negative (BI-RADS 1).", {})

    def region(w, h):
        top = fat.base + h / 2 + mm(1.0)
        bottom = max(top, 0.62 * probe.depth_px - h / 2)
        return probe.point(_u(rng, top, bottom), _u(rng, 0.25, 0.75))
    lesion, mask = _place_lesion(rng, plan or _plan_lesion(rng, "breast", kind), mm, pixels, inner, region)
    layers += _lesion_layers(rng, lesion, size, mm)
    label = "cyst" if kind == "cyst" else LESION_LABEL["breast"]
    calipers = _calipers(mask, s, label)
    report, meas = _lesion_report("breast", kind, lesion, mask, s, "", calipers)
    return _Scene(layers, [(label, lesion.shape, [], calipers, _diagnosis_of(kind))], _diagnosis_of(kind),
                  report, meas)


def _thyroid(rng, probe: _Probe, s: float, kind: str, pixels: _Coords, inner: np.ndarray,
             plan: _LesionPlan | None = None, side: int | None = None) -> _Scene:
    size = probe.size
    mm = lambda v: v / s  # noqa: E731
    layers, strap = _skin_layers(rng, size, mm, (1.2, 2.0), (2.0, 4.0), (3.0, 6.0))
    layers.append(_Layer(_Band(strap, None), 0.7, 0.5, texture=_Noise.random(rng, size, 16, 10),
                         texture_var=0.4))
    if side is None:
        side = 1 if rng.random() < 0.5 else -1        # +1: trachea on the image right
    lobe_side = "right" if side == 1 else "left"      # transverse view: patient's right on image left
    a_l, b_l = mm(_u(rng, 8.0, 12.0)), mm(_u(rng, 6.5, 9.5))
    angle = _u(rng, -0.15, 0.15)

    if kind != "normal":  # the lobe grows around its nodule
        plan = plan or _plan_lesion(rng, "thyroid", kind)
        w, h = plan.extent_mm()
        a_l, b_l = max(a_l, mm(0.65 * w + 2.0)), max(b_l, mm(0.65 * h + 2.0))

    lobe_depth = strap.base + b_l + mm(_u(rng, 0.5, 1.5))
    lx, ly = probe.point(lobe_depth, 0.5 + side * _u(rng, -0.05, 0.12))
    if probe.geometry == "linear":
        half_w = (probe.x1 - probe.x0) / 2
    else:
        half_w = (probe.r0 + lobe_depth) * math.sin(probe.half)
    lx = float(np.clip(lx, (size - 1) / 2 - half_w + a_l + mm(1), (size - 1) / 2 + half_w - a_l - mm(1)))
    lobe = _Ellipse(lx, ly, a_l, b_l, angle)

    r_t = mm(_u(rng, 7.0, 10.0))
    tx, ty = lx + side * (a_l + r_t * 0.8 + mm(_u(rng, 1.0, 3.0))), ly + _u(rng, -0.2, 0.2) * b_l
    trachea = _Ellipse(tx, ty, r_t, r_t)
    air = trachea.scaled(-mm(1.5), -mm(1.5))
    r_c = mm(_u(rng, 3.0, 4.2))
    ccx = lx - side * (a_l + r_c + mm(_u(rng, 0.5, 2.0)))
    carotid = _Ellipse(ccx, ly + mm(_u(rng, 0.0, 4.0)), r_c, r_c)
    parenchyma = _Noise.random(rng, size, 5, 4)
    layers += [
        _Layer(_Segment(lx, ly - 0.6 * b_l, tx, ty - r_t, mm(_u(rng, 1.5, 2.5))), 1.25, 0.7,
               texture=parenchyma, texture_var=0.25),
        _Layer(lobe, 1.25, 0.7, texture=parenchyma, texture_var=0.25),
        _Layer(trachea, 2.2, 1.0),
        _Layer(air, 0.02, 0.1, atten_db=40.0 / (2 * max(2 * air.b, 1.0))),
        _Layer(carotid.scaled(mm(0.6), mm(0.6)), 1.5, 0.9),
        _Layer(carotid, 0.02, 0.2, atten_db=-_u(rng, 3, 5) / (4 * r_c)),
    ]
    lobe_obj = ("thyroid", lobe, [], [], None)
    if kind == "normal":
        return _Scene(layers, [lobe_obj], "normal", f"Site: thyroid. Finding: homogeneous {lobe_side} lobe "
                      "parenchyma, no nodule. Impression: normal thyroid.", {})

    def region(w, h):
        rx, ry = max(a_l - w / 2 - mm(1), 0.0), max(b_l - h / 2 - mm(1), 0.0)
        return lobe.axis(_u(rng, -rx, rx) * 0.8, _u(rng, -ry, ry) * 0.8)
    assert plan is not None
    lesion, mask = _place_lesion(rng, plan, mm, pixels, inner, region)
    layers += _lesion_layers(rng, lesion, size, mm)
    label = "cyst" if kind == "cyst" else LESION_LABEL["thyroid"]
    calipers = _calipers(mask, s, label)
    report, meas = _lesion_report("thyroid", kind, lesion, mask, s, f" in the {lobe_side} lobe", calipers)
    return _Scene(layers, [(label, lesion.shape, [], calipers, _diagnosis_of(kind)), lobe_obj],
                  _diagnosis_of(kind), report, meas)


def _length_mm(x1, y1, x2, y2, s) -> float:
    """A drawn line's length in mm by `imageio.line_length` (the owner of every length UMind states), rounded to
    0.01 mm as the manifests store it; `s` is the generator's square pixel spacing."""
    return round(line_length((x1, y1, x2, y2), (s, s)).mm, 2)


def _place_organ(rng, pixels, inner, draw: Callable[[float], _Ellipse]) -> _Ellipse:
    for attempt in range(60):
        shape = draw(0.96 ** max(0, attempt - 10))
        if _fits(shape, inner, pixels) is not None:
            return shape
    raise RuntimeError("synthetic organ does not fit the scan")


def _kidney(rng, probe: _Probe, s: float, kind: str, pixels: _Coords, inner: np.ndarray,
            dims: tuple[float, float] | None = None) -> _Scene:
    """``dims``: (length mm, depth / length) of the kidney, drawn when None (an examination fixes them)."""
    size = probe.size
    mm = lambda v: v / s  # noqa: E731
    layers, wall = _skin_layers(rng, size, mm, (1.5, 2.5), (4.0, 15.0), (4.0, 10.0))
    liver_tex = _Noise.random(rng, size, 8, 8)
    layers.append(_Layer(_Band(wall, None), 0.95, 0.6, texture=liver_tex, texture_var=0.3))
    if dims is None:
        length_mm = _u(rng, 90.0, 125.0)
        ratio = _u(rng, 0.42, 0.55)
    else:
        length_mm, ratio = dims

    def draw(scale):
        a = mm(length_mm * scale) / 2
        return _Ellipse(*probe.point(probe.depth_px * _u(rng, 0.45, 0.62), _u(rng, 0.4, 0.6)),
                        a, a * ratio, _u(rng, -0.45, 0.45))
    kid = _place_organ(rng, pixels, inner, draw)
    for _ in range(int(rng.integers(2, 5))):  # hepatic vessels
        vr = mm(_u(rng, 2.0, 5.0))
        vx, vy = probe.point(_u(rng, wall.base + vr, probe.depth_px - vr), _u(rng, 0.1, 0.9))
        layers.append(_Layer(_Ellipse(vx, vy, vr, vr), 0.03, 0.2, atten_db=-2.0 / (4 * vr)))
    fat_pad = mm(_u(rng, 3.0, 6.0))
    layers += [
        _Layer(kid.scaled(fat_pad, fat_pad), 1.35, 0.7, texture=_Noise.random(rng, size, 6, 6),
               texture_var=0.3),
        _Layer(kid, 1.7, 0.9),
        _Layer(kid.scaled(-mm(0.8), -mm(0.8)), 0.45, 0.55, texture=_Noise.random(rng, size, 6, 6),
               texture_var=0.2),
    ]
    n_pyr = int(rng.integers(5, 9))
    for i in range(n_pyr):
        phi = 2 * math.pi * (i + _u(rng, -0.2, 0.2)) / n_pyr
        px, py = kid.axis(0.62 * kid.a * math.cos(phi), 0.55 * kid.b * math.sin(phi))
        layers.append(_Layer(_Ellipse(px, py, 0.16 * kid.b, 0.1 * kid.a,
                                      math.atan2(py - kid.cy, px - kid.cx)), 0.25, 0.45))
    sinus = _Ellipse(kid.cx, kid.cy, kid.a * _u(rng, 0.5, 0.62), kid.b * _u(rng, 0.35, 0.45), kid.angle)
    layers.append(_Layer(_margin_shape(rng, sinus, "irregular"), 1.55, 0.75,
                         texture=_Noise.random(rng, size, 5, 5), texture_var=0.4))

    p1, p2 = kid.axis(kid.a), kid.axis(-kid.a)
    upper, lower = (p1, p2) if p1[0] <= p2[0] else (p2, p1)  # longitudinal view: cranial on the left
    upper, lower = (round(upper[0], 2), round(upper[1], 2)), (round(lower[0], 2), round(lower[1], 2))
    length = _length_mm(*upper, *lower, s)
    rule = ORGANS["kidney"]  # the names the Predictor's mask reading gives these points
    obj = ("kidney", kid, list(zip(rule.points, (upper, lower))), [(rule.line, (*upper, *lower), length)], "normal")
    report = (f"Site: kidney. Finding: kidney in longitudinal view, cortex hypoechoic to liver, "
              f"corticomedullary differentiation preserved, echogenic renal sinus, no hydronephrosis. "
              f"Length: {length:.1f} mm. Impression: normal kidney.")
    return _Scene(layers, [obj], "normal", report, {"kidney length mm": length})


def _fetal_head(rng, probe: _Probe, s: float, kind: str, pixels: _Coords, inner: np.ndarray) -> _Scene:
    size = probe.size
    mm = lambda v: v / s  # noqa: E731
    layers, wall = _skin_layers(rng, size, mm, (1.5, 2.5), (3.0, 12.0), (4.0, 8.0))
    uterus = _Wave.random(rng, wall.base + mm(_u(rng, 4.0, 10.0)), mm(1.0), mm(50))
    alpha_hint = 30.0 / (2 * probe.depth_px)
    layers += [
        _Layer(_Band(wall, uterus), 0.8, 0.6, texture=_Noise.random(rng, size, 10, 6), texture_var=0.3),
        _Layer(_Band(uterus, None), 0.03, 0.25, atten_db=-0.8 * alpha_hint),
    ]
    depth_mm = probe.depth_px * s
    ci = _u(rng, 0.74, 0.86)
    bpd_mm = _u(rng, 30.0, max(32.0, min(85.0, 0.6 * depth_mm * ci)))
    top = uterus.base + mm(5.0)

    def draw(scale):
        b = mm(bpd_mm * scale) / 2
        a = b / ci
        d = _u(rng, top + a, max(top + a, probe.depth_px - a - mm(3.0)))
        return _Ellipse(*probe.point(d, _u(rng, 0.38, 0.62)), a, b, _u(rng, -0.5, 0.5))
    head = _place_organ(rng, pixels, inner, draw)
    t = mm(_u(rng, 2.0, 3.5))
    brain = head.scaled(-t, -t)
    front = 1 if rng.random() < 0.5 else -1
    layers += [
        _Layer(_Minus(head, brain), 3.2, 1.0, atten_db=_u(rng, 6.0, 10.0) / (2 * t)),
        _Layer(brain, 0.22, 0.45, texture=_Noise.random(rng, size, 8, 8), texture_var=0.3),
        _Layer(_Segment(*brain.axis(-0.9 * brain.a), *brain.axis(0.9 * brain.a), max(mm(0.6), 0.7)),
               1.4, 0.9),
    ]
    for sgn in (-1, 1):
        tx, ty = brain.axis(-front * 0.05 * brain.a, sgn * 0.2 * brain.b)
        layers.append(_Layer(_Ellipse(tx, ty, 0.16 * brain.a, 0.12 * brain.b, head.angle), 0.12, 0.4))
    cx, cy = brain.axis(front * 0.33 * brain.a)
    layers.append(_Layer(_Ellipse(cx, cy, 0.07 * brain.a, 0.05 * brain.b + 0.5, head.angle), 0.02, 0.2))

    e1, e2 = head.axis(0.0, head.b), head.axis(0.0, -head.b)
    near, far = (e1, e2) if e1[1] <= e2[1] else (e2, e1)
    near, far = (round(near[0], 2), round(near[1], 2)), (round(far[0], 2), round(far[1], 2))
    bpd = _length_mm(*near, *far, s)
    ofd = round(2 * head.a * s, 2)
    hc = round(ramanujan_perimeter(head.a * s, head.b * s), 2)
    rule = ORGANS["fetal head"]
    obj = ("fetal head", head, list(zip(rule.points, (near, far))), [(rule.line, (*near, *far), bpd)], "normal")
    report = (f"Site: fetal head. Finding: axial transthalamic view, intact elliptical skull, central "
              f"midline echo, thalami and cavum septi pellucidi visible. BPD: {bpd:.1f} mm. "
              f"OFD: {ofd:.1f} mm. HC: {hc:.1f} mm. Impression: fetal head biometry recorded.")
    return _Scene(layers, [obj], "normal", report, {"BPD mm": bpd, "OFD mm": ofd, "HC mm": hc})


_SCENES = {"breast": _breast, "thyroid": _thyroid, "kidney": _kidney, "fetal_head": _fetal_head}


# ------------------------------------------------------------------------------------------------ public

def _check_args(seed, site, size, geometry, finding) -> None:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise SyntheticError(f"seed must be a non-negative integer, got {seed!r}")
    if site is not None and site not in SITES:
        raise SyntheticError(f"site {site!r} is not one of {SITES}")
    if (isinstance(size, bool) or not isinstance(size, (int, np.integer))
            or not _MIN_SIZE <= size <= _MAX_SIZE):
        raise SyntheticError(f"size must be an integer in [{_MIN_SIZE}, {_MAX_SIZE}], got {size!r}")
    if geometry is not None and geometry not in GEOMETRIES:
        raise SyntheticError(f"geometry {geometry!r} is not one of {GEOMETRIES}")
    if finding is not None and finding not in _FINDING_WEIGHTS:
        raise SyntheticError(f"finding {finding!r} is not one of {tuple(_FINDING_WEIGHTS)}")


def _with_echogenicity(scene: _Scene, factor: float) -> list[_Layer]:
    """The scene's layers with the annotated structures' scatterer amplitude scaled by `factor`."""
    if factor == 1.0:
        return list(scene.layers)
    shapes = [obj[1] for obj in scene.objects]
    return [dataclasses.replace(layer, amp=layer.amp * factor) if any(layer.shape is sh for sh in shapes)
            else layer for layer in scene.layers]


def generate(seed: int, site: str | None = None, size: int = 256, geometry: str | None = None, *,
             finding: str | None = None, appearance: str | Appearance | None = None) -> SyntheticSample:
    """One synthetic sample, a pure function of its arguments.

    ``site`` None draws one; ``geometry`` None uses the site's usual probe (linear for breast and
    thyroid, sector for kidney and fetal head); ``finding`` None draws one of ``FINDINGS[site]``
    (benign, malignant, cyst, normal for breast and thyroid; kidney and fetal head are normal).
    """
    _check_args(seed, site, size, geometry, finding)
    seed, size = int(seed), int(size)
    choice = np.random.default_rng([seed, 1])
    drawn_site = str(SITES[int(choice.integers(len(SITES)))])
    site = site or drawn_site
    if finding is not None and finding not in FINDINGS[site]:
        raise SyntheticError(f"finding {finding!r} is not possible for site {site!r}: {FINDINGS[site]}")
    options = FINDINGS[site]
    weights = np.array([_FINDING_WEIGHTS[f] for f in options])
    drawn_finding = str(options[int(choice.choice(len(options), p=weights / weights.sum()))])
    finding = finding or drawn_finding
    look = appearance_of(appearance, seed)
    geometry = geometry or look.geometry_for(site)

    scene_fn = _SCENES[site]
    return render_scene(np.random.default_rng([seed, 2]), seed, site, size, geometry, look,
                        lambda rng, probe, s, pixels, inner: scene_fn(rng, probe, s, finding, pixels, inner))


#: a scene builder for `render_scene`: (rng, probe, mm per pixel, pixel coords, inside-the-scan mask) -> scene
SceneFn = Callable[[np.random.Generator, "_Probe", float, "_Coords", np.ndarray], "_Scene"]


def render_scene(rng: np.random.Generator, seed: int, site: str, size: int, geometry: str, look: Appearance,
                 scene_fn: SceneFn) -> SyntheticSample:
    """Probe, spacing, scene, simulation and exact masks from one random stream: the body of `generate`, open
    to other scenes (`exams` renders several views of one examination through it, each from its own stream)."""
    probe = _make_probe(geometry, size, rng, look)
    spacing_mm = _u(rng, *_DEPTH_MM[site]) / probe.depth_px
    pixels = probe.pixel_coords()
    inner = probe.scan_mask(margin=max(3.0, 0.015 * size))
    scene = scene_fn(rng, probe, spacing_mm, pixels, inner)
    layers = _with_echogenicity(scene, look.lesion_amp)
    image = np.round(_simulate(layers, probe, rng, look) * 255).astype(np.uint8)

    scan_mask = probe.scan_mask()
    objects = []
    for label, shape, keypoints, lines, diagnosis in scene.objects:
        mask = shape.inside(pixels) & scan_mask  # the visible part (organs are placed inside anyway)
        objects.append(SyntheticObject(label, mask, mask_box(mask), list(keypoints), list(lines), diagnosis))
    s = float(round(spacing_mm, 6))
    return SyntheticSample(image=image, scan_mask=scan_mask, spacing=(s, s), site=site,
                           objects=objects, diagnosis=scene.diagnosis, report=scene.report,
                           measurements=dict(scene.measurements), seed=seed, geometry=geometry)


def generate_many(n: int, seed0: int = 0, sites: Sequence[str] | None = None, size: int = 256,
                  augment: Callable[[SyntheticSample], SyntheticSample] | None = None,
                  appearance: str | Appearance | None = None) -> Iterator[SyntheticSample]:
    """Samples with seeds ``seed0 .. seed0+n-1``; sites cycle through ``sites`` (default ``SITES``)
    so that a dataset is balanced. ``augment`` (e.g. ``usaugment_hook()``) is applied to each."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise SyntheticError(f"n must be a non-negative integer, got {n!r}")
    look = appearance if appearance == VARIED else appearance_of(appearance)  # VARIED: drawn per seed
    sites = tuple(SITES if sites is None else sites)
    if not sites:
        raise SyntheticError("sites must not be empty")
    for site in sites:
        if site not in SITES:
            raise SyntheticError(f"site {site!r} is not one of {SITES}")
    for i in range(int(n)):
        sample = generate(seed0 + i, site=sites[i % len(sites)], size=size, appearance=look)
        yield augment(sample) if augment is not None else sample


def usaugment_hook(p: float = 0.5) -> Callable[[SyntheticSample], SyntheticSample] | None:
    """Photometric ultrasound augmentations from ``usaugment`` (MIT) if it is installed, else None.

    Only the image changes (masks and geometry stay valid); pixels outside the scan stay black.
    Albumentations draws its own random numbers, so augmented samples are not seed-deterministic.
    """
    try:
        import albumentations as A  # type: ignore[import-not-found]
        try:
            from usaugment.albumentations import (  # type: ignore[import-not-found]
                DepthAttenuation, GaussianShadow, HazeArtifact, SpeckleReduction)
        except ImportError:
            from usaugment import (  # type: ignore[import-not-found,no-redef]
                DepthAttenuation, GaussianShadow, HazeArtifact, SpeckleReduction)
    except ImportError:
        return None
    transform = A.Compose([DepthAttenuation(p=p), GaussianShadow(p=p), HazeArtifact(p=p),
                           SpeckleReduction(p=p)], additional_targets={"scan_mask": "mask"})

    def apply(sample: SyntheticSample) -> SyntheticSample:
        out = transform(image=sample.image, scan_mask=sample.scan_mask.astype(np.uint8))
        img = np.asarray(out["image"])
        if img.dtype != np.uint8:
            img = np.clip(img * (255.0 if img.max() <= 1.0 else 1.0), 0, 255).astype(np.uint8)
        return dataclasses.replace(sample, image=np.where(sample.scan_mask, img, 0).astype(np.uint8))
    return apply
