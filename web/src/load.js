// A study's bytes -> Cornerstone image ids, one per frame. The format is told by content (as the server tells
// it): DICOM through Cornerstone's own loader (its codecs, its ultrasound-region calibration), PNG/JPEG
// decoded by the browser, NRRD by nrrd.js; the last three become local images with the file's spacing.
import { imageLoader, metaData, utilities } from '@cornerstonejs/core';
import dicomImageLoader from '@cornerstonejs/dicom-image-loader';
import dicomParser from 'dicom-parser';
import { readNrrd } from './nrrd.js';
import { isGzip, readNifti } from './nifti.js';

let studyCounter = 0;

export function sniff(bytes) {
  const b = new Uint8Array(bytes.slice(0, 132));
  const ascii = (i, n) => String.fromCharCode(...b.subarray(i, i + n));
  if (b.length >= 132 && ascii(128, 4) === 'DICM') return 'dicom';
  if (b[0] === 0x89 && ascii(1, 3) === 'PNG') return 'png';
  if (b[0] === 0xff && b[1] === 0xd8) return 'jpeg';
  if (ascii(0, 4) === 'NRRD') return 'nrrd';
  if (isGzip(b) || (b.length >= 348 && ascii(344, 3) === 'n+1')) return 'nifti';
  return null;
}

function toGray(rgba, n, channels = 4) {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) {
    const j = i * channels;
    out[i] = Math.round(0.299 * rgba[j] + 0.587 * rgba[j + 1] + 0.114 * rgba[j + 2]);
  }
  return out;
}

function range(frames) {
  let lo = Infinity; let hi = -Infinity;
  for (const f of frames) for (let i = 0; i < f.length; i++) { const v = f[i]; if (v < lo) lo = v; if (v > hi) hi = v; }
  return hi > lo ? { lower: lo, upper: hi } : { lower: lo, upper: lo + 1 };
}

function local(frames, width, height, spacing, origin) {
  const id = ++studyCounter;
  const { lower, upper } = range(frames);
  return frames.map((scalarData, k) => {
    const imageId = `umind:${id}/${k}`;
    const image = imageLoader.createAndCacheLocalImage(imageId, { scalarData, dimensions: [width, height],
      spacing: [spacing[0], spacing[1]], origin: origin ?? [0, 0, k], direction: [1, 0, 0, 0, 1, 0],
      frameOfReferenceUID: `umind-${id}` });
    // a local image starts with a window of width 0, which the stack viewport turns into an inverted ramp
    image.windowCenter = (lower + upper) / 2;
    image.windowWidth = upper - lower;
    // what the stack viewport asks of any image besides its plane and pixels
    const meta = {
      generalSeriesModule: { modality: 'US', seriesInstanceUID: `umind-${id}`, seriesNumber: 1 },
      generalImageModule: { instanceNumber: k + 1 },
      modalityLutModule: { rescaleSlope: 1, rescaleIntercept: 0 },
      voiLutModule: { windowCenter: [(lower + upper) / 2], windowWidth: [upper - lower] },
    };
    for (const [type, metadata] of Object.entries(meta)) utilities.genericMetadataProvider.add(imageId, { type, metadata });
    return imageId;
  });
}

async function web(bytes, type) {
  const bitmap = await createImageBitmap(new Blob([bytes], { type }));
  const { width, height } = bitmap;
  const canvas = new OffscreenCanvas(width, height);
  const ctx = canvas.getContext('2d');
  ctx.drawImage(bitmap, 0, 0);
  const gray = toGray(ctx.getImageData(0, 0, width, height).data, width * height);
  return { imageIds: local([gray], width, height, [1, 1]), width, height, unit: 'px', voi: range([gray]) };
}

async function nrrd(bytes) {
  const { sizes, data, spacing } = await readNrrd(bytes);
  let width, height, frames;
  const asType = (a) => (a instanceof Uint8Array || a instanceof Uint16Array || a instanceof Int16Array
    || a instanceof Float32Array ? a : Float32Array.from(a));
  if (sizes.length === 2) {
    [width, height] = sizes;
    frames = [asType(data)];
  } else if (sizes.length === 3 && (sizes[0] === 3 || sizes[0] === 4)) {
    [, width, height] = sizes;
    frames = [toGray(data, width * height, sizes[0])];
  } else if (sizes.length === 3) {
    [width, height] = sizes;
    const n = width * height;
    frames = Array.from({ length: sizes[2] }, (_, k) => asType(data.slice(k * n, (k + 1) * n)));
  } else {
    throw new Error(`an NRRD of ${sizes.length} axes (${sizes.join('x')}) is not a 2D image or clip`);
  }
  const sp = spacing.length >= 2 ? spacing.slice(0, 2) : [1, 1];
  return { imageIds: local(frames, width, height, sp), width, height, unit: spacing.length >= 2 ? 'mm' : 'px',
    voi: range(frames) };
}

async function nifti(bytes) {
  const { width, height, frames, spacing } = await readNifti(bytes);
  const typed = frames.map((f) => (f instanceof Uint8Array || f instanceof Uint16Array || f instanceof Int16Array
    || f instanceof Float32Array ? f : Float32Array.from(f)));
  return { imageIds: local(typed, width, height, spacing), width, height, unit: 'mm' };
}

async function dicom(bytes) {
  const ds = dicomParser.parseDicom(new Uint8Array(bytes), { untilTag: 'x7fe00010' });
  const frames = ds.intString('x00280008') || 1;
  const width = ds.uint16('x00280011');
  const height = ds.uint16('x00280010');
  const base = dicomImageLoader.wadouri.fileManager.add(new Blob([bytes]));
  const imageIds = frames > 1 ? Array.from({ length: frames }, (_, k) => `${base}?frame=${k + 1}`) : [base];
  await imageLoader.loadAndCacheImage(imageIds[0]);
  const regions = metaData.get('ultrasoundEnhancedRegionModule', imageIds[0]);
  const calibrated = Array.isArray(regions) ? regions.length > 0 : Boolean(regions?.length);
  return { imageIds, width, height, unit: calibrated ? 'mm (ultrasound regions)' : 'mm' };
}

/** {imageIds, width, height, unit} of a study's bytes; an Error naming the format problem. */
export async function loadStudy(bytes) {
  const kind = sniff(bytes);
  if (kind === 'png') return web(bytes, 'image/png');
  if (kind === 'jpeg') return web(bytes, 'image/jpeg');
  if (kind === 'nrrd') return nrrd(bytes);
  if (kind === 'dicom') return dicom(bytes);
  if (kind === 'nifti') return nifti(bytes);
  throw new Error('this study is not PNG, JPEG, NRRD, NIfTI or DICOM, the formats the viewer reads');
}
