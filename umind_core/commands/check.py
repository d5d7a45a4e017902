"""Check a training manifest: required fields, files, findings, masks and the shape of `annotations`.

Each problem is printed as MANIFEST:LINE: FIELD: PROBLEM, then a summary (records checked, kept, skipped by
reason). An empty mask is a note, not an error: the image shows no such object (a negative), and training does
not draw it. A mask with several non-zero values is a multi-class label map: it is split by value when the object
names the values in `label_names` ({"1": "kidney", "2": "renal sinus"}), else refused. The rules are in
umind_core/data/check.py; `umind train` runs the same check first and trains on the records that pass.

Exit status: 0 when the check ran (bad records are reported and would be skipped), 1 with --strict when there is
any problem (notes do not count), 2 when the manifest cannot be read at all.
"""

from __future__ import annotations

import json

__all__ = ["NAME", "HELP", "add_arguments", "run"]

NAME = "check"
HELP = "check a manifest before training (fields, files, findings, masks); lists what training would skip"


def add_arguments(parser) -> None:
    parser.add_argument("manifest", help="the manifest (JSONL) to check")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 on any problem (default: report them, exit 0; training skips those records)")
    parser.add_argument("--json", action="store_true",
                        help="print the result as one JSON object (problems with line, field, reason, severity)")


def run(args) -> int:
    """Print what check_manifest found; the exit status is the only decision made here."""
    from ..data.check import check_manifest, report_lines

    result = check_manifest(args.manifest)
    if args.json:
        print(json.dumps(result.to_json(args.manifest), indent=2))
    else:
        print("\n".join(report_lines(result, args.manifest)))
    return 1 if args.strict and result.errors else 0
