// The image and its label map: one Cornerstone3D stack viewport (a clip is a stack, one image a frame), one
// labelmap segmentation over it that the model's masks fill and the brush and eraser correct.
import {
  RenderingEngine, Enums, init as csInit, imageLoader, cache, utilities, getRenderingEngine,
} from '@cornerstonejs/core';
import * as csTools from '@cornerstonejs/tools';
import dicomImageLoader from '@cornerstonejs/dicom-image-loader';
import { token } from './api.js';

const { ToolGroupManager, BrushTool, StackScrollTool, PanTool, ZoomTool, segmentation, Enums: tEnums } = csTools;
const ENGINE = 'umind-engine';
const VIEWPORT = 'umind-stack';
const TOOLS = 'umind-tools';
const COLORS = [[0, 0, 0, 0], [255, 80, 60, 255], [60, 200, 255, 255], [120, 255, 90, 255],
  [255, 220, 40, 255], [220, 90, 255, 255], [255, 150, 40, 255], [40, 255, 200, 255]];

let state = null; // {imageIds, segImageIds, segmentationId, width, height}
let segCounter = 0;

export async function initViewer(element) {
  await csInit();
  csTools.init();
  dicomImageLoader.init({
    maxWebWorkers: 1,
    wasmBasePath: '/viewer/wasm/',
    beforeSend: async () => (token() ? { Authorization: `Bearer ${token()}` } : {}),
  });
  csTools.addTool(BrushTool);
  csTools.addTool(StackScrollTool);
  csTools.addTool(PanTool);
  csTools.addTool(ZoomTool);
  const group = ToolGroupManager.createToolGroup(TOOLS);
  group.addToolInstance('Brush', BrushTool.toolName, { activeStrategy: 'FILL_INSIDE_CIRCLE' });
  group.addToolInstance('Eraser', BrushTool.toolName, { activeStrategy: 'ERASE_INSIDE_CIRCLE' });
  group.addTool(StackScrollTool.toolName);
  group.addTool(PanTool.toolName);
  group.addTool(ZoomTool.toolName);
  group.setToolActive(StackScrollTool.toolName, { bindings: [{ mouseButton: tEnums.MouseBindings.Wheel }] });
  group.setToolActive(PanTool.toolName, { bindings: [{ mouseButton: tEnums.MouseBindings.Auxiliary }] });
  group.setToolActive(ZoomTool.toolName, { bindings: [{ mouseButton: tEnums.MouseBindings.Secondary }] });
  const engine = new RenderingEngine(ENGINE);
  engine.setViewports([{ viewportId: VIEWPORT, type: Enums.ViewportType.STACK, element,
    defaultOptions: { background: [0, 0, 0] } }]);
  group.addViewport(VIEWPORT, ENGINE);
  segmentation.config.style.setStyle({ type: tEnums.SegmentationRepresentations.Labelmap },
    { renderOutline: false, fillAlpha: 0.5, renderFill: true });
  new ResizeObserver(() => engine.resize(true, true)).observe(element);
  return engine;
}

export const viewport = () => getRenderingEngine(ENGINE)?.getViewport(VIEWPORT);
export const loaded = () => state;

/** Show a stack and give it an empty label map (one labelmap image per frame). */
export async function showStack(imageIds, { width, height }) {
  const vp = viewport();
  if (state) {
    segmentation.removeAllSegmentationRepresentations();
    segmentation.removeAllSegmentations();
  }
  await vp.setStack(imageIds, 0);
  vp.resetCamera();
  const segImages = imageLoader.createAndCacheDerivedLabelmapImages(imageIds);
  const segmentationId = `umind-seg-${++segCounter}`;
  segmentation.addSegmentations([{ segmentationId, representation: {
    type: tEnums.SegmentationRepresentations.Labelmap, data: { imageIds: segImages.map((i) => i.imageId) } } }]);
  await segmentation.addSegmentationRepresentations(VIEWPORT, [
    { segmentationId, type: tEnums.SegmentationRepresentations.Labelmap }]);
  segmentation.activeSegmentation.setActiveSegmentation(VIEWPORT, segmentationId);
  COLORS.forEach((c, i) => i && segmentation.config.color.setSegmentIndexColor(VIEWPORT, segmentationId, i, c));
  segmentation.segmentIndex.setActiveSegmentIndex(segmentationId, 1);
  state = { imageIds, segImageIds: segImages.map((i) => i.imageId), segmentationId, width, height };
  vp.render();
  return state;
}

export const frameCount = () => (state ? state.imageIds.length : 0);
export const currentFrame = () => viewport()?.getCurrentImageIdIndex() ?? 0;
export async function setFrame(k) {
  const vp = viewport();
  await vp.setImageIdIndex(Math.max(0, Math.min(frameCount() - 1, k)));
}

/** Frame k's label map as Uint8 (row-major, x fastest), a copy. */
export function frameMask(k) {
  return Uint8Array.from(cache.getImage(state.segImageIds[k]).voxelManager.getScalarData());
}

export function setFrameMask(k, u8) {
  cache.getImage(state.segImageIds[k]).voxelManager.getScalarData().set(u8);
}

export function maskChanged() {
  segmentation.triggerSegmentationEvents.triggerSegmentationDataModified(state.segmentationId);
  viewport().render();
}

/** All frames' label maps in one Uint8Array (frame after frame), as the NRRD the server takes. */
export function allMasks() {
  const n = state.width * state.height;
  const out = new Uint8Array(n * frameCount());
  for (let k = 0; k < frameCount(); k++) out.set(frameMask(k), k * n);
  return out;
}

export function setOverlayVisible(on) {
  segmentation.config.visibility.setSegmentationRepresentationVisibility(
    VIEWPORT, { segmentationId: state.segmentationId, type: tEnums.SegmentationRepresentations.Labelmap }, on);
  viewport().render();
}

export function setActiveLabel(value) {
  segmentation.segmentIndex.setActiveSegmentIndex(state.segmentationId, value);
}

/** 'brush' | 'eraser' | null (null frees the left button for clicks and the box). */
export function setPaintTool(name) {
  const group = ToolGroupManager.getToolGroup(TOOLS);
  for (const t of ['Brush', 'Eraser']) group.setToolPassive(t);
  if (name) group.setToolActive(name === 'brush' ? 'Brush' : 'Eraser',
    { bindings: [{ mouseButton: tEnums.MouseBindings.Primary }] });
}

export function setBrushSize(px) {
  csTools.utilities.segmentation.setBrushSizeForToolGroup(TOOLS, px);
}
export const brushSize = () => csTools.utilities.segmentation.getBrushSizeForToolGroup(TOOLS);

/** Image pixel (x, y) of the current frame -> canvas (CSS px in the viewport element). */
export function imageToCanvas(x, y) {
  const vp = viewport();
  const world = utilities.imageToWorldCoords(vp.getCurrentImageId(), [x, y]);
  return vp.worldToCanvas(world);
}

/** Canvas (CSS px in the element) -> image pixel [x, y] of the current frame (fractional). */
export function canvasToImage(cx, cy) {
  const vp = viewport();
  return utilities.worldToImageCoords(vp.getCurrentImageId(), vp.canvasToWorld([cx, cy]));
}

export const onRendered = (element, fn) => element.addEventListener(Enums.Events.IMAGE_RENDERED, fn);
export const onFrameChanged = (element, fn) => element.addEventListener(Enums.Events.STACK_NEW_IMAGE, fn);
export const undo = () => utilities.HistoryMemo.DefaultHistoryMemo.undo();
