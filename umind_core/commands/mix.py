"""Mix manifests into one training manifest: `umind mix --out DIR/manifest.jsonl PREFIX=MANIFEST ...`.

Each part's records keep their files where they are (paths are rebased, nothing is copied) and get ids prefixed
with PREFIX, so a real import and synthetic rehearsal train together. A part holding held-out records (split
"test") is refused: give each import's train split (DIR/train.jsonl). Rules: umind_core/data/mix.py.
"""

from __future__ import annotations

__all__ = ["NAME", "HELP", "add_arguments", "run"]

NAME = "mix"
HELP = "mix manifests (real imports, synthetic rehearsal) into one training manifest"


def add_arguments(parser) -> None:
    parser.add_argument("parts", nargs="+", metavar="PREFIX=MANIFEST[*COPIES]",
                        help="a part: its id prefix and its manifest (e.g. hc18=imports/hc18/train.jsonl), and how "
                             "many times its records go in (busi=busi/train.jsonl*3; copies keep one group)")
    parser.add_argument("--out", required=True, help="the mixed manifest to write (its folder is created)")


def run(args) -> int:
    from ..data.mix import mix_manifests

    parts = []
    for text in args.parts:
        prefix, sep, path = text.partition("=")
        path, star, copies = path.rpartition("*") if "*" in path else (path, "", "1")
        if not sep or not prefix or not path or not copies.isdigit():
            raise ValueError(f"a part is PREFIX=MANIFEST[*COPIES], got {text!r}")
        parts.append((prefix, path, int(copies)))
    counts = mix_manifests(parts, args.out)
    print(f"umind mix: {sum(counts.values())} records -> {args.out} "
          f"({', '.join(f'{k} {v}' for k, v in counts.items())})")
    return 0
