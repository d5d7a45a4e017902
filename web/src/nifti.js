// NIfTI-1 in one file (.nii, .nii.gz): the header's grid, spacing and scaling, and the voxels (x fastest).
// A 2D image, a 2D+t clip (x, y, 1, t) or a volume (x, y, z: its slices are the frames, as the server slices the
// last axis by default). A header that names a separate .img (the ni1 pair) is refused, as the server refuses it.

const TYPES = { 2: Uint8Array, 4: Int16Array, 8: Int32Array, 16: Float32Array, 64: Float64Array, 256: Int8Array,
  512: Uint16Array, 768: Uint32Array };

async function gunzip(bytes) {
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

export const isGzip = (b) => b[0] === 0x1f && b[1] === 0x8b;

/** {width, height, frames: [Float32Array|typed], spacing} of a NIfTI-1 file's bytes; an Error naming the problem. */
export async function readNifti(buffer) {
  let bytes = new Uint8Array(buffer);
  if (isGzip(bytes)) bytes = await gunzip(bytes);
  if (bytes.length < 352) throw new Error('not a NIfTI-1 file: too short');
  let view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const little = view.getInt32(0, true) === 348;
  if (!little && view.getInt32(0, false) !== 348) throw new Error('not a NIfTI-1 file');
  const magic = String.fromCharCode(...bytes.subarray(344, 347));
  if (magic !== 'n+1') throw new Error('a NIfTI header whose voxels are in another file is not read here');
  const dim = Array.from({ length: 8 }, (_, i) => view.getInt16(40 + 2 * i, little));
  const type = view.getInt16(70, little);
  const pixdim = Array.from({ length: 8 }, (_, i) => view.getFloat32(76 + 4 * i, little));
  const offset = Math.round(view.getFloat32(108, little));
  const slope = view.getFloat32(112, little);
  const inter = view.getFloat32(116, little);
  const Type = TYPES[type];
  if (!Type) throw new Error(`NIfTI data type ${type} is not supported by the viewer`);
  const [n, x, y, z = 1, t = 1] = [dim[0], dim[1], dim[2], dim[3] || 1, dim[4] || 1];
  if (n < 2 || n > 4 || (z > 1 && t > 1)) throw new Error(`a NIfTI of ${dim.slice(1, n + 1).join('x')} is not a 2D image or clip`);
  const count = x * y * z * t;
  const need = count * Type.BYTES_PER_ELEMENT;
  if (bytes.length < offset + need) throw new Error(`NIfTI data is short: ${bytes.length - offset} of ${need} bytes`);
  const raw = bytes.slice(offset, offset + need);
  if (!little && Type.BYTES_PER_ELEMENT > 1) {
    for (let i = 0; i < raw.length; i += Type.BYTES_PER_ELEMENT) raw.subarray(i, i + Type.BYTES_PER_ELEMENT).reverse();
  }
  let data = new Type(raw.buffer);
  if (slope && (slope !== 1 || inter)) data = Float32Array.from(data, (v) => v * slope + inter);
  const per = x * y;
  const frames = Array.from({ length: z * t }, (_, k) => data.slice(k * per, (k + 1) * per));
  const spacing = [Math.abs(pixdim[1]) || 1, Math.abs(pixdim[2]) || 1];
  return { width: x, height: y, frames, spacing };
}
