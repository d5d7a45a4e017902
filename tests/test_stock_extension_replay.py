"""The stock MONAILabel Slicer extension (0.8.5) replayed against the real UMind server, replies loaded with MRML.

Requests go through the extension's own client (`MONAILabelLib/client.py` from the monailabel wheel, which
ships the plugin under `<venv>/monailabel/plugins/slicer`), with the params its widget builds
(`MONAILabel.py`: the task's /info config with list options reduced to their first item,
`result_extension` ".nrrd" and `result_dtype` "uint8" from its logic, `client_id` from its client, IJK clicks
rounded from RAS, the ROI as [i0, i1, j0, j1, k0, k1], `slice`, `label` = the edited segment, `label_info` as
a list on save). Replies are loaded as its `updateSegmentationMask` does, with slicer-core standing in for
Slicer: the volume through the Volumes logic's archetype loader without the single-file option (what
`slicer.util.loadVolume` does), a label map read with SimpleITK and imported into the segmentation by segment
names (its `PushVolumeToSlicer` is done as a NRRD round trip, which keeps the same LPS->RAS geometry), and a
.json reply loaded as markups and renamed "Detection ROI - i".

slicer-core has no PNG reader, so the PNG study's volume is built as ITK's PNG reader places it (1 mm, origin
0, LPS axes); the other studies (2D DICOM with only ultrasound-region spacing, 2D NRRD with spacing and
origin, a 3-frame DICOM cine clip) are loaded by slicer-core itself. Everything the widget does with qt (the
segment editor's effect for a 2D interactive reply) is done with the same MRML calls on the segment.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import lesion_boxes, make_image
from server_utils import start_server

slicer = pytest.importorskip("slicer")
vtk = pytest.importorskip("vtk")
if not hasattr(slicer, "vtkMRMLScene"):
    pytest.skip("slicer-core (headless MRML) is not installed", allow_module_level=True)
PLUGIN = Path(sys.prefix) / "monailabel" / "plugins" / "slicer" / "MONAILabel"
if not (PLUGIN / "MONAILabelLib" / "client.py").exists():
    pytest.skip("the monailabel wheel's Slicer plugin is not installed", allow_module_level=True)
sys.path.insert(0, str(PLUGIN))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "slicer_module" / "UMind"))

from MONAILabelLib.client import MONAILabelClient, MONAILabelClientException  # noqa: E402
from UMindLib import mrml  # noqa: E402

pytestmark = [pytest.mark.server, pytest.mark.slow]

(Y0, Y1, X0, X1), = lesion_boxes(256, 256, 1)
STUDIES = ("scan_png", "scan_dcm", "scan_nrrd", "clip")
LESION_FRAMES = {"clip": (0, 2)}  # frame 1 of the clip is blank


def grey() -> np.ndarray:
    return make_image(0)[..., 0]


def write_dicom(path: Path, frames: list[np.ndarray]) -> None:
    """US DICOM with spacing only in SequenceOfUltrasoundRegions (0.02 cm = 0.2 mm), as scanners send it."""
    from pydicom.sequence import Sequence

    from fixtures_imaging import US_IMAGE_STORAGE, US_MULTIFRAME_STORAGE, _dataset, _set_pixels, region

    many = len(frames) > 1
    ds = _dataset(path, US_MULTIFRAME_STORAGE if many else US_IMAGE_STORAGE)
    _set_pixels(ds, np.stack(frames) if many else frames[0], "MONOCHROME2", frames=len(frames))
    ds.SequenceOfUltrasoundRegions = Sequence([region(0, 0, 255, 255, 0.02, 0.02)])
    ds.save_as(str(path), write_like_original=False)


@pytest.fixture(scope="module")
def server(tmp_path_factory, trained_tiny):
    from fixtures_imaging import sitk_volume

    root = tmp_path_factory.mktemp("umind_stock_replay")
    studies, model_dir = root / "studies", root / "model"
    studies.mkdir()
    trained_tiny.save_pretrained(model_dir)
    Image.fromarray(grey()).save(studies / "scan_png.png")
    write_dicom(studies / "scan_dcm.dcm", [grey()])
    sitk_volume(studies / "scan_nrrd.nrrd", grey(), spacing=(0.5, 0.5), origin=(10.0, 20.0))
    write_dicom(studies / "clip.dcm", [grey(), np.full((256, 256), 200, np.uint8), grey()])
    conf = {"model": str(model_dir), "workdir": str(root / "work"), "retrain_every": "100",
            "max_new_tokens": "64", "rehearsal_pool": "4", "regression_size": "2"}
    srv = start_server(studies, conf, root / "server.log", env={"MONAI_LABEL_AUTO_UPDATE_SCORING": "false"},
                       timeout=300)  # a start-up guard on a shared 2-core machine, not a goal
    yield srv
    srv.stop()


class Extension:
    """The parts of the extension's widget and logic that build requests and load replies, on a bare scene."""

    def __init__(self, server, tmp: Path):
        self.tmp = tmp
        self.client = MONAILabelClient(server.url, str(tmp), "user-xyz")  # its logic: client_id default
        self.info = self.client.info()
        self.scene = slicer.vtkMRMLScene()
        mrml.ensure_node_classes(self.scene)
        self.volumes = slicer.vtkSlicerVolumesLogic()
        self.volumes.SetMRMLScene(self.scene)
        self.volume = self.segmentation = None
        self.server = server

    # ---------------------------------------------------------------- onNextSample / initSample
    def load(self, image_id: str) -> None:
        name = next(o for o in self.client.datastore()["objects"] if o == image_id)
        ext = self.client.datastore()["objects"][name]["image"]["ext"]
        path = self.tmp / f"{image_id}{ext}"  # SampleData.downloadFromURL(fileNames=image name)
        with urllib.request.urlopen(f"{self.server.url}/datastore/image?image={image_id}", timeout=60) as r:
            path.write_bytes(r.read())
        if ext == ".png":
            self.volume = png_volume(self.scene, path)
        else:
            self.volume = self.volumes.AddArchetypeVolume(str(path), image_id, 8)  # loadVolume: no singleFile
        assert self.volume is not None and self.volume.GetImageData() is not None
        self.segmentation = self.scene.AddNewNodeByClass("vtkMRMLSegmentationNode")
        self.segmentation.SetReferenceImageGeometryParameterFromVolumeNode(self.volume)
        for label in self.info.get("labels", []):  # updateSegmentationMask(None, info labels)
            if not self.segmentation.GetSegmentation().GetSegmentIdBySegmentName(label):
                self.segmentation.GetSegmentation().AddEmptySegment(label, label)

    # ---------------------------------------------------------------- logic.infer
    def infer(self, model: str, image_id: str, params: dict):
        params = dict(params)
        params["result_extension"] = ".nrrd"
        params["result_dtype"] = "uint8"
        return self.client.infer(model, image_id, params)

    def config(self, model: str) -> dict:
        """getParamsFromConfig("infer", model)."""
        cfg = self.info["models"][model].get("config", {})
        return {k: v[0] if isinstance(v, list) else v for k, v in cfg.items()}

    def segment(self, image_id: str, model: str = "umind_segment", **edits) -> dict:
        """onClickSegmentation: the config table (as the user edited it), reply imported by label names."""
        result_file, params = self.infer(model, image_id, {**self.config(model), **edits})
        labels = params.get("label_names") or self.info["models"][model].get("labels")
        if isinstance(labels, dict):
            labels = [k for k, _ in sorted(labels.items(), key=lambda item: item[1])]
        self.import_labels(result_file, labels)
        return params

    def import_labels(self, result_file: str, labels: list[str]) -> None:
        if result_file.endswith(".json"):
            self.load_detections(result_file)
            return
        node = self.push_label_volume(result_file)
        ids = vtk.vtkStringArray()
        for label in labels:
            if label != "background":
                ids.InsertNextValue(label)
        slicer.vtkSlicerSegmentationsModuleLogic.ImportLabelmapToSegmentationNode(node, self.segmentation, ids)
        self.scene.RemoveNode(node)

    def push_label_volume(self, result_file: str):
        """sitk.ReadImage + sitkUtils.PushVolumeToSlicer(className=vtkMRMLLabelMapVolumeNode)."""
        import SimpleITK as sitk

        image = sitk.ReadImage(result_file)
        staged = self.tmp / "pushed.nrrd"
        sitk.WriteImage(image, str(staged))
        node = self.volumes.AddArchetypeVolume(str(staged), "pushed", 1 | 4)
        assert node is not None and node.IsA("vtkMRMLLabelMapVolumeNode")
        return node

    def load_detections(self, path: str) -> None:
        """slicer.util.loadMarkups, then every ROI but "Scribbles ROI" renamed "Detection ROI - i"."""
        logic = slicer.vtkSlicerMarkupsLogic()
        logic.SetMRMLScene(self.scene)
        assert logic.LoadMarkups(path, ""), f"Slicer cannot load the markups reply {Path(path).read_text()[:300]}"
        rois = self.scene.GetNodesByClass("vtkMRMLMarkupsROINode")
        for i in range(rois.GetNumberOfItems()):
            roi = rois.GetItemAsObject(i)
            if roi.GetName() != "Scribbles ROI":
                roi.SetName(f"Detection ROI - {i}")

    # ---------------------------------------------------------------- onClickDeepgrow (2D model)
    def deepgrow(self, image_id: str, label: str, foreground: list, roi: list | None = None,
                 red_offset_mm: float = 0.0) -> dict:
        model = "umind_interactive"
        is_3d = self.info["models"][model].get("dimension", 3) != 2
        assert not is_3d
        current = foreground[-1] if foreground else [None, None, round(abs(red_offset_mm))]
        slice_index = current[2]
        params = {"label": label, "foreground": foreground if not slice_index else
                  [x for x in foreground if x[2] == slice_index], "background": []}
        params.update(self.config(model))
        if roi:
            params["roi"] = roi
        params["slice"] = slice_index
        result_file, reply = self.infer(model, image_id, params)
        import SimpleITK as sitk

        arr = sitk.GetArrayFromImage(sitk.ReadImage(result_file))
        self.last_label = arr if arr.ndim == 3 else arr[None]
        self.update_one_slice(result_file, [label], slice_index)
        return reply

    def update_one_slice(self, result_file: str, labels: list[str], k: int) -> None:
        """updateSegmentationMask with sliceIndex: all labels imported as new segments, the i-th one's slice k
        replaces slice k of the existing segment labels[i] (the Logical operators effect), new ones removed."""
        seg = self.segmentation.GetSegmentation()
        before = seg.GetNumberOfSegments()
        node = self.push_label_volume(result_file)
        slicer.vtkSlicerSegmentationsModuleLogic.ImportLabelmapToSegmentationNode(node, self.segmentation)
        self.scene.RemoveNode(node)
        added = [seg.GetNthSegmentID(before + i) for i in range(seg.GetNumberOfSegments() - before)]
        for i, new_id in enumerate(added):
            label = labels[i] if i < len(labels) else None
            if label and seg.GetSegmentIdBySegmentName(label):
                target = seg.GetSegmentIdBySegmentName(label)
                current = mrml.segment_array(self.scene, self.segmentation, target, self.volume)
                incoming = mrml.segment_array(self.scene, self.segmentation, new_id, self.volume)
                current[k] = incoming[k]
                self.set_segment(target, current)
            self.segmentation.RemoveSegment(new_id)

    def set_segment(self, segment_id: str, array: np.ndarray) -> None:
        names = {self.segmentation.GetSegmentation().GetSegment(segment_id).GetName(): 1}
        mrml.label_map_to_segmentation(self.scene, self.volume, array.astype(np.uint8), names,
                                       self.segmentation, True, 0)

    def roi_ijk(self, i0: float, i1: float, j0: float, j1: float, k: int) -> list[int]:
        """getROIPointsXYZ of an ROI drawn over voxels i0..i1, j0..j1 on frame k."""
        roi = self.scene.AddNewNodeByClass("vtkMRMLMarkupsROINode", "SAM2 ROI")
        a, b = self.ras(i0, j0, k), self.ras(i1, j1, k)
        roi.SetCenter(*[(p + q) / 2 for p, q in zip(a, b)])
        roi.SetSize(*[abs(p - q) for p, q in zip(a, b)][:2], 0.5)
        center, size = [0.0] * 3, roi.GetSize()
        roi.GetCenter(center)
        lo = self.ijk([c - s / 2 for c, s in zip(center, size)])
        hi = self.ijk([c + s / 2 for c, s in zip(center, size)])
        return [v for pair in zip(lo, hi) for v in pair]

    # ---------------------------------------------------------------- geometry helpers
    def ras(self, i: float, j: float, k: float) -> list[float]:
        m = vtk.vtkMatrix4x4()
        self.volume.GetIJKToRASMatrix(m)
        return list(m.MultiplyPoint([i, j, k, 1.0])[:3])

    def ijk(self, ras) -> list[int]:
        m = vtk.vtkMatrix4x4()
        self.volume.GetRASToIJKMatrix(m)
        return [round(v) for v in m.MultiplyPoint([*ras, 1.0])[:3]]

    def segment_mask(self, name: str) -> np.ndarray:
        seg_id = self.segmentation.GetSegmentation().GetSegmentIdBySegmentName(name)
        assert seg_id, f"no segment {name!r}"
        return mrml.segment_array(self.scene, self.segmentation, seg_id, self.volume).astype(bool)


def png_volume(scene, path: Path):
    """A PNG as Slicer's ITK PNG reader places it: spacing 1, origin 0, LPS axes (i -> -R, j -> -A)."""
    from vtk.util import numpy_support

    pixels = np.asarray(Image.open(path).convert("L"))
    vol = scene.AddNewNodeByClass("vtkMRMLScalarVolumeNode", path.stem)
    img = vtk.vtkImageData()
    img.SetDimensions(pixels.shape[1], pixels.shape[0], 1)
    img.GetPointData().SetScalars(numpy_support.numpy_to_vtk(np.ascontiguousarray(pixels).ravel(), deep=True))
    vol.SetAndObserveImageData(img)
    vol.SetIJKToRASDirections(-1, 0, 0, 0, -1, 0, 0, 0, 1)
    return vol


def lesion_mask() -> np.ndarray:
    m = np.zeros((256, 256), bool)
    m[Y0:Y1, X0:X1] = True
    return m


def dice(a: np.ndarray, b: np.ndarray) -> float:
    return float(2 * (a & b).sum() / max(a.sum() + b.sum(), 1))


@pytest.fixture
def ext(server, tmp_path):
    return Extension(server, tmp_path)


# ---------------------------------------------------------------------------------------------- tests
def test_the_extension_lists_the_tasks_it_can_show_and_the_others_say_where_to_go(ext):
    types = {k: v["type"] for k, v in ext.info["models"].items()}
    shown = {k for k, t in types.items() if t in ("segmentation", "detection", "deepgrow", "deepedit")}
    assert shown == {"umind_segment", "umind_detect", "umind_interactive"}  # its three selectors' types
    for hidden in set(types) - shown:
        assert "UMind Slicer module" in ext.info["models"][hidden]["description"]
    assert ext.info["labels"] == ["lesion"]
    assert ext.info["models"]["umind_interactive"]["dimension"] == 2  # so it sends `slice`


@pytest.mark.parametrize("image_id", STUDIES)
def test_segment_reply_lands_on_the_lesion(ext, image_id):
    ext.load(image_id)
    frames = LESION_FRAMES.get(image_id, (0,))
    assert ext.volume.GetImageData().GetDimensions()[2] == (3 if image_id == "clip" else 1)
    params = ext.segment(image_id)
    assert params["label_names"] == {"lesion": 1}
    mask = ext.segment_mask("lesion")
    for k in frames:
        assert dice(mask[k], lesion_mask()) > 0.7, (image_id, k)


@pytest.mark.parametrize("image_id", STUDIES)
def test_detect_rois_load_over_the_lesion_with_our_names(ext, image_id):
    ext.load(image_id)
    ext.segment(image_id, model="umind_detect")
    rois = ext.scene.GetNodesByClass("vtkMRMLMarkupsROINode")
    centres = {}
    for i in range(rois.GetNumberOfItems()):
        roi = rois.GetItemAsObject(i)
        assert roi.GetName().startswith("Detection ROI - ")  # the extension's rename
        assert roi.GetNthControlPointLabel(0).startswith("lesion")  # our name survives it
        c = [0.0] * 3
        roi.GetCenter(c)
        i_, j_, k_ = ext.ijk(c)
        centres[k_] = (i_, j_)
    for k in LESION_FRAMES.get(image_id, (0,)):
        i_, j_ = centres[k]
        assert abs(i_ - (X0 + X1) / 2) < 12 and abs(j_ - (Y0 + Y1) / 2) < 12, (image_id, k, centres)


def test_an_empty_markups_reply_loads(tmp_path):
    """What the detect task writes when nothing is found (imageio.write_markups_json([])) is loadable."""
    from umind_core.imageio import write_markups_json

    path = write_markups_json([], tmp_path / "none.mrk.json", empty_name="umind: nothing found (cyst)")
    scene = slicer.vtkMRMLScene()
    logic = slicer.vtkSlicerMarkupsLogic()
    logic.SetMRMLScene(scene)
    assert logic.LoadMarkups(str(path), "")
    node = scene.GetFirstNodeByClass("vtkMRMLMarkupsFiducialNode")
    assert node.GetName() == "umind: nothing found (cyst)" and node.GetNumberOfControlPoints() == 0


@pytest.mark.parametrize("image_id", STUDIES)
def test_click_reply_goes_into_the_edited_segment_on_its_frame(ext, image_id):
    """The reply names the edited segment and only the clicked frame, and the import leaves the other frames as
    they were. (The fixture model memorised text prompts and never saw clicks: its click answers are empty, so
    what is checked on the clicked frame is that an empty answer leaves the segment as it was, since Slicer
    imports no segment from an empty label map; a non-empty answer would have to replace the frame.)"""
    ext.load(image_id)
    ext.segment(image_id)
    before = ext.segment_mask("lesion")
    k = 2 if image_id == "clip" else 0
    click = ext.ijk(ext.ras((X0 + X1) / 2, (Y0 + Y1) / 2, k))
    assert click[2] == k
    reply = ext.deepgrow(image_id, "lesion", [click])
    assert reply["label_names"] == {"lesion": 1}
    assert [r["frame_index"] for r in reply["umind"]["results"]] == [k]
    assert set(np.unique(ext.last_label)) <= {0, 1} and ext.last_label.shape == before.shape
    after = ext.segment_mask("lesion")
    others = [j for j in range(before.shape[0]) if j != k]
    assert (after[others] == before[others]).all()
    if ext.last_label[k].any():
        assert (after[k] == (ext.last_label[k] == 1)).all()
    else:  # Slicer imports no segment from an empty label map, so the extension leaves the frame as it was
        assert (after[k] == before[k]).all()
    assert (np.delete(after, k, axis=0) == np.delete(before, k, axis=0)).all()
    assert before[k].any() and (ext.last_label[k] == 1).sum() != before[k].sum()  # frame k really was replaced


@pytest.mark.parametrize("image_id", ["scan_nrrd", "clip"])
def test_roi_without_clicks_runs_on_the_viewed_frame(ext, image_id):
    ext.load(image_id)
    k = 2 if image_id == "clip" else 0
    roi = ext.roi_ijk(X0, X1, Y0, Y1, k)
    offset = ext.ras(0, 0, k)[2]  # the Red (axial) view's offset when it shows frame k
    reply = ext.deepgrow(image_id, "lesion", [], roi=roi, red_offset_mm=offset)
    assert [r["frame_index"] for r in reply["umind"]["results"]] == [k]


def test_a_prompt_without_a_segment_is_refused_with_the_fix(ext):
    ext.load("scan_nrrd")
    with pytest.raises(MONAILabelClientException) as err:
        ext.segment("scan_nrrd", prompt="cyst")
    assert "Status: 400" in err.value.msg and "has no segment" in err.value.msg and "--conf labels" in err.value.msg
    assert ext.segment("scan_nrrd", prompt="Lesion")["label_names"] == {"lesion": 1}  # its segment's name


def test_submit_label_names_from_its_list_and_roi_json_is_refused_uncounted(ext, server):
    ext.load("scan_nrrd")
    ext.segment("scan_nrrd")
    seg = ext.segmentation.GetSegmentation()
    ids = vtk.vtkStringArray()
    label_info = []
    for idx in range(seg.GetNumberOfSegments()):  # onSaveLabel
        ids.InsertNextValue(seg.GetNthSegmentID(idx))
        label_info.append({"name": seg.GetNthSegment(idx).GetName(), "idx": idx + 1})
    labelmap = ext.scene.AddNewNodeByClass("vtkMRMLLabelMapVolumeNode")
    assert slicer.vtkSlicerSegmentationsModuleLogic.ExportSegmentsToLabelmapNode(ext.segmentation, ids, labelmap,
                                                                                 ext.volume)
    label_in = ext.tmp / "label.nii.gz"  # its default file_ext
    storage = labelmap.CreateDefaultStorageNode()
    storage.SetFileName(str(label_in))
    assert storage.WriteData(labelmap)
    before = server.get_json("/info/")["umind"]["trigger"]["since_last_run"]
    reply = ext.client.save_label("scan_nrrd", str(label_in), params={"label_info": label_info})
    assert reply["image"] == "scan_nrrd"
    stored = server.get_json("/datastore/?output=all")["objects"]["scan_nrrd"]["labels"]["final"]["info"]
    assert stored["label_names"] == {"lesion": 1}
    assert server.get_json("/info/")["umind"]["trigger"]["since_last_run"] == before + 1

    ext.segment("scan_nrrd", model="umind_detect")  # "Submit Label" with umind_detect selected
    roi = ext.scene.GetFirstNodeByClass("vtkMRMLMarkupsROINode")
    storage = slicer.vtkMRMLMarkupsJsonStorageNode()
    ext.scene.AddNode(storage)
    storage.SetFileName(str(ext.tmp / "roi.json"))
    assert storage.WriteData(roi)
    doc = {"@schema": "x", "markups": [json.loads((ext.tmp / "roi.json").read_text())["markups"][0]]}
    (ext.tmp / "label.json").write_text(json.dumps(doc))  # onGenerateJSONFromMulipltROIs
    with pytest.raises(MONAILabelClientException) as err:
        ext.client.save_label("scan_nrrd", str(ext.tmp / "label.json"), params={"label_info": []})
    assert "Status: 400" in err.value.msg and "markups JSON" in err.value.msg
    assert server.get_json("/info/")["umind"]["trigger"]["since_last_run"] == before + 1


def test_sample_studies_load_one_image_per_file_with_spacing(tmp_path):
    from monailabel_app.samples import write_sample_studies

    assert write_sample_studies(tmp_path, n=8) == 8
    scene = slicer.vtkMRMLScene()
    logic = slicer.vtkSlicerVolumesLogic()
    logic.SetMRMLScene(scene)
    files = sorted(tmp_path.glob("*.nrrd"))
    assert len(files) == 8
    for path in files:
        node = logic.AddArchetypeVolume(str(path), path.stem, 8)  # loadVolume without singleFile
        assert node.GetImageData().GetDimensions()[2] == 1, path.name
        assert node.GetSpacing()[0] != 1.0  # the generator's spacing, not ITK's default
    numbered = tmp_path / "numbered"  # why the names carry no digits: numbered same-size files stack
    numbered.mkdir()
    for n, path in enumerate(files[:3]):
        (numbered / f"syn-500000{n}.nrrd").write_bytes(path.read_bytes())
    assert logic.AddArchetypeVolume(str(numbered / "syn-5000001.nrrd"), "x", 8).GetImageData().GetDimensions()[2] == 3
