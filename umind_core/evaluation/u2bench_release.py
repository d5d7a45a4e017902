"""A U2-Bench release read the way its evaluation kit reads it: datasets, prompts, images and ground truth.

The kit (dolphin-sound/u2-bench-evalkit, commit 4ab2465) has four task types, each a dataset class in
`vlmeval/dataset/image_*.py` that loads one TSV per numbered dataset (`TSV_PATH`) through `ImageBaseDataset`
(`image_base_0302.py`): `pd.read_csv(path, sep='\\t')`; the record id is the `index` column as a string, or the row
number; the image is `img_data` (base64; a value of at most 64 characters names another row's index whose image it
shares; a "[...]" value is a list of images) or, without `img_data`, `img_path`. Its scorers (`vlmeval/eval_func`)
read the truth from the same TSV by row position:

- cla: the `classes` column, else `class` (`cla_eval.read_jsonl_with_tsv`). Prompt: `cla_prompt.json[dataset]`.
- seg: `gt_bbox`, else `keypoints` (`seg_eval_v1.1.new_seg_eval`); a cell is parsed as JSON after replacing ' by ",
  a dict gives its first value, a list its first item's first value (`extract_coordinates`); anything but a list is
  "not visible". Prompt: built in `SegDataset.build_prompt` from `anatomy_location`, `hint`, `seg_channel_name`
  and (dataset 48) `keypoints`.
- measurement: `measurement`, parsed per dataset (`measure_eval_v1.2.extract_mea`: EF, the first of IMT,
  abdominal_circumference, else "fat value"; a list gives its first item's first value). Prompt: `mea_prompt.json`.
- report: `caption` (`report_eval.read_jsonl_with_tsv`). Prompt: `ReportDataset.build_prompt`.

Release folder layout (the kit keeps its TSV paths in code, so a release needs a layout of its own):
`DATA/<task_type>/<dataset>.tsv`, the dataset being the kit's id (`cla/74is_normal.tsv`, `seg/04.tsv`), or a
`DATA/tsv_paths.json` mapping {task_type: {dataset: path}} like the kit's `TSV_PATH` dicts (paths relative to DATA).
Our additions, each where the kit would fail: a relative `img_path` is looked up beside its TSV; `class_label` (the
public Hugging Face release's column) and `gt_report` / `report` stand in when the kit's columns are missing.
"""

from __future__ import annotations

import ast
import base64
import binascii
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._u2bench_prompts import CLA_PROMPTS, MEA_PROMPTS
from .u2bench import U2_DATASETS

__all__ = [
    "KIT",
    "MAPPING_FILE",
    "TASK_TYPES",
    "KitDataset",
    "KitItem",
    "U2BenchReleaseError",
    "extract_coordinates",
    "extract_measurement",
    "find_datasets",
    "load_image",
    "read_items",
    "report_prompt",
    "seg_prompt",
    "u2_task",
]

TASK_TYPES: tuple[str, ...] = ("cla", "seg", "measurement", "report")
KIT = "dolphin-sound/u2-bench-evalkit@4ab2465"
MAPPING_FILE = "tsv_paths.json"
#: Datasets whose seg prompt asks for a lesion (`SegDataset.build_prompt`).
LESION_DATASETS: tuple[str, ...] = ("04", "17", "23", "32", "64")
LOCATION_OPTIONS = ("upper left, upper center, upper right, middle left, center, middle right, lower left, "
                    "lower center, lower right, not visible.\n")
_U2_OF_TYPE = {"cla": ("DD", "VRA"), "seg": ("LL", "OD", "KD"), "measurement": ("CVE",), "report": ("RG", "CG")}


class U2BenchReleaseError(ValueError):
    """The release folder is missing or malformed; the message names the file, row or column."""


@dataclass(frozen=True)
class KitDataset:
    task_type: str
    dataset: str
    tsv: Path


@dataclass(frozen=True)
class KitItem:
    """One TSV row: the kit's id, the prompt it sends, the truth its scorer reads, and where the image is."""

    id: str
    row: int
    prompt: str
    truth: Any
    image: Any  # a base64 string, a path, or a list of either (the kit sends every image; we use the first)
    image_ref: str
    is_base64: bool  # image holds base64 data (img_data), not paths (img_path)
    target: str | None = None  # the structure a seg question is about, for a grounded answer


def u2_task(task_type: str, dataset: str) -> str | None:
    """The U2-Score task a kit dataset counts for (the published table's lists), or None when it counts for none."""
    return next((t for t in _U2_OF_TYPE[task_type] if dataset in U2_DATASETS[t]), None)


# ------------------------------------------------------------------------------------------------ discovery

def _mapping(release: Path) -> dict[str, dict[str, Path]]:
    path = release / MAPPING_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise U2BenchReleaseError(f"{path}: not a readable JSON file ({exc})") from None
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        raise U2BenchReleaseError(f"{path}: expected {{task_type: {{dataset: tsv path}}}}")
    bad = sorted(set(raw) - set(TASK_TYPES))
    if bad:
        raise U2BenchReleaseError(f"{path}: unknown task types {bad}; expected some of {list(TASK_TYPES)}")
    return {t: {str(d): release / str(p) for d, p in v.items()} for t, v in raw.items()}


def find_datasets(release: str | Path, task_types: Sequence[str] | None = None,
                  datasets: Sequence[str] | None = None) -> list[KitDataset]:
    """Every dataset of the release in kit order (task type, then dataset id), optionally filtered."""
    release = Path(release)
    if not release.is_dir():
        raise U2BenchReleaseError(f"release {release} does not exist or is not a folder")
    bad = sorted(set(task_types or ()) - set(TASK_TYPES))
    if bad:
        raise U2BenchReleaseError(f"task types {bad} are not the kit's; choose from {', '.join(TASK_TYPES)}")
    if (release / MAPPING_FILE).is_file():
        found = _mapping(release)
    else:
        found = {t: {p.stem: p for p in (release / t).glob("*.tsv")} for t in TASK_TYPES if (release / t).is_dir()}
    out = [KitDataset(t, d, p) for t in TASK_TYPES for d, p in sorted(found.get(t, {}).items())
           if (not task_types or t in task_types) and (not datasets or d in datasets)]
    if not out:
        what = f" matching {list(task_types or [])} {list(datasets or [])}" if task_types or datasets else ""
        raise U2BenchReleaseError(f"release {release} has no datasets{what}: expected <task_type>/<dataset>.tsv "
                                  f"({', '.join(TASK_TYPES)}) or {MAPPING_FILE}")
    for ds in out:
        if not ds.tsv.is_file():
            raise U2BenchReleaseError(f"{ds.task_type}/{ds.dataset}: {ds.tsv} does not exist")
    return out


# ----------------------------------------------------------------------------------------------- truth parsing

def _isna(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def extract_coordinates(cell: Any) -> list | None:
    """A seg cell's centre the kit's way (`seg_eval_v1.1.extract_coordinates`), or None where the kit's region
    rule says "not visible" (anything that is not a list)."""
    if not isinstance(cell, str):
        return cell if isinstance(cell, list) else None
    try:
        data = json.loads(cell.replace("'", '"'))
        # the kit's expressions (list(...)[0], not next(iter(...))): an empty one fails into the except
        value = list(data.values())[0] if isinstance(data, dict) else list(data[0].values())[0]  # noqa: RUF015
    except Exception:  # noqa: BLE001 - the kit's bare except: any failure is 'nan'
        return None
    return value if isinstance(value, list) else None


def extract_measurement(cell: Any, dataset: str) -> Any:
    """A measurement cell's value the kit's way (`measure_eval_v1.2.extract_mea`); None where it gives 'nan'."""
    try:
        data = json.loads(cell.replace("'", '"'))
        if isinstance(data, dict):
            if dataset == "18":
                return data["EF"]
            if dataset == "27":
                return list(data["IMT"])[0]  # noqa: RUF015 - the kit's expression
            if dataset == "31":
                return data
            if dataset == "50":
                return data["abdominal_circumference"]
            return data["fat value"]
        if isinstance(data, list):
            return list(data[0].values())[0]  # noqa: RUF015 - the kit's expression
    except Exception:  # noqa: BLE001 - the kit's bare except
        return None
    return None


def _cla_truth(value: Any, where: str) -> str | int:
    """A class label as the kit compares it: a string, or an integer (pandas' int column; a bool is an int)."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, str):
        return value
    raise U2BenchReleaseError(f"{where}: the class label is {value!r}, not a string or an integer")


# ------------------------------------------------------------------------------------------------ prompts

def seg_prompt(dataset: str, row: dict) -> tuple[str, str]:
    """`SegDataset.build_prompt`'s text for one row, and the structure it asks about (for a grounded answer)."""
    hint = row.get("hint") if not _isna(row.get("hint")) else None
    anatomy = row["anatomy_location"]
    prompt = f"{hint}.\n" if hint is not None else ""
    if dataset in LESION_DATASETS:
        prompt += f"You are a radiologist analyzing an ultrasound image about {anatomy}.\n"
        prompt += ("Your task is to identify the primary location of any visible lesion(s) relative to the boundaries "
                   "of the displayed image. Consider the lesion's center location or most prominent area when "
                   "deciding. Choose the single option from the list below that best describes this location, even "
                   "if the fit is approximate.\n")
        prompt += "Choose the single most appropriate location from the following list: " + LOCATION_OPTIONS
        target = "lesion"
    elif dataset == "48":
        kp = _keypoint_name(row["keypoints"])
        prompt += "You are a radiologist analyzing an ultrasound image of the heart.\n"
        prompt += f"Your task is to determine the {kp}.\n"
        prompt += "Choose the single most appropriate location from the following list: " + LOCATION_OPTIONS
        target = kp
    else:
        channels = row["seg_channel_name"]
        prompt += f"You are a radiologist analyzing an ultrasound image about {anatomy}.\n"
        prompt += ("Your task is to determine the primary location, relative to the image boundaries, for each "
                   f"visible structure listed in {channels}.\n")
        prompt += "*   Consider the structure's center or most prominent area when deciding its location.\n"
        prompt += ("*   Choose the single option from the list below that best describes the location, even if the "
                   "fit is approximate.\n")
        prompt += "Location Options: " + LOCATION_OPTIONS
        target = _first_name(channels)
    prompt += "Output format: only one or two word(s) representing the chosen location. No additional text or " \
              "formatting is allowed."
    return prompt, target


def _keypoint_name(cell: Any) -> str:
    """The first key of dataset 48's keypoints JSON, or the kit's default when the cell is a number or not JSON."""
    if isinstance(cell, float):
        return "heart valve location"
    try:
        return list(json.loads(cell).keys())[0]  # noqa: RUF015 - the kit's expression
    except (json.JSONDecodeError, TypeError):
        return "heart valve location"
    except (AttributeError, IndexError):  # the kit would crash here (a JSON list, an empty dict)
        raise U2BenchReleaseError(f"keypoints {cell!r}: expected a JSON object of named points") from None


def _first_name(channels: Any) -> str:
    """The first structure of a seg_channel_name cell ("['liver', 'kidney']" -> "liver"); "structure" if none."""
    if _isna(channels):
        return "structure"
    text = str(channels)
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text.strip() or "structure"
    if isinstance(value, dict):
        value = list(value)
    if isinstance(value, (list, tuple)) and value:
        return str(value[0])
    return str(value).strip() or "structure"


_CG_EXAMPLES = {
    "10": ("Example1: Fetal phantom ultrasound image showing standard diagnostic plane for abdominal circumference "
           "(AC) measurement\n"
           "Example2: Fetal phantom ultrasound image showing standard diagnostic plane for biparietal diameter (BPD) "
           "measurement\n"
           "Example3: Fetal phantom ultrasound image showing standard diagnostic plane for femur length (FL) "
           "measurement\n"),
    "11": ("Example1: Thyroid nodule in the right lobe. TI-RADS level 3, Benign.\n"
           "Example2: Thyroid nodule in the left lobe. TI-RADS level 3, Benign.\n"
           "Example3: Thyroid nodule in the right lobe. TI-RADS level 4, Benign.\n"),
    "44": ("Example1: no single B-lines, B-lines are fused together into the picture of a white lung\n"
           "Example2: liver on the right side\n"
           "Example3: white lung? "),
}
_RG_TASK = (
    "Your task is generate a concise and informative radiological report based strictly on the visual findings "
    "within the provided image. Your report should describe the primary organ's appearance (size, shape, "
    "borders/capsule), its parenchymal echotexture (e.g., homogeneous, heterogeneous, echogenicity relative to "
    "reference structures), and identify any visible abnormalities (e.g., masses, cysts, fluid collections, "
    "calcifications, ductal dilation). Comment on relevant adjacent structures if visualized. Use standard "
    "radiological terminology.")
_RG_EXAMPLE = (
    "Example: The liver morphology is full with a smooth capsule. The parenchymal echotexture is fine and diffusely "
    "increased. Visualization of the portal venous system is suboptimal. Intrahepatic and extrahepatic bile ducts "
    "are not dilated. The main portal vein diameter is within normal limits. The gallbladder is normal in size and "
    "shape. The wall is smooth and not thickened. No obvious abnormal echoes are seen within the lumen. The pancreas "
    "is normal in size and shape with homogeneous parenchymal echotexture. The pancreatic duct is not dilated. No "
    "definite space-occupying lesion is seen within the pancreas. The spleen is normal in size and shape with "
    "homogeneous parenchymal echotexture. No obvious space-occupying lesion is seen within the spleen.")


def report_prompt(dataset: str, row: dict) -> str:
    """`ReportDataset.build_prompt`'s text for one row (its sentences run together without spaces, as there)."""
    hint = row.get("hint") if not _isna(row.get("hint")) else None
    prompt = f"Hint: {hint}\n" if hint is not None else ""
    prompt += f"You are a radiologist analyzing an ultrasound image focused on the {row['anatomy_location']}."
    if dataset == "39":
        return prompt + _RG_TASK + "Output format: Strings, that is your report." + _RG_EXAMPLE
    prompt += ("Your task is to generate a concise and informative caption that accurately describes the key "
               "anatomical structures and any significant findings visible in the provided ultrasound image.")
    prompt += ("Output format: A single string constituting the image caption. Output only the generated caption "
               "text itself. Do not include any introductory phrases (like \"Caption:\"), labels, explanations, or "
               "additional formatting.")
    return prompt + "Examples:" + _CG_EXAMPLES.get(dataset, "")


# ------------------------------------------------------------------------------------------------ reading

def _read_tsv(path: Path):
    """The TSV as the kit loads it (`smp.file.load` -> `pd.read_csv(path, sep='\\t')`), so types match its scorer."""
    try:
        import pandas as pd
    except ImportError as exc:  # pragma: no cover - pandas comes with the stack (mlflow)
        raise ImportError("reading a U2-Bench release needs pandas: pip install pandas") from exc
    try:
        return pd.read_csv(path, sep="\t")
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # pandas' parser errors are ValueErrors
        raise U2BenchReleaseError(f"{path}: not a readable TSV ({str(exc).splitlines()[0] if str(exc) else exc})") \
            from None


def _images(df, ids: list[str], where: str) -> tuple[list[Any], list[str]]:
    """Each row's image (base64 or path, or a list of them) and a reference to it, following `ImageBaseDataset`."""
    if "img_data" in df.columns:
        data = [str(x) for x in df["img_data"]]
        by_id = dict(zip(ids, data))
        out = []
        for i, (rid, value) in enumerate(zip(ids, data)):
            if len(value) <= 64:  # the kit's space saver: the index of the row whose image this one shares
                if value not in by_id or len(by_id[value]) <= 64:
                    raise U2BenchReleaseError(f"{where} row {i}: img_data {value!r} is neither an image nor the "
                                              "index of a row with one")
                value = by_id[value]
            out.append(_listed(value))
        return out, [f"{where}#index={rid}" for rid in ids]
    if "img_path" in df.columns:
        paths = []
        for i, value in enumerate(df["img_path"]):
            if not isinstance(value, str) or not value.strip():
                raise U2BenchReleaseError(f"{where} row {i}: img_path is {value!r}, not a path")
            paths.append(_listed(value))
        refs = [p if isinstance(p, str) else p[0] for p in paths]
        return paths, refs
    raise U2BenchReleaseError(f"{where}: neither an img_data nor an img_path column")


def _listed(value: str) -> Any:
    """`smp.misc.toliststr`: a "[...]" string is a list of images (read with literal_eval, not the kit's eval)."""
    if value[:1] == "[" and value[-1:] == "]":
        try:
            items = [str(x) for x in ast.literal_eval(value)]
        except (ValueError, SyntaxError):
            raise U2BenchReleaseError(f"image list {value[:60]!r}... is not a list literal") from None
        if not items:
            raise U2BenchReleaseError("an image list is empty")
        return items[0] if len(items) == 1 else items
    return value


def _truth_column(df, ds: KitDataset) -> str | None:
    cols = set(df.columns)
    choices = {"cla": ("classes", "class", "class_label"), "seg": ("gt_bbox", "keypoints"),
               "measurement": ("measurement",), "report": ("caption", "gt_report", "report")}[ds.task_type]
    return next((c for c in choices if c in cols), None)


def _truth(ds: KitDataset, value: Any, where: str, row: dict) -> Any:
    if ds.task_type == "cla":
        return _cla_truth(value, where)
    if ds.task_type == "seg":
        return extract_coordinates(value)
    if ds.task_type == "measurement":
        return extract_measurement(value, ds.dataset) if isinstance(value, str) else None
    for col in ("caption", "gt_report", "report"):  # report: the first of these the row has
        if isinstance(row.get(col), str) and row[col].strip():
            return row[col]
    return None


def _prompt(ds: KitDataset, row: dict) -> tuple[str, str | None]:
    if ds.task_type == "cla":
        table, name = CLA_PROMPTS, "cla_prompt.json"
    elif ds.task_type == "measurement":
        table, name = MEA_PROMPTS, "mea_prompt.json"
    elif ds.task_type == "seg":
        return seg_prompt(ds.dataset, row)
    else:
        return report_prompt(ds.dataset, row), None
    if ds.dataset not in table:
        raise U2BenchReleaseError(f"{ds.task_type}/{ds.dataset}: the kit's {name} has no prompt for dataset "
                                  f"{ds.dataset!r} (it has {', '.join(table)})")
    return table[ds.dataset], None


def read_items(ds: KitDataset) -> list[KitItem]:
    """Every row of one dataset with its prompt and truth; a missing column or label is a release error."""
    df = _read_tsv(ds.tsv)
    where = f"{ds.task_type}/{ds.dataset} ({ds.tsv.name})"
    if len(df) == 0:
        raise U2BenchReleaseError(f"{where}: no rows")
    ids = [str(x) for x in df["index"]] if "index" in df.columns else [str(i) for i in range(len(df))]
    images, refs = _images(df, ids, where)
    column = _truth_column(df, ds)
    if column is None:
        raise U2BenchReleaseError(f"{where}: no ground-truth column for {ds.task_type} (the kit reads "
                                  + {"cla": "classes or class", "seg": "gt_bbox or keypoints",
                                     "measurement": "measurement", "report": "caption"}[ds.task_type] + ")")
    items = []
    for i, row in enumerate(df.to_dict("records")):
        here = f"{where} row {i}"
        try:
            prompt, target = _prompt(ds, row)
        except KeyError as exc:
            raise U2BenchReleaseError(f"{here}: the kit's {ds.task_type} prompt needs the column {exc}") from None
        truth = _truth(ds, row[column], here, row)
        items.append(KitItem(ids[i], i, prompt, truth, images[i], refs[i], "img_data" in df.columns, target))
    return items


def load_image(item: KitItem, tsv: Path, header_only: bool = False) -> np.ndarray | None:
    """The item's (first) image as an RGB array; base64 is decoded as the kit's `decode_base64_to_image` does.

    header_only=True only checks that the image opens (cheap: the release is checked before any model work)."""
    from PIL import Image, UnidentifiedImageError

    value = item.image[0] if isinstance(item.image, list) else item.image
    try:
        if item.is_base64:
            img = Image.open(io.BytesIO(base64.b64decode(value)))
        else:
            path = Path(value)
            img = Image.open(path if path.is_absolute() else tsv.parent / path)
        if header_only:
            return None
        img.load()
    except (OSError, ValueError, binascii.Error, UnidentifiedImageError) as exc:
        raise U2BenchReleaseError(f"{tsv.name} index {item.id}: the image does not decode ({exc})") from None
    return np.array(img.convert("RGB"))
