"""Write a synthetic ultrasound dataset (images, masks, manifest.jsonl) and, by default, its training conversations."""

from __future__ import annotations

import argparse
import time

NAME = "synth"
HELP = "write a synthetic ultrasound dataset with annotations and training conversations"


class SynthArgumentError(ValueError):
    """A bad --sites or -n value; the message names the option."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..data.synthetic import appearance_names

    parser.add_argument("--out", required=True, help="output folder (created; manifest.jsonl, images/, masks/)")
    parser.add_argument("-n", type=_positive_int, required=True,
                        help="number of images (with --exams: number of examinations)")
    parser.add_argument("--seed0", type=int, default=0, help="seed of the first image; image i uses seed0 + i")
    parser.add_argument("--sites", default=None,
                        help="comma-separated sites to cycle through (default: all of breast,thyroid,kidney,"
                             "fetal_head)")
    parser.add_argument("--size", type=int, default=256, help="image side in pixels")
    parser.add_argument("--appearance", default="default", choices=sorted(appearance_names()),
                        help="how the simulated scanner looks; 'scanner_b' is a domain the demo model never saw; "
                             "'varied' draws a scanner per image (training-time augmentation, never scanner_b)")
    parser.add_argument("--conversations", action=argparse.BooleanOptionalAction, default=True,
                        help="fill the manifest's training conversations (default: yes)")
    parser.add_argument("--augment", type=_fraction, default=0.0, metavar="P",
                        help="photometric augmentation of the rendered images (gamma, contrast, depth attenuation, "
                             "shadow, haze, blur, noise; umind_core/data/augment.py), each with probability P "
                             "(default: 0, none)")
    parser.add_argument("--exams", action="store_true",
                        help="write examinations instead of single images: each record holds several views of one "
                             "scene (a lesion in two planes, both thyroid lobes, a kidney in two sections, a fetal "
                             "biometry set) and one exam-level report (umind_core/data/exams.py); --augment does "
                             "not apply")
    parser.add_argument("--refusal-rate", type=_fraction, default=0.15,
                        help="share of images that also get an out-of-scope question answered with a refusal "
                             "(default: 0.15)")


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {value}")
    return value


def parse_sites(text: str | None) -> tuple[str, ...] | None:
    """--sites as a tuple of known sites, or None for all."""
    from ..data.synthetic import SITES

    if text is None:
        return None
    sites = tuple(s.strip() for s in text.split(",") if s.strip())
    if not sites:
        raise SynthArgumentError(f"--sites {text!r} names no site; choose from {','.join(SITES)}")
    bad = [s for s in sites if s not in SITES]
    if bad:
        raise SynthArgumentError(f"--sites: {', '.join(bad)} not known; choose from {','.join(SITES)}")
    return sites


def run(args: argparse.Namespace) -> int:
    from ..data.conversations import attach_conversations
    from ..data.manifest import write_synthetic_dataset
    from ..data.synthetic import SITES

    if args.seed0 < 0:
        raise SynthArgumentError(f"--seed0 must not be negative, got {args.seed0}")
    sites = parse_sites(args.sites)
    t0 = time.perf_counter()
    if getattr(args, "exams", False):
        from ..data.exams import write_exam_dataset

        if args.augment:
            raise SynthArgumentError("--augment does not apply to --exams yet")
        manifest = write_exam_dataset(args.out, args.n, seed0=args.seed0, sites=sites, size=args.size,
                                      appearance=args.appearance)
    else:
        manifest = write_synthetic_dataset(args.out, args.n, seed0=args.seed0, sites=sites, size=args.size,
                                           appearance=args.appearance, augment=args.augment,
                                           progress=True)
    extra = ""
    if args.conversations:
        attach_conversations(manifest, manifest, refusal_rate=args.refusal_rate)
        extra = " with conversations"
    seconds = time.perf_counter() - t0
    rate = args.n / seconds * 60.0 if seconds > 0 else float("inf")
    unit = "examinations" if getattr(args, "exams", False) else "images"
    print(f"umind synth: {args.n} {unit}{extra} ({','.join(sites or SITES)}, {args.size} px) -> {manifest} "
          f"in {seconds:.1f} s ({rate:.0f} {unit}/minute)")
    return 0
