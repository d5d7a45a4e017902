"""Import a labelled dataset in a published layout as a UMind manifest with training conversations.

Formats (one reader each in umind_core/importers/):
  nnunet      an nnU-Net v2 raw dataset folder: dataset.json, imagesTr/<case>_0000<ending>, labelsTr/, imagesTs/
              (2D PNG, NIfTI, NRRD, MetaImage .mha/.mhd with its data in the file). imagesTs cases without labels
              become unlabelled records of split "test". 0/255 masks are the one label dataset.json names.
  coco        a COCO JSON file (bbox, polygon and RLE segmentations, categories); --images DIR holds the files
              (default: the JSON's folder). An RLE mask with iscrowd 1 (how CVAT exports every mask) is one
              object; iscrowd 1 with polygons or no segmentation is a crowd: left out and counted.
  ultrabench  a folder written by the ultrabench package, <name>_v<version>/{train,validation,test}.json (or
              train_val.json); *_mask keys become objects named after the key, scan_mask the scan area,
              pathology the finding, other class fields (view, quality, ...) go to the record's "labels".
  csv         per-image labels; alone (images relative to the CSV, or --images) or --merge DIR into an earlier
              import (rows matched by image name; --out DIR updates it in place, another --out gets
              manifests that point back at DIR's images and masks).
  slicer      a folder of Slicer exports: images with <stem>.seg.nrrd and <stem>*.mrk.json beside them
              (segments -> masks, fiducials -> keypoints, lines -> lines, ROIs -> boxes). Slicer's default names
              (Segmentation.seg.nrrd, L.mrk.json, F_1.mrk.json..) belong to the folder's only image, and are never a
              label: a default-named line is its description, the one segment's measurement, or --site's.
  hc18        the HC18 release folder: training_set/NNN_HC.png (NNN_2HC.png.. are subject NNN again) with
              NNN_HC_Annotation.png (the head's ellipse, filled to a "fetal head" mask) and
              training_set_pixel_size_and_HC.csv (spacing; the head circumference as measurement "HC mm");
              the subject is the record's "group"; test_set/ images become unlabelled records of split test_set.
  busi        BUSI's benign/, malignant/, normal/ folders ("benign (N).png"): the folder is the finding; the
              original release's "benign (N)_mask.png", "_mask_1.png".. are "breast lesion" objects (one per
              file, or --lesion-masks merged: one per image); normal images have no lesion. Masks are optional.
  folders     the general case of busi: images with mask files by name, NAME.png + NAME_mask.png (+ _mask_1..: one
              object per file; --mask-suffix changes _mask), or images/NAME.* + masks/NAME.* (one file per image;
              lesion kinds one object per blob), in DIR or in its class folders. Masks 0/1 or 0/255 are one label:
              --label, else the class folder's name, else DIR's; a class folder that is a finding (benign,
              malignant, normal and synonyms) is the diagnosis, with "<site> lesion" objects (--site).
  camus       CAMUS: patientNNNN/patientNNNN_{2CH,4CH}_{ED,ES}.nii.gz (.nii, .mha, .mhd) with _gt label maps, values
              1-3 = left ventricle, myocardium, left atrium; site heart; the patient is the group; view, phase
              and Info_*.cfg image quality in "labels"; images under testing/ are split test; cine sequences are
              counted, not imported.

Output layout (--out DIR, a new folder):
  DIR/manifest.jsonl      every record, test split included; each keeps its source split in the key "split"
                          (`umind train` leaves test-split records out of any manifest, with a line saying so)
  DIR/<split>.jsonl       one manifest per split where the source has splits (nnunet: train, test;
                          ultrabench: train, validation / train_val, test; csv: its split column),
                          same relative paths: train with `umind train --manifest DIR/train.jsonl`
  DIR/images/, DIR/masks/ images hard-linked (copied across file systems; NIfTI/NRRD/DICOM converted to PNG)
                          and one 0/255 PNG per object mask
  DIR/import_report.json  every skipped row with its reason, records and groups per split; written when nothing
                          could be imported too (the summary names each reason's first paths)

Splits by group (--split NAME=FRACTION, e.g. --split test=0.2): that fraction of the groups the source leaves
unsplit goes to DIR/NAME.jsonl, the rest to DIR/train.jsonl, whole groups to one side (HC18: a subject's images;
a record without a group is its own), decided by a hash of each group and --split-seed, so a record keeps its side
when the source grows. Records the source splits itself (HC18's test_set) keep their split.

CSV columns (header row, case-insensitive; blank cells are "not given"):
  image                   required: image path (or, with --merge, the image's name)
  finding | diagnosis     the image's finding
  view                    the view (kept in the record's "labels")
  site, report, split     record site, report text, split
  spacing                 mm per pixel (both axes), or spacing_x and spacing_y
  <name>_mm | <name> mm   a measurement in millimetres, e.g. kidney_length_mm -> "kidney length mm"
  <label>_mask            a mask file (0/1 or 0/255) -> an object of that label with its mask, e.g. nodule_mask
  mask, mask_label        the same with the label in its own column ('mask' alone is refused: it names nothing)
  anything else           kept verbatim in the record's "labels"

Label maps split by value; lesion kinds (names with lesion, nodule, mass, cyst, tumour) give one object per
connected blob, other labels one object per value; an empty mask is a negative. Spacing comes from NIfTI/NRRD/DICOM
headers or the CSV. Bad rows are skipped with a reason and counted at the end; an unreadable source is one line on
stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys

NAME = "import"
HELP = ("import a dataset (nnU-Net v2, COCO, UltraBench, CSV labels, Slicer exports, HC18, BUSI, image/mask folders, "
        "CAMUS) as a manifest")
_FORMATS = ("nnunet", "coco", "ultrabench", "csv", "slicer", "hc18", "busi", "folders", "camus")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("format", choices=_FORMATS, metavar="FORMAT", help=f"source layout: {', '.join(_FORMATS)}")
    parser.add_argument("source", metavar="SOURCE", help="the dataset folder, or the COCO JSON / CSV file")
    parser.add_argument("--out", required=True, help="output folder (new; or the --merge folder itself)")
    parser.add_argument("--images", help="coco, csv: folder the image paths are relative to")
    parser.add_argument("--merge", metavar="DIR", help="csv: add the CSV's fields to the records of the import in DIR")
    parser.add_argument("--site", help="site of every record (e.g. thyroid), where the source does not say")
    parser.add_argument("--tasks", help="comma-separated tasks to build conversations for (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the conversation wording (default: 0)")
    parser.add_argument("--split", metavar="NAME=FRACTION",
                        help="hold out that fraction of the groups (subjects) as split NAME, the rest as train")
    parser.add_argument("--split-seed", type=int, default=0, help="seed of --split (default: 0)")
    parser.add_argument("--lesion-masks", choices=("apart", "merged"),
                        help="busi: one lesion object per mask file (apart, the default) or per image (merged)")
    parser.add_argument("--label", help="folders: the label of the masks (default: the class folder's or DIR's name)")
    parser.add_argument("--mask-suffix", help="folders: what follows an image's name in its mask's (default: _mask)")
    parser.add_argument("--no-conversations", action="store_true", help="write the annotations only")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from ..importers import import_dataset

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()] if args.tasks else None
    summary = import_dataset(args.format, args.source, args.out, images=args.images, merge=args.merge,
                             site=args.site, conversations=not args.no_conversations, tasks=tasks, seed=args.seed,
                             progress=not args.no_progress and sys.stderr.isatty(), split=args.split,
                             split_seed=args.split_seed, lesion_masks=args.lesion_masks, label=args.label,
                             mask_suffix=args.mask_suffix)
    print("\n".join(summary.lines(args.format)))
    return 0
